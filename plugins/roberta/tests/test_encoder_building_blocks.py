"""The SDK's encoder building blocks (``microformers_sdk.encoder``) through RoBERTa: behaviour the mutation pass
found unasserted (docs/reliability.md)."""

from __future__ import annotations

import torch

from microformers_roberta.configuration_roberta import RobertaConfig
from microformers_roberta.modeling_roberta import RobertaModel
from microformers_sdk.encoder import EncoderSelfAttention

TINY = {
    "vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
    "intermediate_size": 48, "max_position_embeddings": 24, "type_vocab_size": 1,
}  # fmt: skip


def test_hidden_states_are_returned_when_asked() -> None:
    torch.manual_seed(0)
    model = RobertaModel(RobertaConfig(**TINY)).eval()
    with torch.no_grad():
        out = model(torch.full((1, 5), 5), output_hidden_states=True)
        plain = model(torch.full((1, 5), 5))
    assert len(out.hidden_states) == 3 and out.hidden_states[-1].shape == (1, 5, 32)
    torch.testing.assert_close(out.hidden_states[-1], out.last_hidden_state)
    assert plain.hidden_states is None


def test_pruning_with_an_own_output_projection_returns_no_dense() -> None:
    attention = EncoderSelfAttention(8, 2, 0.0, output="out_lin")
    assert attention.prune({1}) is None
    assert (
        attention.num_heads == 1 and attention.query.weight.shape == (4, 8) and attention.out_lin.weight.shape == (8, 4)
    )
