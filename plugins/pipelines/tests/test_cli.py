"""``microformers run``: arguments or stdin lines in, JSON lines out."""

from __future__ import annotations

import io
import json

import pytest

from microformers.cli import main


@pytest.fixture(scope="module")
def fill_mask_model(make_bert):
    return str(make_bert("AutoModelForMaskedLM"))


def test_run_on_arguments(fill_mask_model, capsys):
    assert (
        main(["run", "-m", fill_mask_model, "-o", "top_k=2", "fill-mask", "Paris is the [MASK].", "Hello [MASK]!"]) == 0
    )
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2
    first = json.loads(lines[0])
    assert len(first) == 2 and set(first[0]) == {"score", "token", "token_str", "sequence"}


def test_run_options_may_stand_between_the_task_and_the_inputs(fill_mask_model, capsys):
    assert main(["run", "-m", fill_mask_model, "-o", "top_k=2", "fill-mask", "Paris is the [MASK]."]) == 0
    before = capsys.readouterr().out
    assert main(["run", "fill-mask", "-m", fill_mask_model, "Paris is the [MASK].", "-o", "top_k=2"]) == 0
    # exact: the same model, input and options through the same code
    assert capsys.readouterr().out == before


def test_run_on_stdin_lines(fill_mask_model, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO("one [MASK]\n\ntwo [MASK] three\n"))
    assert main(["run", "fill-mask", "--model", fill_mask_model, "--batch-size", "2", "-o", "top_k=1"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
    assert [len(x) for x in lines] == [1, 1]
    assert lines[1][0]["sequence"].startswith("two")


def test_run_parses_json_inputs(make_bert, capsys):
    model = str(make_bert("AutoModelForQuestionAnswering"))
    item = json.dumps({"question": "Who built it?", "context": "Gustave Eiffel built the tower in Paris."})
    assert main(["run", "question-answering", item, "-m", model]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert "Gustave Eiffel built the tower in Paris."[answer["start"] : answer["end"]] == answer["answer"]


def test_errors_exit_with_a_message(fill_mask_model, capsys):
    assert main(["run", "no-such-task", "x"]) == 2
    assert "no-such-task" in capsys.readouterr().err
    assert main(["run", "fill-mask", "no mask", "-m", fill_mask_model]) == 2
    assert "[MASK]" in capsys.readouterr().err
    assert main(["run", "fill-mask", "a [MASK]", "-m", fill_mask_model, "-o", "top_k"]) == 2
    assert "KEY=VALUE" in capsys.readouterr().err
