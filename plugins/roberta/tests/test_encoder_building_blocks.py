"""RoBERTa's encoder (BERT's, subclassed) through its public ``forward``: behaviour the mutation pass of the SDK's
former encoder mixins found unasserted (docs/reliability.md)."""

from __future__ import annotations

import torch

from microformers_roberta.configuration_roberta import RobertaConfig
from microformers_roberta.modeling_roberta import RobertaModel

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
