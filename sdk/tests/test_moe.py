"""microformers_sdk.moe: routing, the sparse expert loop, the load-balancing loss and stacked-expert loading."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from microformers.errors import ConfigError
from microformers_sdk.layers import GatedMLP
from microformers_sdk.moe import (
    FusedExpertsSource,
    SparseMoeBlock,
    TopKRouter,
    check_expert_counts,
    load_balancing_loss,
    run_experts,
)


def _dense_moe(
    hidden: torch.Tensor, experts: list[nn.Module], index: torch.Tensor, weights: torch.Tensor
) -> torch.Tensor:
    """Every expert on every token, then the routed ones picked: what run_experts must equal."""
    every = torch.stack([expert(hidden) for expert in experts], dim=1)  # (tokens, experts, hidden)
    picked = every.gather(1, index[..., None].expand(-1, -1, hidden.shape[-1]))
    return (picked * weights[..., None]).sum(1)


@pytest.mark.parametrize(("normalize", "tokens", "top_k"), [(True, 11, 2), (False, 11, 2), (True, 1, 3), (False, 1, 2)])
def test_router_and_sparse_loop_equal_the_dense_computation(normalize: bool, tokens: int, top_k: int) -> None:
    torch.manual_seed(0)
    experts = [GatedMLP(8, 12) for _ in range(5)]
    router = TopKRouter(8, 5, top_k=top_k, normalize=normalize)
    nn.init.normal_(router.weight)
    hidden = torch.randn(tokens, 8)
    logits, weights, index = router(hidden)
    probabilities = torch.softmax(logits, dim=-1)
    expected_weights, expected_index = probabilities.topk(top_k, dim=-1)
    if normalize:
        expected_weights = expected_weights / expected_weights.sum(-1, keepdim=True)
    torch.testing.assert_close(weights, expected_weights)
    assert torch.equal(index, expected_index)
    with torch.no_grad():
        torch.testing.assert_close(
            run_experts(hidden, experts, index, weights), _dense_moe(hidden, experts, index, weights)
        )


def test_unrouted_experts_never_run_and_gradients_reach_routed_ones() -> None:
    torch.manual_seed(0)
    experts = [GatedMLP(4, 6) for _ in range(4)]
    calls = [0] * 4
    for i, expert in enumerate(experts):
        expert.register_forward_hook(lambda *_args, i=i: calls.__setitem__(i, calls[i] + 1))
    hidden = torch.randn(3, 4, requires_grad=True)
    index = torch.tensor([[2, 0], [0, 2], [2, 0]])
    weights = torch.full((3, 2), 0.5, requires_grad=True)
    run_experts(hidden, experts, index, weights).sum().backward()
    assert calls == [1, 0, 1, 0]  # each chosen expert once, on its own tokens
    assert experts[0].down_proj.weight.grad is not None and experts[1].down_proj.weight.grad is None
    assert hidden.grad is not None and weights.grad is not None


def test_block_float32_weights_and_shared_expert() -> None:
    torch.manual_seed(0)
    block = SparseMoeBlock(8, [GatedMLP(8, 4) for _ in range(3)], 2, normalize=True, float32_weights=True)
    nn.init.normal_(block.gate.weight)
    block = block.to(torch.bfloat16)
    out, logits = block(torch.randn(2, 3, 8, dtype=torch.bfloat16))
    assert out.dtype == torch.bfloat16 and out.shape == (2, 3, 8) and logits.shape == (6, 3)
    assert not hasattr(block, "shared_expert")
    shared = SparseMoeBlock(8, [GatedMLP(8, 4) for _ in range(3)], 1, normalize=False, shared_expert=GatedMLP(8, 5))
    assert shared.shared_expert_gate.weight.shape == (1, 8)


def test_load_balancing_loss_counts_and_masks() -> None:
    torch.manual_seed(0)
    # two experts, top-1, every token sure of its expert and half the tokens each: f = P = 1/2, loss 2 * 2/4 = 1
    balanced = torch.tensor([[20.0, 0.0], [0.0, 20.0]] * 3)
    torch.testing.assert_close(load_balancing_loss((balanced,), 2, 1), torch.tensor(1.0), atol=1e-6, rtol=0)
    # all tokens on expert 0: f = (1, 0), P ~ (1, 0): loss ~ 2
    skewed = torch.tensor([[20.0, 0.0]] * 6)
    torch.testing.assert_close(load_balancing_loss((skewed,), 2, 1), torch.tensor(2.0), atol=1e-6, rtol=0)
    # a mask drops tokens: the same as the loss over the kept ones; a longer mask's last columns are used
    logits = [torch.randn(6, 4), torch.randn(6, 4)]
    mask = torch.tensor([[0, 1, 1], [1, 1, 0]])
    keep = mask.reshape(-1).bool()
    expected = load_balancing_loss([layer[keep] for layer in logits], 4, 2)
    torch.testing.assert_close(load_balancing_loss(logits, 4, 2, mask), expected)
    torch.testing.assert_close(
        load_balancing_loss(logits, 4, 2, torch.cat([torch.ones(2, 5, dtype=torch.long), mask], 1)), expected
    )
    assert load_balancing_loss((), 4, 2) is None


class _Source(dict):
    def file_of(self, key: str) -> str:
        return f"file-of-{key}"


def test_fused_experts_source_slices_stacked_tensors() -> None:
    gate_up = torch.randn(3, 2 * 5, 4)
    down = torch.randn(3, 4, 5)
    source = _Source(
        {
            "model.layers.0.mlp.experts.gate_up_proj": gate_up,
            "model.layers.0.mlp.experts.down_proj": down,
            "model.layers.0.mlp.gate.weight": torch.randn(3, 4),
        }
    )
    view = FusedExpertsSource.wrap(source, "w1", "w3", "w2", 3, renames=((".mlp.", ".block_sparse_moe."),))
    assert isinstance(view, FusedExpertsSource)
    assert len(view) == 1 + 3 * 3 and "model.layers.0.block_sparse_moe.gate.weight" in view
    stem = "model.layers.0.block_sparse_moe.experts"
    for e in range(3):
        # exact: slices of the stored tensors (the three below)
        assert torch.equal(view[f"{stem}.{e}.w1.weight"], gate_up[e, :5])
        assert torch.equal(view[f"{stem}.{e}.w3.weight"], gate_up[e, 5:])
        assert torch.equal(view[f"{stem}.{e}.w2.weight"], down[e])
    assert view.file_of(f"{stem}.1.w3.weight") == "file-of-model.layers.0.mlp.experts.gate_up_proj"
    plain = {"model.layers.0.mlp.experts.0.w1.weight": torch.zeros(1)}
    assert FusedExpertsSource.wrap(plain, "w1", "w3", "w2", 1) is plain


@pytest.mark.parametrize(
    ("experts", "top_k", "allow_zero", "message"),
    [
        (4, 5, False, "num_experts_per_tok=5 .* larger than num_local_experts=4"),
        (4, 0, False, "must be positive"),
        (0, 0, False, "must be positive"),
        (-1, 2, False, "num_local_experts=-1 .* non-negative"),
        (True, 1, False, "num_local_experts=True"),
    ],
)
def test_expert_counts_are_checked(experts: object, top_k: object, allow_zero: bool, message: str) -> None:
    config = SimpleNamespace(num_local_experts=experts, num_experts_per_tok=top_k)
    with pytest.raises(ConfigError, match=message):
        check_expert_counts(config, "num_local_experts", allow_zero=allow_zero)


def test_expert_counts_accepted() -> None:
    check_expert_counts(SimpleNamespace(num_experts=4, num_experts_per_tok=4), "num_experts")
    check_expert_counts(SimpleNamespace(num_experts=0, num_experts_per_tok=0), "num_experts", allow_zero=True)
