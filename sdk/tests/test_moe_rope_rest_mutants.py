"""``microformers_sdk.moe`` behaviour the seventh mutation pass found unasserted (docs/reliability.md, issue #19)."""

from __future__ import annotations

import torch
from torch import nn

from microformers_sdk.moe import run_experts


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
