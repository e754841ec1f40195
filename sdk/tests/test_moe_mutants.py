"""``microformers_sdk.moe`` behaviour the mutation pass found unasserted (docs/reliability.md)."""

from __future__ import annotations

import torch
from torch import nn

from microformers_sdk.layers import GatedMLP
from microformers_sdk.moe import FusedExpertsSource, SparseMoeBlock, run_experts


def _block(jitter: float = 0.0, shared: nn.Module | None = None) -> SparseMoeBlock:
    torch.manual_seed(0)
    block = SparseMoeBlock(8, [GatedMLP(8, 4) for _ in range(3)], 2, normalize=True, shared_expert=shared, jitter_noise=jitter)
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
