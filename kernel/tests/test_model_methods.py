"""``PreTrainedModel`` methods: parameter counts, memory footprint, gradient checkpointing, embeddings,
``push_to_hub``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from modeling_stand_ins import _Flat

from microformers import ConfigError, PretrainedConfig
from microformers import modeling as modeling_module

# From test_modeling_full_mutants.py: Behaviour of ``microformers.modeling`` that the full mutation run (workspace
# hmod) found unasserted. See docs/reliability.md, "Mutation testing": each test here fails with at least one mutant
# of ``kernel/src/microformers/modeling.py`` that the other judging tests let survive, and passes on the real code.


# -- num_parameters, get_memory_footprint ---------------------------------------------------------------


def test_num_parameters_counts_frozen_parameters_by_default(toy_model: torch.nn.Module) -> None:
    total = sum(p.numel() for p in toy_model.parameters())
    toy_model.get_input_embeddings().weight.requires_grad_(False)
    assert toy_model.num_parameters() == total


def test_memory_footprint_counts_parameters_and_buffers_unless_told_not_to(toy_model: torch.nn.Module) -> None:
    params = sum(p.numel() * p.element_size() for p in toy_model.parameters())
    buffers = sum(b.numel() * b.element_size() for b in toy_model.buffers())
    assert buffers > 0  # the toy's blocks hold a (non-persistent) scale buffer each
    assert toy_model.get_memory_footprint() == params + buffers
    assert toy_model.get_memory_footprint(return_buffers=True) == params + buffers
    assert toy_model.get_memory_footprint(return_buffers=False) == params
    toy_model.half()
    assert toy_model.get_memory_footprint(return_buffers=False) == params // 2


# -- gradient checkpointing -----------------------------------------------------------------------------


class _Inner(modeling_module.PreTrainedModel):
    config_class = PretrainedConfig
    supports_gradient_checkpointing = True

    def __init__(self, config: PretrainedConfig) -> None:
        super().__init__(config)
        self.linear = torch.nn.Linear(3, 3)


class _Outer(modeling_module.PreTrainedModel):
    config_class = PretrainedConfig
    supports_gradient_checkpointing = True

    def __init__(self, config: PretrainedConfig) -> None:
        super().__init__(config)
        self.inner = _Inner(config)


def test_gradient_checkpointing_disable_turns_it_off_everywhere_and_is_harmless_when_off() -> None:
    model = _Outer(PretrainedConfig())
    model.gradient_checkpointing_disable()  # never enabled: nothing to do, no error
    assert not model.is_gradient_checkpointing
    model.gradient_checkpointing_enable()
    assert model.is_gradient_checkpointing and model.inner.is_gradient_checkpointing
    model.gradient_checkpointing_disable()
    assert not model.is_gradient_checkpointing and not model.inner.is_gradient_checkpointing


def test_gradient_checkpointing_enable_refuses_a_model_without_support(toy_model: torch.nn.Module) -> None:
    with pytest.raises(ConfigError, match=r"^ToyForCausalLM does not support gradient checkpointing$"):
        toy_model.gradient_checkpointing_enable()


def test_gradient_checkpointing_hands_its_options_to_torch_checkpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch.utils.checkpoint

    seen: list[dict[str, Any]] = []

    def recording(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:  # records, then runs the layer once
        seen.append(kwargs)
        return fn(*args)

    monkeypatch.setattr(torch.utils.checkpoint, "checkpoint", recording)
    model = _Outer(PretrainedConfig()).train()
    hidden = torch.randn(2, 3)
    model.gradient_checkpointing_enable()
    torch.testing.assert_close(model.inner._call_layer(model.inner.linear, hidden), model.inner.linear(hidden))
    model.gradient_checkpointing_enable({"use_reentrant": True, "preserve_rng_state": False})
    torch.testing.assert_close(model._call_layer(model.inner.linear, hidden), model.inner.linear(hidden))
    assert seen == [{"use_reentrant": False}, {"use_reentrant": True, "preserve_rng_state": False}]


# -- loading: which missing tensors are errors --------------------------------------------------------------


def test_get_input_embeddings_of_a_model_without_them_says_so() -> None:
    with pytest.raises(NotImplementedError, match=r"^_Flat does not define get_input_embeddings\(\)$"):
        _Flat(PretrainedConfig()).get_input_embeddings()


# From test_modeling_mutants.py: Behaviour of ``microformers.modeling`` that the mutation pass found unasserted
# (docs/reliability.md).


class _Layer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.seen: list[object] = []

    def forward(self, hidden: torch.Tensor, cache: object) -> torch.Tensor:
        self.seen.append(cache)
        return self.linear(hidden).tanh()


class _Stack(modeling_module.PreTrainedModel):
    config_class = PretrainedConfig
    supports_gradient_checkpointing = True

    def __init__(self, config: PretrainedConfig) -> None:
        super().__init__(config)
        self.layer = _Layer()

    def forward(self, hidden: torch.Tensor, cache: object = None) -> torch.Tensor:
        return self._call_layer(self.layer, hidden, cache)


class _Cache:
    def get_seq_length(self) -> int:
        return 0


def test_gradient_checkpointing_recomputes_the_layer_in_backward_without_the_cache() -> None:
    torch.manual_seed(0)
    model = _Stack(PretrainedConfig())
    hidden = torch.randn(2, 4)
    model.train()
    model(hidden, _Cache()).sum().backward()
    plain = [p.grad.clone() for p in model.parameters()]
    assert len(model.layer.seen) == 1 and isinstance(model.layer.seen[0], _Cache)  # no checkpointing: once
    model.zero_grad()
    model.layer.seen.clear()
    model.gradient_checkpointing_enable()
    assert model.is_gradient_checkpointing
    model(hidden, _Cache()).sum().backward()
    assert model.layer.seen == [None, None]  # forward, then recomputed in backward; the cache replaced by None
    for param, expected in zip(model.parameters(), plain):
        torch.testing.assert_close(param.grad, expected)
    model.eval()  # not training: checkpointing does not apply
    model.layer.seen.clear()
    model(hidden, cache := _Cache())
    assert model.layer.seen == [cache]


def test_num_parameters_counts_trainable_and_embedding_parameters(toy_model: torch.nn.Module) -> None:
    total = sum(p.numel() for p in toy_model.parameters())
    embedding = toy_model.get_input_embeddings().weight.numel()
    assert toy_model.num_parameters() == total
    assert toy_model.num_parameters(exclude_embeddings=True) == total - embedding
    toy_model.get_input_embeddings().weight.requires_grad_(False)
    assert toy_model.num_parameters(only_trainable=True) == total - embedding


def test_resize_token_embeddings_is_handed_to_the_sdk(toy_model: torch.nn.Module) -> None:
    assert toy_model.resize_token_embeddings() is toy_model.get_input_embeddings()  # nothing asked: unchanged
    with pytest.raises(ConfigError, match=r"ToyForCausalLM has an output head but no set_output_embeddings\(\)$"):
        toy_model.resize_token_embeddings(45, pad_to_multiple_of=8)
