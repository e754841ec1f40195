"""The Pipeline API the reference documents (issue 18 item 5): datasets as input, device_map, task
inference, a public forward(), save_pretrained and the add_new_pipeline example verbatim."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import microformers
from microformers import KeyDataset, MicroformersError


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
    assert list(streamed) == expected

    class Plain(torch.utils.data.Dataset):  # type: ignore[type-arg]
        def __len__(self) -> int:
            return len(TEXTS)

        def __getitem__(self, i: int) -> str:
            return TEXTS[i]

    assert list(pipe(Plain())) == expected


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
    assert torch.equal(outputs["logits"], direct)
    pipe.save_pretrained(tmp_path / "saved")
    again = microformers.pipeline("fill-mask", model=str(tmp_path / "saved"))
    assert again(TEXTS[0]) == pipe(TEXTS[0])
    with pytest.raises(MicroformersError, match="push_to_hub"):
        pipe.save_pretrained(tmp_path / "other", push_to_hub=True)


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
