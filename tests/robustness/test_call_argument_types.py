"""Arguments of the wrong type given to public methods are refused by name, not resolved as something else
(issue 41/42 audit): ``load_adapter(5)`` was looked up as a Hub id."""

from __future__ import annotations

from pathlib import Path

import pytest

import microformers
from microformers.errors import ConfigError

from ._build import llama_folder


@pytest.mark.parametrize("bad", [5, 1.5, b"folder", ["folder"], "", "   "])
def test_load_adapter_refuses_an_id_that_is_not_a_folder_or_hub_id_string(tmp_path: Path, bad: object) -> None:
    model = microformers.AutoModelForCausalLM.from_pretrained(llama_folder(tmp_path / "m"))
    with pytest.raises(ConfigError, match=r"load_adapter\(peft_model_id=.*\): pass the adapter's folder or Hub id"):
        model.load_adapter(bad)


def test_chat_and_serve_bound_threads_with_the_kernels_one_definition() -> None:
    import argparse

    from microformers.devices import MAX_CPU_THREADS
    from microformers_chat.commands import generate_command
    from microformers_serve.commands import serve_command

    for command in (generate_command, serve_command):
        parser = argparse.ArgumentParser(exit_on_error=False)
        command(parser)
        assert parser.parse_args(["model", "--threads", str(MAX_CPU_THREADS)]).threads == MAX_CPU_THREADS
        with pytest.raises(argparse.ArgumentError, match=r"is more than 1,024"):
            parser.parse_args(["model", "--threads", str(MAX_CPU_THREADS + 1)])
