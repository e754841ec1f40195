"""Our Trainer against the reference's, on tiny random GPT-2 and BERT checkpoints.

Both trainers get the same checkpoint, the same examples in the same (sequential) order and the same
arguments; they must log the same loss and learning rate at every step, end with the same weights and
report the same ``eval_loss``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import SequentialSampler

from microformers_sdk.testing import one_thread  # noqa: F401  (an autouse fixture, found by name)
from parity.harness import load_ours, load_reference, make_reference_checkpoint, reference_module

pytest.importorskip("transformers")
pytest.importorskip("accelerate", reason="the reference Trainer needs accelerate (requirements-test.txt)")

GPT2: dict[str, Any] = {
    "vocab_size": 64,
    "n_embd": 32,
    "n_layer": 2,
    "n_head": 4,
    "n_positions": 32,
    "resid_pdrop": 0.0,
    "embd_pdrop": 0.0,
    "attn_pdrop": 0.0,
}
BERT: dict[str, Any] = {
    "vocab_size": 64,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "max_position_embeddings": 32,
    "hidden_dropout_prob": 0.0,
    "attention_probs_dropout_prob": 0.0,
    "num_labels": 3,
}


def _sequential(trainer_cls: type) -> type:
    class Sequential(trainer_cls):  # type: ignore[misc, valid-type]
        def _get_train_sampler(self, *args: Any, **kwargs: Any) -> SequentialSampler:
            dataset = args[0] if args and args[0] is not None else self.train_dataset
            return SequentialSampler(dataset)

    return Sequential


def _lm_data(n: int, seed: int) -> list[dict[str, list[int]]]:
    g = torch.Generator().manual_seed(seed)
    rows = [torch.randint(1, GPT2["vocab_size"], (10,), generator=g).tolist() for _ in range(n)]
    return [{"input_ids": r, "labels": list(r)} for r in rows]


def _cls_data(n: int, seed: int) -> list[dict[str, Any]]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        ids = torch.randint(1, BERT["vocab_size"], (9,), generator=g)
        mask = torch.ones(9, dtype=torch.long)
        mask[int(torch.randint(5, 9, (1,), generator=g)) :] = 0
        out.append(
            {
                "input_ids": ids.tolist(),
                "attention_mask": mask.tolist(),
                "labels": int(torch.randint(0, 3, (1,), generator=g)),
            }
        )
    return out


def _args(module: Any, tmp: Path, schedule: str) -> Any:
    return module.TrainingArguments(
        output_dir=str(tmp),
        per_device_train_batch_size=4,
        per_device_eval_batch_size=4,
        gradient_accumulation_steps=2,
        num_train_epochs=2,
        learning_rate=3e-3,
        lr_scheduler_type=schedule,
        warmup_steps=2,
        weight_decay=0.1,
        max_grad_norm=0.5,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        seed=7,
    )


def _run(trainer_cls: type, module: Any, model: Any, tmp: Path, schedule: str, train: list, evalset: list) -> Any:
    trainer = _sequential(trainer_cls)(
        model=model, args=_args(module, tmp, schedule), train_dataset=train, eval_dataset=evalset
    )
    trainer.train()
    steps = [h for h in trainer.state.log_history if "loss" in h]
    return trainer, steps, trainer.evaluate()["eval_loss"]


def _compare(tmp_path: Path, folder: Path, auto: str, schedule: str, train: list, evalset: list) -> None:
    import microformers

    transformers = reference_module()
    ref_trainer, ref_steps, ref_eval = _run(
        transformers.Trainer, transformers, load_reference(folder, auto), tmp_path / "ref", schedule, train, evalset
    )
    ours_trainer, our_steps, our_eval = _run(
        microformers.Trainer, microformers, load_ours(folder, auto), tmp_path / "ours", schedule, train, evalset
    )
    assert len(our_steps) == len(ref_steps) == 6
    for ours, theirs in zip(our_steps, ref_steps):
        assert ours["step"] == theirs["step"]
        assert ours["loss"] == pytest.approx(theirs["loss"], abs=1e-5), f"loss at step {ours['step']}"
        assert ours["learning_rate"] == pytest.approx(theirs["learning_rate"], abs=1e-9), f"lr at step {ours['step']}"
        assert ours["grad_norm"] == pytest.approx(theirs["grad_norm"], abs=1e-4), f"grad_norm at step {ours['step']}"
    assert our_eval == pytest.approx(ref_eval, abs=1e-5)
    theirs_sd = ref_trainer.model.state_dict()
    ours_sd = ours_trainer.model.state_dict()
    common = set(theirs_sd) & set(ours_sd)
    assert len(common) >= len(ours_sd) - 2, f"parameter names differ: {sorted(set(ours_sd) ^ set(theirs_sd))[:6]}"
    worst = max(float((ours_sd[k].float() - theirs_sd[k].float()).abs().max()) for k in common)
    assert worst <= 1e-5, f"final weights differ by {worst:.3g}"
    moved = max(float((ours_sd[k] - load_ours(folder, auto).state_dict()[k]).abs().max()) for k in common)
    assert moved > 1e-3, "training did not change the weights"


@pytest.mark.parametrize("schedule", ["linear", "cosine"])
def test_gpt2_causal_lm_matches_reference_trainer(tmp_path: Path, schedule: str) -> None:
    folder, _ = make_reference_checkpoint("GPT2Config", "GPT2LMHeadModel", tmp_path, **GPT2)
    _compare(tmp_path, folder, "AutoModelForCausalLM", schedule, _lm_data(24, 0), _lm_data(6, 1))


def test_bert_classifier_matches_reference_trainer(tmp_path: Path) -> None:
    folder, _ = make_reference_checkpoint("BertConfig", "BertForSequenceClassification", tmp_path, **BERT)
    _compare(tmp_path, folder, "AutoModelForSequenceClassification", "linear", _cls_data(24, 0), _cls_data(6, 1))
