"""``microformers_sdk.moe`` behaviour the full mutation run found unasserted (docs/reliability.md, issue #19)."""

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


class _Source(dict):
    """A checkpoint mapping that, like the kernel's, says which file holds a key."""

    def file_of(self, key: str) -> str:
        return f"file-of-{key}"


def _mixtral_source() -> _Source:
    # a plain key first: every key is looked at, stacked ones after plain ones included
    return _Source(
        {
            "model.layers.0.mlp.gate.weight": torch.randn(3, 4),
            "model.layers.0.mlp.experts.gate_up_proj": torch.randn(3, 10, 4),
            "model.layers.0.mlp.experts.down_proj": torch.randn(3, 4, 5),
            "model.norm.weight": torch.randn(4),
        }
    )


def test_plain_keys_read_through_under_their_renamed_names() -> None:
    source = _mixtral_source()
    view = FusedExpertsSource(source, "w1", "w3", "w2", 3, renames=((".mlp.", ".block_sparse_moe."),))
    gate = "model.layers.0.block_sparse_moe.gate.weight"
    assert gate in view and "model.norm.weight" in view
    assert view[gate] is source["model.layers.0.mlp.gate.weight"]
    assert view["model.norm.weight"] is source["model.norm.weight"]
    assert "model.layers.0.mlp.gate.weight" not in view  # only the renamed name
    assert "model.layers.0.block_sparse_moe.experts.3.w1.weight" not in view  # only num_experts experts
    stem = "model.layers.0.block_sparse_moe.experts"
    expected = {gate, "model.norm.weight"} | {f"{stem}.{e}.{p}.weight" for e in range(3) for p in ("w1", "w3", "w2")}
    assert set(view) == expected and len(view) == len(expected)
    torch.testing.assert_close(view[f"{stem}.2.w2.weight"], source["model.layers.0.mlp.experts.down_proj"][2])


def test_file_of_names_the_checkpoint_file_of_the_source_key() -> None:
    view = FusedExpertsSource(_mixtral_source(), "w1", "w3", "w2", 3, renames=((".mlp.", ".block_sparse_moe."),))
    assert view.file_of("model.layers.0.block_sparse_moe.gate.weight") == "file-of-model.layers.0.mlp.gate.weight"
    assert (
        view.file_of("model.layers.0.block_sparse_moe.experts.0.w2.weight")
        == "file-of-model.layers.0.mlp.experts.down_proj"
    )
    assert view.file_of("model.missing.weight") == "file-of-model.missing.weight"  # unknown keys pass through
    plain = FusedExpertsSource(dict(_mixtral_source()), "w1", "w3", "w2", 3)  # a source that knows no files
    assert plain.file_of("model.layers.0.mlp.gate.weight") is None


def test_a_single_expert_checkpoint_reads_each_slice() -> None:
    gate_up, down = torch.randn(1, 6, 4), torch.randn(1, 4, 3)
    view = FusedExpertsSource({"m.experts.gate_up_proj": gate_up, "m.experts.down_proj": down}, "w1", "w3", "w2", 1)
    for _ in range(2):  # read again after the stacked tensors were released
        # exact: slices of the stored tensors (the three below)
        assert torch.equal(view["m.experts.0.w2.weight"], down[0])
        assert torch.equal(view["m.experts.0.w1.weight"], gate_up[0, :3])
        assert torch.equal(view["m.experts.0.w3.weight"], gate_up[0, 3:])


def test_load_balancing_loss_with_one_moe_layer_and_a_mask() -> None:
    torch.manual_seed(0)
    logits = torch.randn(6, 4)
    mask = torch.tensor([[1, 1, 0], [0, 1, 1]])
    expected = load_balancing_loss([logits[mask.reshape(-1).bool()]], 4, 2)
    torch.testing.assert_close(load_balancing_loss([logits], 4, 2, mask), expected)


def test_load_balancing_loss_is_float32_whatever_the_default_dtype() -> None:
    torch.manual_seed(0)
    logits = [torch.randn(6, 4), torch.randn(6, 4)]
    mask = torch.tensor([[0, 1, 1], [1, 1, 0]])
    plain, masked = load_balancing_loss(logits, 4, 2), load_balancing_loss(logits, 4, 2, mask)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        torch.testing.assert_close(load_balancing_loss(logits, 4, 2), plain)  # dtype checked too
        torch.testing.assert_close(load_balancing_loss(logits, 4, 2, mask), masked)
    finally:
        torch.set_default_dtype(previous)


def test_load_balancing_loss_takes_the_softmax_in_float32() -> None:
    torch.manual_seed(0)
    logits = [torch.randn(16, 8).to(torch.bfloat16), torch.randn(16, 8).to(torch.bfloat16)]  # a bfloat16 model's
    expected = load_balancing_loss([layer.float() for layer in logits], 8, 2)
    torch.testing.assert_close(load_balancing_loss(logits, 8, 2), expected)


def test_zero_experts_are_refused_unless_allowed() -> None:
    with pytest.raises(
        ConfigError, match="num_experts=0 and num_experts_per_tok=0 in SimpleNamespace must be positive"
    ):
        check_expert_counts(SimpleNamespace(num_experts=0, num_experts_per_tok=0), "num_experts")


def test_one_expert_is_accepted_and_no_experts_is_not_positive() -> None:
    check_expert_counts(SimpleNamespace(num_local_experts=1, num_experts_per_tok=1), "num_local_experts")
    with pytest.raises(ConfigError, match="num_local_experts=0 and num_experts_per_tok=1 in SimpleNamespace must be"):
        check_expert_counts(SimpleNamespace(num_local_experts=0, num_experts_per_tok=1), "num_local_experts")


def _routed_by_hand(
    block: SparseMoeBlock, hidden: torch.Tensor, top_k: int, normalize: bool, dtype: torch.dtype
) -> torch.Tensor:
    """The block's output from its parts: softmax in float32, top-k, optional renormalisation, weights in dtype."""
    flat = hidden.reshape(-1, hidden.shape[-1])
    probabilities = torch.softmax(nn.functional.linear(flat, block.gate.weight).float(), dim=-1)
    weights, index = probabilities.topk(top_k, dim=-1)
    if normalize:
        weights = weights / weights.sum(-1, keepdim=True)
    return run_experts(flat, block.experts, index, weights.to(dtype)).reshape(hidden.shape)


def _moe_block(normalize: bool, **kwargs: object) -> SparseMoeBlock:
    torch.manual_seed(0)
    block = SparseMoeBlock(8, [GatedMLP(8, 4) for _ in range(4)], 2, normalize=normalize, **kwargs)
    nn.init.normal_(block.gate.weight)
    return block


def test_block_renormalises_the_chosen_weights_when_asked() -> None:
    hidden = torch.randn(2, 3, 8)
    with torch.no_grad():
        for normalize in (True, False):
            block = _moe_block(normalize)
            out, logits = block(hidden)
            torch.testing.assert_close(out, _routed_by_hand(block, hidden, 2, normalize, torch.float32))
            assert logits.shape == (6, 4)


def test_block_weights_take_the_model_dtype_unless_float32_weights() -> None:
    """Qwen2-MoE (the default) rounds the routing weights to a bfloat16 model's dtype; Mixtral keeps float32."""
    hidden = torch.randn(2, 3, 8).to(torch.bfloat16)
    with torch.no_grad():
        for float32_weights, dtype in ((None, torch.bfloat16), (True, torch.float32)):
            kwargs = {} if float32_weights is None else {"float32_weights": float32_weights}
            block = _moe_block(True, **kwargs).to(torch.bfloat16)
            out, _ = block(hidden)
            # exact: the block's own router products and run_experts on the same shapes
            assert torch.equal(out, _routed_by_hand(block, hidden, 2, True, dtype)), float32_weights


def test_router_weights_default_to_the_logits_dtype_and_its_repr_names_its_settings() -> None:
    torch.manual_seed(0)
    router = TopKRouter(8, 4, 2, normalize=True)
    nn.init.normal_(router.weight)
    _, weights, _ = router.to(torch.bfloat16)(torch.randn(3, 8).to(torch.bfloat16))
    assert weights.dtype == torch.bfloat16
    assert repr(router) == "TopKRouter(experts=4, top_k=2, normalize=True)"


def test_run_experts_on_several_tokens_of_width_one() -> None:
    torch.manual_seed(0)
    experts = [GatedMLP(1, 4) for _ in range(3)]
    hidden = torch.randn(4, 1)
    index = torch.tensor([[0, 2], [1, 0], [2, 1], [1, 2]])
    weights = torch.rand(4, 2)
    with torch.no_grad():
        every = torch.stack([expert(hidden) for expert in experts], dim=1)  # (tokens, experts, 1)
        expected = (every.gather(1, index[..., None]) * weights[..., None]).sum(1)
        torch.testing.assert_close(run_experts(hidden, experts, index, weights), expected)


def test_one_token_sums_its_experts_in_ascending_order_in_its_own_dtype() -> None:
    """Decoding one token: expert outputs are added in ascending expert order (the reference's), whatever order
    the router ranked them in, and the sum stays in the hidden states' dtype with float32 routing weights."""
    torch.manual_seed(0)
    experts = [GatedMLP(16, 8) for _ in range(4)]
    hidden = torch.randn(1, 16)
    index = torch.tensor([[3, 0, 2]])  # ranked by probability, not by expert
    weights = torch.tensor([[0.5, 0.3, 0.2]])
    with torch.no_grad():
        expected = experts[0](hidden) * 0.3
        expected = expected + experts[2](hidden) * 0.2
        expected = expected + experts[3](hidden) * 0.5
        # exact: run_experts calls each expert on this one row and adds in this order
        assert torch.equal(run_experts(hidden, experts, index, weights), expected)
        low = [expert.to(torch.bfloat16) for expert in experts]
        out = run_experts(hidden.to(torch.bfloat16), low, index, weights)  # Mixtral: float32 weights
    assert out.dtype == torch.bfloat16
