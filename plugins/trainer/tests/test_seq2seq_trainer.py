"""Seq2SeqTrainer, Seq2SeqTrainingArguments and DataCollatorForSeq2Seq on a tiny T5 (the summarization flow:
tokenize sources and targets, collate with decoder inputs, train, evaluate and predict by generating)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from trainer_helpers import SEQ2SEQ_WORDS, tiny_t5, write_t5_word_tokenizer

import microformers
from microformers import ConfigError, InputError

pytest.importorskip("microformers_t5", reason="the Seq2SeqTrainer tests train a tiny T5")
transformers = pytest.importorskip("transformers", reason="the reference implementation is the test oracle")


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny T5 folder with its word-level tokenizer."""
    path = tmp_path_factory.mktemp("tiny-t5")
    vocab_size = write_t5_word_tokenizer(path)
    tiny_t5(vocab_size).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def tokenizer(folder: Path) -> Any:
    return microformers.AutoTokenizer.from_pretrained(folder)


def copy_task(tokenizer: Any, n: int, seed: int = 0) -> list[dict[str, Any]]:
    """A toy summary: 2 to 6 words -> their first two, tokenized (sources and targets of different lengths)."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        words = [rng.choice(SEQ2SEQ_WORDS[1:]) for _ in range(rng.randint(2, 6))]
        rows.append({**tokenizer(" ".join(words)), "labels": tokenizer(text_target=" ".join(words[:2]))["input_ids"]})
    return rows


def varied_features(tokenizer: Any, n: int, seed: int) -> list[dict[str, Any]]:
    """2 to 6 words -> the same words: sources and targets of different lengths within a batch."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        words = " ".join(rng.choice(SEQ2SEQ_WORDS[1:]) for _ in range(rng.randint(2, 6)))
        rows.append({**tokenizer(words), "labels": tokenizer(text_target=words)["input_ids"]})
    return rows


def seq2seq_args(tmp_path: Path, **kwargs: Any) -> Any:
    defaults = {
        "output_dir": str(tmp_path / "out"),
        "per_device_train_batch_size": 8,
        "per_device_eval_batch_size": 4,
        "learning_rate": 1e-2,
        "max_steps": 100,
        "logging_steps": 10,
        "save_strategy": "no",
        "disable_tqdm": True,
        "report_to": "none",
        "predict_with_generate": True,
        "generation_max_length": 8,
    }
    return microformers.Seq2SeqTrainingArguments(**{**defaults, **kwargs})


# -- DataCollatorForSeq2Seq against the reference ---------------------------------------------------------
@pytest.mark.parametrize(
    "options",
    [
        {},
        {"pad_to_multiple_of": 4},
        {"padding": "max_length", "max_length": 9},
        {"label_pad_token_id": 0},
        {"padding": "longest", "pad_to_multiple_of": 3},
    ],
)
@pytest.mark.parametrize("padding_side", ["right", "left"])
def test_collator_equals_the_reference_with_decoder_input_ids(folder, tokenizer, options, padding_side):
    ours_tok = microformers.AutoTokenizer.from_pretrained(folder, padding_side=padding_side)
    ref_tok = transformers.AutoTokenizer.from_pretrained(folder, padding_side=padding_side)
    ours_model = microformers.AutoModelForSeq2SeqLM.from_pretrained(folder)
    ref_model = transformers.AutoModelForSeq2SeqLM.from_pretrained(folder)
    features = varied_features(tokenizer, 5, seed=1)
    ours = microformers.DataCollatorForSeq2Seq(ours_tok, model=ours_model, **options)([dict(f) for f in features])
    theirs = transformers.DataCollatorForSeq2Seq(ref_tok, model=ref_model, **options)([dict(f) for f in features])
    assert set(ours) == set(theirs) == {"input_ids", "attention_mask", "labels", "decoder_input_ids"}
    for key, value in ours.items():
        assert value.dtype == theirs[key].dtype and torch.equal(value, theirs[key]), key
    assert (ours["labels"] == options.get("label_pad_token_id", -100)).any()


def test_collator_without_a_model_or_labels_and_with_label_key(folder, tokenizer):
    ref_tok = transformers.AutoTokenizer.from_pretrained(folder)
    features = varied_features(tokenizer, 4, seed=2)
    ours = microformers.DataCollatorForSeq2Seq(tokenizer)([dict(f) for f in features])
    theirs = transformers.DataCollatorForSeq2Seq(ref_tok)([dict(f) for f in features])
    assert set(ours) == set(theirs) == {"input_ids", "attention_mask", "labels"}
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)
    unlabeled = [{k: v for k, v in f.items() if k != "labels"} for f in features]
    assert set(microformers.DataCollatorForSeq2Seq(tokenizer)(unlabeled)) == {"input_ids", "attention_mask"}
    as_label = [{**{k: v for k, v in f.items() if k != "labels"}, "label": f["labels"]} for f in features]
    assert torch.equal(microformers.DataCollatorForSeq2Seq(tokenizer)(as_label)["labels"], ours["labels"])
    same_inputs = [{**tokenizer("one two"), "labels": tokenizer(text_target="one " * n)["input_ids"]} for n in (1, 2)]
    with pytest.raises(InputError, match="labels of one length"):
        microformers.DataCollatorForSeq2Seq(tokenizer, padding=False)(same_inputs)
    same_inputs[1]["labels"] = same_inputs[0]["labels"]
    unpadded = microformers.DataCollatorForSeq2Seq(tokenizer, padding=False)(same_inputs)
    assert unpadded["labels"].tolist() == [same_inputs[0]["labels"]] * 2


# -- Seq2SeqTrainingArguments ------------------------------------------------------------------------------
def test_seq2seq_training_arguments(tmp_path):
    args = seq2seq_args(tmp_path, generation_num_beams=2, generation_config=microformers.GenerationConfig(max_length=7))
    assert isinstance(args, microformers.TrainingArguments)
    assert (args.predict_with_generate, args.generation_max_length, args.generation_num_beams) == (True, 8, 2)
    saved = json.loads(args.to_json_string())
    assert saved["generation_config"]["max_length"] == 7 and saved["sortish_sampler"] is False
    defaults = microformers.Seq2SeqTrainingArguments(output_dir=str(tmp_path))
    reference = transformers.Seq2SeqTrainingArguments(output_dir=str(tmp_path))
    for name in ("sortish_sampler", "predict_with_generate", "generation_max_length", "generation_num_beams"):
        assert getattr(defaults, name) == getattr(reference, name), name
    with pytest.raises(ConfigError, match="sortish_sampler"):
        microformers.Seq2SeqTrainingArguments(output_dir=str(tmp_path), sortish_sampler=True)
    with pytest.raises(ConfigError, match="generation_num_beams"):
        microformers.Seq2SeqTrainingArguments(output_dir=str(tmp_path), generation_num_beams=0)
    with pytest.raises(ConfigError, match="generation_config"):
        microformers.Seq2SeqTrainingArguments(output_dir=str(tmp_path), generation_config=3)


# -- the summarization flow ----------------------------------------------------------------------------
def test_train_evaluate_and_predict_with_generate(folder, tokenizer, tmp_path):
    model = microformers.AutoModelForSeq2SeqLM.from_pretrained(folder)
    collator = microformers.DataCollatorForSeq2Seq(tokenizer, model=model)
    seen: list[tuple[np.ndarray, np.ndarray]] = []

    def compute_metrics(prediction: Any) -> dict[str, float]:
        predictions, labels = prediction
        seen.append((predictions, labels))
        labels = np.where(labels != -100, labels, tokenizer.pad_token_id)
        decoded = tokenizer.batch_decode(predictions, skip_special_tokens=True)
        targets = tokenizer.batch_decode(labels, skip_special_tokens=True)
        return {"exact_match": float(np.mean([p == t for p, t in zip(decoded, targets)]))}

    train, held_out = copy_task(tokenizer, 64, seed=0), copy_task(tokenizer, 6, seed=9)
    trainer = microformers.Seq2SeqTrainer(
        model=model,
        args=seq2seq_args(tmp_path),
        data_collator=collator,
        train_dataset=train,
        eval_dataset=held_out,
        processing_class=tokenizer,
        compute_metrics=compute_metrics,
    )
    before = trainer.evaluate()
    trainer.train()
    losses = [row["loss"] for row in trainer.state.log_history if "loss" in row]
    assert losses[-1] < 0.6 * losses[0], losses
    after = trainer.evaluate()
    assert after["eval_loss"] < before["eval_loss"]
    predictions, labels = seen[-1]
    assert predictions.shape == (6, 8) and labels.shape == (6, 8)  # padded to generation_max_length
    # the predictions are what generate gives on each batch, padded with the pad token
    batch = collator(held_out[:4])
    generated = model.generate(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], max_length=8)
    assert torch.equal(torch.from_numpy(predictions[:4, : generated.shape[1]]), generated)
    assert (predictions[:4, generated.shape[1] :] == tokenizer.pad_token_id).all()

    output = trainer.predict(held_out)
    assert output.predictions.shape == (6, 8) and output.predictions.dtype == np.int64
    assert set(output.metrics) >= {"test_loss", "test_exact_match"}
    texts = tokenizer.batch_decode(output.predictions, skip_special_tokens=True)
    assert all(isinstance(t, str) and t for t in texts)
    assert after["eval_exact_match"] == output.metrics["test_exact_match"]


def test_generation_settings_and_overrides(folder, tokenizer, tmp_path):
    model = microformers.AutoModelForSeq2SeqLM.from_pretrained(folder)
    collator = microformers.DataCollatorForSeq2Seq(tokenizer, model=model)
    data = copy_task(tokenizer, 5, seed=3)
    widths: list[int] = []

    def compute_metrics(prediction: Any) -> dict[str, float]:
        predictions = prediction.predictions
        widths.append(predictions.shape[1] if isinstance(predictions, np.ndarray) else -1)
        return {}

    args = seq2seq_args(tmp_path, generation_num_beams=2)
    trainer = microformers.Seq2SeqTrainer(
        model=model, args=args, data_collator=collator, processing_class=tokenizer, compute_metrics=compute_metrics
    )
    calls: list[dict[str, Any]] = []
    generate = model.generate

    def recording_generate(*a: Any, **kw: Any) -> Any:
        calls.append({k: v for k, v in kw.items() if k not in ("input_ids", "attention_mask")})
        return generate(*a, **kw)

    model.generate = recording_generate
    metrics = trainer.evaluate(data)
    assert calls[-1] == {"max_length": 8, "num_beams": 2} and widths[-1] == 8
    assert "eval_loss" in metrics
    trainer.evaluate(data, max_length=5, num_beams=1)
    assert calls[-1] == {"max_length": 5, "num_beams": 1} and widths[-1] == 5
    trainer.evaluate(data, max_new_tokens=3)
    assert calls[-1] == {"max_new_tokens": 3, "num_beams": 2} and widths[-1] == 4
    # beam search predictions equal generate's with the same settings
    output = trainer.predict(data[:4])
    batch = collator(data[:4])
    expected = generate(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], max_length=8, num_beams=2)
    assert torch.equal(torch.from_numpy(output.predictions[:, : expected.shape[1]]), expected)
    # without predict_with_generate: logits, as Trainer
    count = len(calls)
    logits = trainer.predict(data[:4], predict_with_generate=False).predictions
    assert len(calls) == count and logits[0].ndim == 3
    plain = microformers.Seq2SeqTrainer(
        model=model,
        args=seq2seq_args(tmp_path, predict_with_generate=False),
        data_collator=collator,
        processing_class=tokenizer,
    )
    assert plain.predict(data[:4], predict_with_generate=True).predictions.shape == (4, 8)


def test_generation_config_argument_replaces_the_models(folder, tokenizer, tmp_path):
    model = microformers.AutoModelForSeq2SeqLM.from_pretrained(folder)
    config = microformers.GenerationConfig(max_length=6, num_beams=1, decoder_start_token_id=0, eos_token_id=1)
    config.save_pretrained(tmp_path / "gen")
    for source in (config, tmp_path / "gen", str(tmp_path / "gen" / "generation_config.json")):
        args = seq2seq_args(tmp_path, generation_config=source, generation_max_length=None)
        trainer = microformers.Seq2SeqTrainer(model=model, args=args, processing_class=tokenizer)
        assert model.generation_config.max_length == 6 and model.generation_config is not config
        output = trainer.predict(copy_task(tokenizer, 3, seed=4))
        assert output.predictions.shape == (3, 6)
    bad = microformers.GenerationConfig(num_beams=0)
    with pytest.raises(ConfigError, match="generation_config"):
        microformers.Seq2SeqTrainer(model=model, args=seq2seq_args(tmp_path, generation_config=bad))


def test_predict_with_generate_needs_a_generating_model(tmp_path):
    trainer = microformers.Seq2SeqTrainer(model=torch.nn.Linear(2, 2), args=seq2seq_args(tmp_path))
    with pytest.raises(ConfigError, match="generate"):
        trainer.prediction_step(trainer.model, {"input_ids": torch.ones(1, 2, dtype=torch.long)}, False)


def test_the_new_names_are_exported():
    from microformers_trainer.plugin import EXPORTS

    for name in ("Seq2SeqTrainer", "Seq2SeqTrainingArguments", "DataCollatorForSeq2Seq"):
        assert name in EXPORTS and getattr(microformers, name).__name__ == name
