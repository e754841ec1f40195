"""``pipe(None)`` (alone, in a list, in a stream) is an InputError naming the task, in every pipeline: a custom
``Pipeline`` whose ``preprocess`` hands the input to the tokenizer used to fail with a raw TypeError."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import microformers
from microformers import InputError
from microformers_pipelines.base import Pipeline


class EchoLengthPipeline(Pipeline):
    """A minimal custom task with no input checks of its own (as the reference's add_new_pipeline example)."""

    def preprocess(self, inputs: Any) -> dict[str, Any]:
        return dict(self.tokenizer(inputs, return_tensors="pt"))

    def _forward(self, model_inputs: dict[str, Any]) -> dict[str, Any]:
        return {"length": model_inputs["input_ids"].shape[1]}

    def postprocess(self, model_outputs: dict[str, Any]) -> int:
        return int(model_outputs["length"])


@pytest.mark.parametrize(
    "make_inputs",
    [lambda: None, lambda: ["a sentence", None], lambda: iter(["a sentence", None])],
    ids=["one", "list", "stream"],
)
def test_none_as_input_is_an_input_error_naming_the_task(
    make_bert: Callable[..., Path], make_inputs: Callable[[], Any]
) -> None:
    folder = make_bert("AutoModel")
    custom = EchoLengthPipeline(
        microformers.AutoModel.from_pretrained(folder), microformers.AutoTokenizer.from_pretrained(folder), task="echo"
    )
    assert custom("a sentence") > 2  # the pipeline works on a real input
    with pytest.raises(InputError, match=r"the 'echo' pipeline got None as an input: pass the input itself"):
        result = custom(make_inputs())
        list(result)  # a stream's results come lazily (a list's were made already)


def test_none_is_refused_by_a_registered_task_before_its_own_checks(make_bert: Callable[..., Path]) -> None:
    extract = microformers.pipeline("feature-extraction", model=str(make_bert("AutoModel")))
    with pytest.raises(InputError, match=r"the 'feature-extraction' pipeline got None"):
        extract(None)
    with pytest.raises(InputError, match=r"the 'feature-extraction' pipeline got None"):
        extract()  # the input left out entirely
