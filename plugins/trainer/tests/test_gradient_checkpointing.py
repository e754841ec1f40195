"""Gradient checkpointing in llama, bert and gpt2: same loss and gradients, activations recomputed."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from trainer_helpers import lm_rows, tiny_bert_classifier, tiny_gpt2, tiny_llama

from microformers import ConfigError, Trainer
from microformers_sdk.testing import assert_close

BUILDERS = {
    "llama": lambda: tiny_llama(),
    "gpt2": lambda: tiny_gpt2(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0),
    "bert": lambda: tiny_bert_classifier(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0),
}


def _grads(model: Any) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    rows = lm_rows(3)
    ids = torch.tensor([r["input_ids"] for r in rows])
    labels = ids if "Classification" not in type(model).__name__ else torch.tensor([0, 1, 2])
    model.train()
    model.zero_grad()
    loss = model(input_ids=ids, labels=labels).loss
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("arch", sorted(BUILDERS))
def test_same_gradients_with_checkpointing(arch: str) -> None:
    model = BUILDERS[arch]()
    assert model.supports_gradient_checkpointing and not model.is_gradient_checkpointing
    loss, grads = _grads(model)
    layers = [
        m for n, m in model.named_modules() if n.endswith(("layers.0", "layers.1", "h.0", "h.1", "layer.0", "layer.1"))
    ]
    calls: list[int] = []
    for layer in layers:
        layer.forward = (lambda f: lambda *a, **k: calls.append(1) or f(*a, **k))(layer.forward)
    model.gradient_checkpointing_enable()
    assert model.is_gradient_checkpointing
    ckpt_loss, ckpt_grads = _grads(model)
    assert len(layers) == 2 and len(calls) == 4  # 2 layers, each run again during backward
    # the checkpointed forward runs without autograd, where attention may take another kernel: a tolerance
    assert_close(ckpt_loss, loss, rtol=0, atol=1e-6)
    assert grads.keys() == ckpt_grads.keys() and len(grads) > 5
    for name, grad in grads.items():
        torch.testing.assert_close(ckpt_grads[name], grad, rtol=0, atol=1e-6, msg=name)
    model.gradient_checkpointing_disable()
    assert not model.is_gradient_checkpointing
    model.eval()
    with torch.no_grad():
        model.gradient_checkpointing_enable()
        model(input_ids=torch.tensor([[1, 2, 3]]))  # eval mode: no recomputation machinery


def test_trainer_argument_enables_it(args_factory: Any) -> None:
    trainer = Trainer(
        model=tiny_gpt2(), args=args_factory(max_steps=1, gradient_checkpointing=True), train_dataset=lm_rows(4)
    )
    trainer.train()
    assert trainer.model.is_gradient_checkpointing


def test_unsupported_model_is_an_error(args_factory: Any) -> None:
    class Plain(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Linear(2, 2)

        def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
            return {"loss": (self.w(x) - labels).pow(2).mean()}

    rows = [{"x": [1.0, 2.0], "labels": [0.0, 1.0]}] * 4
    trainer = Trainer(model=Plain(), args=args_factory(max_steps=1, gradient_checkpointing=True), train_dataset=rows)
    with pytest.raises(ConfigError, match="Plain does not support gradient checkpointing"):
        trainer.train()
