"""Trainer on its own: the loop, evaluation, callbacks and integrations, arguments, and every bad-input error."""

from __future__ import annotations

import ast
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from trainer_helpers import cls_rows, lm_rows, tiny_bert_classifier, tiny_gpt2

import microformers
from microformers import (
    CheckpointError,
    ConfigError,
    EarlyStoppingCallback,
    EvalPrediction,
    InputError,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)
from microformers_trainer.plugin import EXPORTS
from microformers_trainer.trainer import TrainingError


def test_every_export_resolves_from_microformers() -> None:
    for name in EXPORTS:
        assert getattr(microformers, name).__name__ == name
    assert microformers.registry.get("exports", "Trainer").plugin == "trainer"
    assert {"jsonl", "tensorboard"} <= set(microformers.registry.names("callbacks"))


def test_training_arguments_defaults_match_the_reference() -> None:
    args = TrainingArguments()
    assert args.output_dir == "trainer_output"
    assert (args.learning_rate, args.num_train_epochs, args.per_device_train_batch_size) == (5e-5, 3.0, 8)
    assert (args.lr_scheduler_type, args.optim, args.report_to, args.save_steps) == (
        "linear",
        "adamw_torch_fused",
        ["none"],
        500,
    )
    assert args.get_warmup_steps(100) == 0
    assert TrainingArguments(warmup_steps=0.1).get_warmup_steps(95) == 10
    assert TrainingArguments(warmup_ratio=0.2).get_warmup_steps(10) == 2


class Recorder(TrainerCallback):
    def __init__(self) -> None:
        self.events: list[str] = []
        self.metrics: list[dict[str, float]] = []

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("on_"):
            events = object.__getattribute__(self, "events")
            metrics = object.__getattribute__(self, "metrics")

            def record(args: Any, state: Any, control: Any, **kwargs: Any) -> None:
                events.append(name)
                if "metrics" in kwargs:
                    metrics.append(kwargs["metrics"])

            return record
        return object.__getattribute__(self, name)


def test_train_evaluate_predict_with_metrics_and_events(args_factory: Any) -> None:
    seen: list[EvalPrediction] = []

    def accuracy(pred: EvalPrediction) -> dict[str, float]:
        seen.append(pred)
        predictions, labels = pred
        return {"accuracy": float((predictions.argmax(-1) == labels).mean())}

    recorder = Recorder()
    model = tiny_bert_classifier()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    args = args_factory(gradient_accumulation_steps=2, num_train_epochs=2, eval_strategy="epoch", learning_rate=5e-3)
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=cls_rows(16),
        eval_dataset=cls_rows(6, seed=1),
        compute_metrics=accuracy,
        callbacks=[recorder],
    )
    output = trainer.train()
    assert output.global_step == trainer.state.global_step == 4
    steps = [h for h in trainer.state.log_history if "loss" in h]
    assert [h["step"] for h in steps] == [1, 2, 3, 4]
    assert all(math.isfinite(h["loss"]) and "learning_rate" in h and "grad_norm" in h for h in steps)
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())
    evals = [h for h in trainer.state.log_history if "eval_loss" in h]
    assert [h["epoch"] for h in evals] == [1.0, 2.0] and "eval_accuracy" in evals[0]
    assert seen[0].predictions.shape == (6, 3) and seen[0].label_ids.tolist() == [i % 3 for i in range(6)]
    events = recorder.events
    assert events[0] == "on_init_end" and events[1] == "on_train_begin" and events[-1] == "on_train_end"
    for name in ("on_epoch_begin", "on_step_begin", "on_substep_end", "on_pre_optimizer_step", "on_optimizer_step",
                 "on_step_end", "on_log", "on_evaluate", "on_prediction_step", "on_epoch_end"):  # fmt: skip
        assert name in events, name
    assert events.index("on_substep_end") < events.index("on_pre_optimizer_step") < events.index("on_optimizer_step")
    prediction = trainer.predict(cls_rows(5, seed=2))
    assert prediction.predictions.shape == (5, 3) and prediction.label_ids.shape == (5,)
    assert {"test_loss", "test_accuracy"} <= set(prediction.metrics)
    assert "on_predict" in recorder.events
    metrics = trainer.evaluate()
    assert metrics["eval_loss"] == pytest.approx(evals[-1]["eval_loss"], abs=1e-6)


def test_gradient_accumulation_equals_one_big_batch(args_factory: Any) -> None:
    def final(**kwargs: Any) -> dict[str, torch.Tensor]:
        model = tiny_gpt2(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        args = args_factory(optim="sgd", learning_rate=0.5, max_grad_norm=0, **kwargs)
        trainer = Trainer(model=model, args=args, train_dataset=lm_rows(8))
        trainer._get_train_sampler = lambda ds: torch.utils.data.SequentialSampler(ds)  # type: ignore[method-assign]
        trainer.train()
        return model.state_dict()

    big = final(per_device_train_batch_size=4)
    small = final(per_device_train_batch_size=2, gradient_accumulation_steps=2)
    for name, tensor in big.items():
        torch.testing.assert_close(small[name], tensor, rtol=0, atol=1e-6)


def test_weight_decay_skips_biases_and_norm_weights(args_factory: Any) -> None:
    trainer = Trainer(model=tiny_gpt2(), args=args_factory(weight_decay=0.1), train_dataset=lm_rows(4))
    names = set(trainer.get_decay_parameter_names(trainer.model))
    assert "transformer.h.0.attn.c_attn.weight" in names
    assert not [n for n in names if n.endswith("bias") or ".ln_" in n]
    optimizer = trainer.create_optimizer()
    assert [g["weight_decay"] for g in optimizer.param_groups] == [0.1, 0.0]
    decayed = {id(p) for p in optimizer.param_groups[0]["params"]}
    assert id(trainer.model.transformer.ln_f.weight) not in decayed


@pytest.mark.parametrize(("optim", "cls"), [("sgd", "SGD"), ("adafactor", "Adafactor"), ("adamw_torch", "AdamW")])
def test_optimizer_choice(args_factory: Any, optim: str, cls: str) -> None:
    trainer = Trainer(model=tiny_gpt2(), args=args_factory(optim=optim, max_steps=2), train_dataset=lm_rows(8))
    trainer.train()
    assert type(trainer.optimizer).__name__ == cls


def test_label_smoothing_equals_torch_cross_entropy(args_factory: Any) -> None:
    model = tiny_bert_classifier().eval()
    trainer = Trainer(model=model, args=args_factory(label_smoothing_factor=0.2), train_dataset=cls_rows(4))
    batch = microformers.default_data_collator(cls_rows(4))
    loss, outputs = trainer.compute_loss(model, dict(batch), return_outputs=True)
    expected = torch.nn.functional.cross_entropy(outputs["logits"], batch["labels"], label_smoothing=0.2)
    torch.testing.assert_close(loss, expected)


def test_iterable_dataset_needs_max_steps(args_factory: Any) -> None:
    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self) -> Any:
            yield from lm_rows(100)

    with pytest.raises(ConfigError, match="max_steps"):
        Trainer(model=tiny_gpt2(), args=args_factory(), train_dataset=Stream()).train()
    trainer = Trainer(model=tiny_gpt2(), args=args_factory(max_steps=3), train_dataset=Stream())
    assert trainer.train().global_step == 3


def test_remove_unused_columns_drops_what_forward_does_not_take(args_factory: Any) -> None:
    rows = [{**r, "text": "a string", "idx": i} for i, r in enumerate(cls_rows(8))]
    seen: list[set[str]] = []

    class Peek(TrainerCallback):
        pass

    model = tiny_bert_classifier()
    original = model.forward

    def forward(**kwargs: Any) -> Any:
        seen.append(set(kwargs))
        return original(**kwargs)

    model.forward = forward  # type: ignore[method-assign]
    trainer = Trainer(model=model, args=args_factory(max_steps=1), train_dataset=rows, callbacks=[Peek()])
    trainer._forward_params = list(__import__("inspect").signature(original).parameters)
    trainer.train()
    assert seen and seen[0] - {"num_items_in_batch"} == {"input_ids", "labels"}


def test_columnar_dataset_columns_are_removed(args_factory: Any) -> None:
    class Columns(torch.utils.data.Dataset):  # the shape of a datasets.Dataset: column_names + remove_columns
        def __init__(self, rows: list[dict[str, Any]]) -> None:
            self.rows = rows
            self.column_names = list(rows[0])

        def __len__(self) -> int:
            return len(self.rows)

        def __getitem__(self, i: int) -> dict[str, Any]:
            return self.rows[i]

        def remove_columns(self, names: list[str]) -> Columns:
            return Columns([{k: v for k, v in r.items() if k not in names} for r in self.rows])

    data = Columns([{**r, "note": 1.5} for r in cls_rows(8)])
    trainer = Trainer(model=tiny_bert_classifier(), args=args_factory(max_steps=1), train_dataset=data)
    assert trainer._prepare_dataset(data).column_names == ["input_ids", "labels"]
    trainer.train()
    with pytest.raises(InputError, match="every column"):
        trainer._prepare_dataset(Columns([{"a": 1, "b": 2}]))


def test_jsonl_and_tensorboard_integrations(args_factory: Any, tmp_path: Path) -> None:
    pytest.importorskip("tensorboard", reason="report_to='tensorboard' needs tensorboard (requirements-test.txt)")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    args = args_factory(max_steps=3, report_to=["jsonl", "tensorboard"], run_name="run1")
    trainer = Trainer(model=tiny_gpt2(), args=args, train_dataset=lm_rows(12))
    trainer.train()
    lines = [json.loads(x) for x in (Path(args.output_dir) / "training_log.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines if "loss" in x] == [1, 2, 3]
    assert "train_runtime" in lines[-1]
    events = EventAccumulator(str(Path(args.output_dir) / "runs" / "run1"))
    events.Reload()
    losses = events.Scalars("train/loss")
    assert [e.step for e in losses] == [1, 2, 3]
    assert losses[0].value == pytest.approx(lines[0]["loss"], rel=1e-6)


def test_third_party_integration_by_entry_point_and_all(args_factory: Any) -> None:
    assert microformers.registry.get("callbacks", "recorder").plugin == "test-recorder"
    args = args_factory(max_steps=2, report_to="recorder")
    Trainer(model=tiny_gpt2(), args=args, train_dataset=lm_rows(8)).train()
    lines = (Path(args.output_dir) / "recorder-events.txt").read_text().splitlines()
    assert lines[0] == "on_init_end 0" and lines[-1] == "on_train_end 2" and "on_step_end 2" in lines
    everything = Trainer(model=tiny_gpt2(), args=args_factory(report_to="all"), train_dataset=lm_rows(8))
    kinds = {type(cb).__name__ for cb in everything.callback_handler.callbacks}
    assert {"JsonLinesCallback", "TensorBoardCallback", "RecorderCallback"} <= kinds
    nothing = Trainer(model=tiny_gpt2(), args=args_factory(report_to="none"), train_dataset=lm_rows(8))
    assert {type(cb).__name__ for cb in nothing.callback_handler.callbacks} == {
        "DefaultFlowCallback",
        "PrinterCallback",
    }


def test_add_pop_remove_callback(args_factory: Any) -> None:
    trainer = Trainer(model=tiny_gpt2(), args=args_factory(), train_dataset=lm_rows(4))
    recorder = Recorder()
    trainer.add_callback(recorder)
    assert trainer.pop_callback(Recorder) is recorder
    trainer.add_callback(Recorder)
    trainer.remove_callback(Recorder)
    assert not any(isinstance(cb, Recorder) for cb in trainer.callback_handler.callbacks)
    with pytest.raises(ConfigError, match="TrainerCallback"):
        trainer.add_callback(object())


def test_early_stopping_and_best_model(args_factory: Any) -> None:
    args = args_factory(
        num_train_epochs=6,
        eval_strategy="epoch",
        save_strategy="epoch",
        load_best_model_at_end=True,
        metric_for_best_model="score",  # constant: the first evaluation stays the best
        save_total_limit=2,
    )
    trainer = Trainer(
        model=tiny_gpt2(),
        args=args,
        train_dataset=lm_rows(8),
        eval_dataset=lm_rows(4, seed=1),
        compute_metrics=lambda pred: {"score": 1.0},
        callbacks=[EarlyStoppingCallback(early_stopping_patience=2)],
    )
    trainer.train()
    assert trainer.state.global_step == 6  # 3 epochs of 2 steps: one best, then two without improvement
    assert trainer.state.best_global_step == 2
    assert trainer.state.best_model_checkpoint.endswith("checkpoint-2")
    kept = sorted(p.name for p in Path(args.output_dir).glob("checkpoint-*"))
    assert kept == ["checkpoint-2", "checkpoint-6"]
    first_eval = next(h for h in trainer.state.log_history if "eval_loss" in h)
    assert trainer.evaluate()["eval_loss"] == pytest.approx(first_eval["eval_loss"], abs=1e-6)  # best reloaded


def test_bf16_autocast_trains(args_factory: Any) -> None:
    trainer = Trainer(model=tiny_gpt2(), args=args_factory(bf16=True, max_steps=2), train_dataset=lm_rows(8))
    trainer.train()
    assert trainer.model.dtype == torch.float32
    assert all(math.isfinite(h["loss"]) for h in trainer.state.log_history if "loss" in h)


# -- bad input ---------------------------------------------------------------------------------------


def test_missing_labels_names_the_batch_keys(args_factory: Any) -> None:
    rows = [{"input_ids": r["input_ids"]} for r in lm_rows(4)]
    trainer = Trainer(model=tiny_gpt2(), args=args_factory(), train_dataset=rows)
    with pytest.raises(InputError, match=r"no loss for a batch with keys \['input_ids'\].*label_names"):
        trainer.train()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"lr_scheduler_type": "zigzag"}, "lr_scheduler_type='zigzag'"),
        ({"optim": "adam_8bit"}, "optim='adam_8bit'.*adamw_torch"),
        ({"eval_strategy": "sometimes"}, "eval_strategy"),
        ({"load_best_model_at_end": True, "eval_strategy": "epoch", "save_strategy": "steps"}, "must match|to match"),
        (
            {"load_best_model_at_end": True, "eval_strategy": "steps", "eval_steps": 3, "save_steps": 4},
            "multiple of eval_steps",
        ),
        ({"fp16": True}, "bf16"),
        ({"per_device_train_batch_size": 0}, "at least 1"),
    ],
)
def test_bad_arguments(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        TrainingArguments(output_dir="unused", **kwargs)


def test_eval_strategy_without_eval_dataset(args_factory: Any) -> None:
    with pytest.raises(ConfigError, match="needs an eval_dataset"):
        Trainer(model=tiny_gpt2(), args=args_factory(eval_strategy="steps", eval_steps=1), train_dataset=lm_rows(4))


def test_unknown_report_to_is_refused_by_training_arguments_listing_installed(args_factory: Any) -> None:
    with pytest.raises(ConfigError, match="report_to='no_such_tracker'.*installed:.*'jsonl'.*'tensorboard'"):
        args_factory(report_to=["no_such_tracker"])


def test_resume_from_missing_or_corrupt_checkpoint(args_factory: Any, tmp_path: Path) -> None:
    trainer = Trainer(model=tiny_gpt2(), args=args_factory(), train_dataset=lm_rows(4))
    with pytest.raises(CheckpointError, match="nowhere.*not a folder"):
        trainer.train(resume_from_checkpoint=str(tmp_path / "nowhere"))
    with pytest.raises(CheckpointError, match="no complete checkpoint"):
        trainer.train(resume_from_checkpoint=True)
    args = args_factory(max_steps=2, save_steps=1, save_strategy="steps")
    Trainer(model=tiny_gpt2(), args=args, train_dataset=lm_rows(8)).train()
    folder = Path(args.output_dir) / "checkpoint-2"
    (folder / "optimizer.pt").write_bytes(b"garbage")
    with pytest.raises(CheckpointError, match=r"optimizer\.pt could not be read"):
        Trainer(model=tiny_gpt2(), args=args, train_dataset=lm_rows(8)).train(resume_from_checkpoint=str(folder))
    (folder / "scheduler.pt").unlink()
    with pytest.raises(CheckpointError, match=r"scheduler\.pt is missing"):
        Trainer(model=tiny_gpt2(), args=args, train_dataset=lm_rows(8)).train(resume_from_checkpoint=str(folder))
    (folder / "model.safetensors").write_bytes(b"\x00" * 10)
    (folder / "scheduler.pt").write_bytes(b"")
    with pytest.raises(CheckpointError, match=r"model\.safetensors"):
        Trainer(model=tiny_gpt2(), args=args, train_dataset=lm_rows(8)).train(resume_from_checkpoint=str(folder))


class _Explode(TrainerCallback):
    def on_step_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        if state.global_step == 1:
            with torch.no_grad():
                model.transformer.wte.weight.fill_(float("nan"))


def test_nan_loss_is_logged_with_its_step_or_stops_training(args_factory: Any) -> None:
    trainer = Trainer(
        model=tiny_gpt2(), args=args_factory(max_steps=3), train_dataset=lm_rows(12), callbacks=[_Explode()]
    )
    trainer.train()
    flagged = [h for h in trainer.state.log_history if "nan_inf_loss" in h]
    assert [h["step"] for h in flagged] == [2, 3]
    stopping = args_factory(max_steps=3, stop_on_nan_inf=True)
    trainer = Trainer(model=tiny_gpt2(), args=stopping, train_dataset=lm_rows(12), callbacks=[_Explode()])
    with pytest.raises(TrainingError, match="loss is nan at step 2"):
        trainer.train()
    assert trainer.state.global_step == 1


def test_default_collator_stacks_and_renames_label() -> None:
    batch = microformers.default_data_collator(
        [{"input_ids": [1, 2], "label": 1, "text": "x"}, {"input_ids": [3, 4], "label": 0, "text": "y"}]
    )
    assert batch["labels"].dtype == torch.long and batch["labels"].tolist() == [1, 0]
    assert batch["input_ids"].tolist() == [[1, 2], [3, 4]] and "text" not in batch
    floats = microformers.DefaultDataCollator()([{"x": np.ones(2), "label": 0.5}])
    assert floats["labels"].dtype == torch.float32 and floats["x"].shape == (1, 2)
    with pytest.raises(InputError, match="different lengths"):
        microformers.default_data_collator([{"input_ids": [1, 2]}, {"input_ids": [1]}])


def test_model_init_builds_a_fresh_model_per_run(args_factory: Any) -> None:
    built: list[Any] = []

    def init() -> Any:
        built.append(tiny_gpt2())
        return built[-1]

    trainer = Trainer(model_init=init, args=args_factory(max_steps=2), train_dataset=lm_rows(8))
    first = trainer.train().training_loss
    trainer.args.max_steps = 4
    second = trainer.train()
    assert len(built) == 3 and trainer.model is built[-1]
    assert second.global_step == 4 and second.training_loss != first
    assert trainer.lr_scheduler.lr_lambdas[0].keywords["total"] == 4
    with pytest.raises(ConfigError, match="needs a model"):
        Trainer(args=args_factory())


def test_datasets_dataset_unused_columns_removed(args_factory: Any) -> None:
    datasets = pytest.importorskip("datasets", reason="datasets.Dataset support is tested when datasets is installed")
    rows = cls_rows(8)
    table = datasets.Dataset.from_dict(
        {
            "input_ids": [r["input_ids"] for r in rows],
            "label": [r["labels"] for r in rows],
            "sentence": ["some text"] * 8,
        }
    )
    trainer = Trainer(model=tiny_bert_classifier(), args=args_factory(max_steps=2), train_dataset=table)
    assert trainer._prepare_dataset(table).column_names == ["input_ids", "label"]
    assert trainer.train().global_step == 2
    table.set_format("torch")
    metrics = trainer.evaluate(table)
    assert math.isfinite(metrics["eval_loss"])


def test_progress_bars_show_the_loss(args_factory: Any, capsys: Any) -> None:
    args = args_factory(max_steps=2, disable_tqdm=False, eval_strategy="steps", eval_steps=2)
    trainer = Trainer(model=tiny_gpt2(), args=args, train_dataset=lm_rows(8), eval_dataset=lm_rows(8, seed=1))
    assert any(type(cb).__name__ == "ProgressCallback" for cb in trainer.callback_handler.callbacks)
    trainer.train()
    out = capsys.readouterr()
    assert "2/2" in out.err and "loss=" in out.err  # the training bar, with the latest loss
    assert "{'loss':" in out.out and "'eval_loss':" in out.out  # logs written above the bar


def test_printed_logs_keep_small_values_and_the_summary_counts_samples(args_factory: Any, capsys: Any) -> None:
    args = args_factory(learning_rate=3e-5, num_train_epochs=2, per_device_train_batch_size=4)
    trainer = Trainer(model=tiny_bert_classifier(), args=args, train_dataset=cls_rows(12))
    output = trainer.train()
    lines = [ast.literal_eval(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    rates = [float(line["learning_rate"]) for line in lines if "learning_rate" in line]
    # 4 significant digits as the reference prints them: a learning rate of 3e-05 is not rounded away to 0.0
    assert rates and all(0 < rate <= 3e-5 for rate in rates[:-1])
    assert lines[0]["learning_rate"] == "3e-05"
    samples_per_second = output.metrics["train_samples_per_second"]
    # 12 rows, 2 epochs: 24 samples over the run's time
    assert samples_per_second == pytest.approx(24 / output.metrics["train_runtime"], rel=0.05)
