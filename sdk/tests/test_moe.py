"""microformers_sdk.moe: routing, the sparse expert loop, the load-balancing loss and stacked-expert loading."""

from __future__ import annotations

from pathlib import Path
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
        (100_000, 2, False, "num_local_experts=100000 .* more experts than any mixture-of-experts model has"),
    ],
)
def test_expert_counts_are_checked(experts: object, top_k: object, allow_zero: bool, message: str) -> None:
    config = SimpleNamespace(num_local_experts=experts, num_experts_per_tok=top_k)
    with pytest.raises(ConfigError, match=message):
        check_expert_counts(config, "num_local_experts", allow_zero=allow_zero)


def test_expert_counts_accepted() -> None:
    check_expert_counts(SimpleNamespace(num_experts=4, num_experts_per_tok=4), "num_experts")
    check_expert_counts(SimpleNamespace(num_experts=0, num_experts_per_tok=0), "num_experts", allow_zero=True)
    check_expert_counts(SimpleNamespace(num_experts=4096, num_experts_per_tok=8), "num_experts")  # the bound itself


def test_a_config_file_with_a_hostile_expert_count_fails_before_building(tmp_path: Path) -> None:
    import json

    import microformers

    config = microformers.AutoConfig.for_model(
        "mixtral", vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, num_local_experts=2, num_experts_per_tok=1,
    )  # fmt: skip
    config.save_pretrained(tmp_path)
    values = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**values, "num_local_experts": 100_000}))
    with pytest.raises(ConfigError, match="num_local_experts=100000"):  # reading the config: no expert is built
        microformers.AutoConfig.from_pretrained(tmp_path)


# From test_moe_mutants.py: ``microformers_sdk.moe`` behaviour the mutation pass found unasserted
# (docs/reliability.md).


def _block(jitter: float = 0.0, shared: nn.Module | None = None) -> SparseMoeBlock:
    torch.manual_seed(0)
    block = SparseMoeBlock(
        8, [GatedMLP(8, 4) for _ in range(3)], 2, normalize=True, shared_expert=shared, jitter_noise=jitter
    )
    nn.init.normal_(block.gate.weight)
    return block


def test_jitter_multiplies_the_input_by_uniform_noise_while_training_only() -> None:
    block = _block(jitter=0.25)
    hidden = torch.randn(2, 3, 8)
    with torch.no_grad():
        block.eval()
        plain, _ = block(hidden)
        block.train()
        torch.manual_seed(7)
        noisy, _ = block(hidden)
        torch.manual_seed(7)
        noise = torch.empty_like(hidden).uniform_(0.75, 1.25)
        block.eval()
        expected, _ = block(hidden * noise)
    torch.testing.assert_close(noisy, expected)
    assert not torch.allclose(noisy, plain)


def test_no_jitter_draws_no_random_numbers_while_training() -> None:
    for jitter in (0.0, None):
        block = _block(jitter=jitter).train()  # None: the reference's "no jitter" too
        state = torch.get_rng_state()
        block(torch.randn(1, 2, 8))
        state_after_input = torch.get_rng_state()
        torch.set_rng_state(state)
        torch.randn(1, 2, 8)
        assert torch.equal(torch.get_rng_state(), state_after_input)  # only the input drew numbers


def test_a_shared_expert_is_added_through_its_sigmoid_gate() -> None:
    block = _block(shared=GatedMLP(8, 5))
    nn.init.normal_(block.shared_expert_gate.weight)
    hidden = torch.randn(2, 3, 8)
    with torch.no_grad():
        out, _ = block(hidden)
        flat = hidden.reshape(-1, 8)
        _, weights, index = block.gate(flat)
        routed = run_experts(flat, block.experts, index, weights)
        expected = routed + torch.sigmoid(block.shared_expert_gate(flat)) * block.shared_expert(flat)
    torch.testing.assert_close(out, expected.reshape(2, 3, 8))


class _CountingSource(dict):
    def __init__(self, *args: object) -> None:
        super().__init__(*args)
        self.reads: dict[str, int] = {}

    def __getitem__(self, key: str) -> torch.Tensor:
        self.reads[key] = self.reads.get(key, 0) + 1
        return super().__getitem__(key)


def test_each_stacked_expert_tensor_is_read_once_and_then_released() -> None:
    gate_up = torch.randn(3, 10, 4)
    down = torch.randn(3, 4, 5)
    source = _CountingSource({"m.experts.gate_up_proj": gate_up, "m.experts.down_proj": down})
    view = FusedExpertsSource(source, "w1", "w3", "w2", 3)
    for e in range(3):
        # exact: slices of the stored tensors (the three below)
        assert torch.equal(view[f"m.experts.{e}.w1.weight"], gate_up[e, :5])
        assert torch.equal(view[f"m.experts.{e}.w3.weight"], gate_up[e, 5:])
        assert torch.equal(view[f"m.experts.{e}.w2.weight"], down[e])
    assert source.reads == {"m.experts.gate_up_proj": 1, "m.experts.down_proj": 1}
    assert view._pending == {}  # nothing kept once every slice was taken


# From test_moe_full_mutants.py: ``microformers_sdk.moe`` behaviour the full mutation run found unasserted
# (docs/reliability.md, issue #19).


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


# From test_moe_rope_rest_mutants.py: ``microformers_sdk.moe`` behaviour the seventh mutation pass found unasserted
# (docs/reliability.md, issue #19).


class _Float32Expert(nn.Module):
    """An expert that computes in float32 whatever its input's dtype (as a dequantising expert may)."""

    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return hidden_states.float() * self.scale


def test_output_keeps_the_hidden_dtype_for_one_token_as_for_several() -> None:
    """Decoding one token and a prompt of several give the hidden states' dtype, even from float32 experts."""
    experts = [_Float32Expert(scale) for scale in (0.5, 2.0, -1.0)]
    weights = torch.tensor([[0.75, 0.25], [0.5, 0.5], [0.9, 0.1]])  # float32, as Mixtral keeps them
    index = torch.tensor([[2, 0], [1, 2], [0, 1]])
    hidden = torch.tensor([[1.0, -2.0], [0.5, 4.0], [3.0, 0.25]]).to(torch.bfloat16)
    scales = torch.tensor([0.5, 2.0, -1.0])
    expected = hidden.float() * (scales[index] * weights).sum(-1, keepdim=True)
    several = run_experts(hidden, experts, index, weights)
    assert several.dtype == torch.bfloat16
    torch.testing.assert_close(several, expected.to(torch.bfloat16))
    for token in range(3):
        one = run_experts(hidden[token : token + 1], experts, index[token : token + 1], weights[token : token + 1])
        assert one.dtype == torch.bfloat16, token
        torch.testing.assert_close(one, expected[token : token + 1].to(torch.bfloat16))
