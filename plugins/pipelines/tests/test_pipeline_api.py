"""The Pipeline API the reference documents (issue 18 item 5): datasets as input, device_map, task
inference, a public forward(), save_pretrained and the add_new_pipeline example verbatim."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import microformers
from microformers import KeyDataset, MicroformersError
from microformers_sdk.testing import assert_close


class _Rows(torch.utils.data.Dataset):  # type: ignore[type-arg]
    def __init__(self, rows: list[dict[str, str]]) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, str]:
        return self.rows[i]


TEXTS = ["Paris is the [MASK] of France.", "The [MASK] sat on the mat.", "I [MASK] you."]


def test_dataset_and_key_dataset_inputs(make_bert) -> None:
    pipe = microformers.pipeline("fill-mask", model=str(make_bert("AutoModelForMaskedLM")), top_k=2)
    expected = pipe(TEXTS)
    streamed = pipe(KeyDataset(_Rows([{"text": t} for t in TEXTS]), "text"), batch_size=2)
    assert not isinstance(streamed, list)  # a Dataset streams, as the reference's iterator does
    # a batch of 2 (padded) against one text at a time: other matrix shapes, so scores within tolerance
    assert_close(list(streamed), expected)

    class Plain(torch.utils.data.Dataset):  # type: ignore[type-arg]
        def __len__(self) -> int:
            return len(TEXTS)

        def __getitem__(self, i: int) -> str:
            return TEXTS[i]

    assert list(pipe(Plain())) == expected  # exact: one text at a time both ways, the same path and shapes


def test_task_inferred_from_the_config(make_bert, tmp_path: Path) -> None:
    pipe = microformers.pipeline(model=str(make_bert("AutoModelForMaskedLM")))
    assert pipe.task == "fill-mask"
    with pytest.raises(MicroformersError, match="tasks that fit this model: .*text-classification"):
        microformers.pipeline(model=str(make_bert("AutoModelForSequenceClassification")))
    with pytest.raises(MicroformersError, match="pass a task"):
        microformers.pipeline()


def test_public_forward_and_save_pretrained(make_bert, tmp_path: Path) -> None:
    pipe = microformers.pipeline("fill-mask", model=str(make_bert("AutoModelForMaskedLM")))
    inputs = pipe.preprocess(TEXTS[0])
    outputs = pipe.forward(inputs)
    direct = pipe.model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"]).logits
    assert torch.equal(outputs["logits"], direct)  # exact: the same model on the same inputs and shapes
    pipe.save_pretrained(tmp_path / "saved")
    again = microformers.pipeline("fill-mask", model=str(tmp_path / "saved"))
    assert again(TEXTS[0]) == pipe(TEXTS[0])  # exact: a save/load copy of the weights, the same path
    with pytest.raises(MicroformersError, match="push_to_hub"):
        pipe.save_pretrained(tmp_path / "other", push_to_hub=True)
    pipe.save_pretrained(tmp_path / "legacy", safe_serialization=False)  # passed to the model's save
    assert (tmp_path / "legacy" / "pytorch_model.bin").is_file()
    legacy = microformers.pipeline("fill-mask", model=str(tmp_path / "legacy"), use_safetensors=False)
    assert legacy(TEXTS[0]) == pipe(TEXTS[0])  # exact: a save/load copy of the weights, the same path


# -- the add_new_pipeline guide's example, verbatim but for the import lines ------------------------
from microformers import Pipeline  # noqa: E402


def softmax(outputs):
    maxes = np.max(outputs, axis=-1, keepdims=True)
    shifted_exp = np.exp(outputs - maxes)
    return shifted_exp / shifted_exp.sum(axis=-1, keepdims=True)


class PairClassificationPipeline(Pipeline):
    def _sanitize_parameters(self, **kwargs):
        preprocess_kwargs = {}
        if "second_text" in kwargs:
            preprocess_kwargs["second_text"] = kwargs["second_text"]
        return preprocess_kwargs, {}, {}

    def preprocess(self, text, second_text=None):
        return self.tokenizer(text, text_pair=second_text, return_tensors=self.framework)

    def _forward(self, model_inputs):
        return self.model(**model_inputs)

    def postprocess(self, model_outputs):
        logits = model_outputs.logits[0].numpy()
        probabilities = softmax(logits)

        best_class = np.argmax(probabilities)
        label = self.model.config.id2label[best_class]
        score = probabilities[best_class].item()
        logits = logits.tolist()
        return {"label": label, "score": score, "logits": logits}


@pytest.fixture
def forget_pair_classification():
    yield
    from microformers.plugins import registry

    registry._entries.pop(("pipelines", "pair-classification"), None)  # keep other tests' task lists as installed


def test_add_new_pipeline_example(make_bert, forget_pair_classification) -> None:
    from microformers import AutoModelForSequenceClassification
    from microformers.pipelines import PIPELINE_REGISTRY

    PIPELINE_REGISTRY.register_pipeline(
        "pair-classification",
        pipeline_class=PairClassificationPipeline,
        pt_model=AutoModelForSequenceClassification,
    )
    folder = str(make_bert("AutoModelForSequenceClassification", num_labels=3))
    classifier = microformers.pipeline("pair-classification", model=folder)
    result = classifier("I like you", second_text="I love you")
    model = microformers.AutoModelForSequenceClassification.from_pretrained(folder)
    tokenizer = microformers.AutoTokenizer.from_pretrained(folder)
    with torch.no_grad():
        logits = model(**tokenizer("I like you", text_pair="I love you", return_tensors="pt")).logits[0]
    assert np.allclose(result["logits"], logits.tolist(), atol=1e-5)
    assert result["label"] == model.config.id2label[int(logits.argmax())]
    assert result["score"] == pytest.approx(float(logits.softmax(-1).max()), abs=1e-5)
    batch = classifier(["I like you", "Hello"], batch_size=2)
    assert [r["label"] for r in batch] == [result["label"], classifier("Hello")["label"]]
    # a padded batch of 2 against one at a time: other shapes, so scores and logits within tolerance
    assert_close(batch, [classifier("I like you"), classifier("Hello")])


# -- save_pretrained of a custom pipeline: its code and custom_pipelines go into the folder ----------
def _import_file(path: Path) -> Any:
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


def test_custom_pipeline_save_pretrained_reloads_with_trust_remote_code(
    make_bert, tmp_path: Path, forget_pair_classification
) -> None:
    import inspect
    import json
    import sys

    from microformers import RemoteCodeError
    from microformers.pipelines import PIPELINE_REGISTRY
    from microformers.plugins import registry

    code = tmp_path / "code" / "pair_classification.py"
    code.parent.mkdir()
    code.write_text(
        "import numpy as np\nfrom microformers import Pipeline\n\n\n"
        + inspect.getsource(softmax) + "\n\n" + inspect.getsource(PairClassificationPipeline)
    )
    module = _import_file(code)
    try:
        PIPELINE_REGISTRY.register_pipeline(
            "pair-classification", pipeline_class=module.PairClassificationPipeline,
            pt_model="AutoModelForSequenceClassification",
        )
        pipe = microformers.pipeline(
            "pair-classification", model=str(make_bert("AutoModelForSequenceClassification", num_labels=3))
        )
        expected = pipe("I like you", second_text="I love you")
        saved = tmp_path / "saved"
        pipe.save_pretrained(saved)
    finally:  # what a fresh process sees: neither the module nor the registration
        sys.modules.pop("pair_classification", None)
        registry._entries.pop(("pipelines", "pair-classification"), None)
    config = json.loads((saved / "config.json").read_text())
    assert config["custom_pipelines"] == {
        "pair-classification": {
            "impl": "pair_classification.PairClassificationPipeline", "pt": ["AutoModelForSequenceClassification"]
        }
    }
    assert (saved / "pair_classification.py").read_text() == code.read_text()
    with pytest.raises(RemoteCodeError, match=r"pair_classification\.py.*trust_remote_code=True"):
        microformers.pipeline(model=str(saved))
    again = microformers.pipeline(model=str(saved), trust_remote_code=True)  # task from custom_pipelines
    assert type(again).__module__.startswith("microformers_remote_code.")
    assert again.task == "pair-classification"
    assert again("I like you", second_text="I love you") == expected  # exact: a save/load copy, the same path
    again.save_pretrained(tmp_path / "resaved")  # a reloaded custom pipeline saves its code again
    third = microformers.pipeline("pair-classification", model=str(tmp_path / "resaved"), trust_remote_code=True)
    assert third("I like you", second_text="I love you") == expected  # exact: a save/load copy, the same path


def test_custom_pipeline_defined_in_main_is_refused_by_save(make_bert, tmp_path: Path, forget_pair_classification):
    from microformers.pipelines import PIPELINE_REGISTRY

    script_class = type("ScriptPipeline", (PairClassificationPipeline,), {"__module__": "__main__"})
    PIPELINE_REGISTRY.register_pipeline(
        "pair-classification", pipeline_class=script_class, pt_model="AutoModelForSequenceClassification"
    )
    pipe = microformers.pipeline(
        "pair-classification", model=str(make_bert("AutoModelForSequenceClassification", num_labels=3))
    )
    with pytest.raises(MicroformersError, match="module of its own"):
        pipe.save_pretrained(tmp_path / "saved")
    assert not (tmp_path / "saved" / "config.json").exists()
