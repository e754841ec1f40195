"""The SDK's MoE decoder heads (``microformers_sdk.decoder_heads``) through Mixtral: behaviour the mutation pass
found unasserted (docs/reliability.md)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

from microformers.plugins import registry
from microformers_mixtral.configuration_mixtral import MixtralConfig
from microformers_mixtral.modeling_mixtral import MixtralForCausalLM
from microformers_sdk.attention import eager_attention

TINY = {
    "vocab_size": 64, "hidden_size": 32, "intermediate_size": 24, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "num_local_experts": 4, "num_experts_per_tok": 2, "max_position_embeddings": 64,
}  # fmt: skip


def test_attentions_and_hidden_states_only_when_asked() -> None:
    torch.manual_seed(0)
    config = MixtralConfig(**TINY)
    config._attn_implementation = "eager"
    model = MixtralForCausalLM(config).eval()
    ids = torch.randint(1, 64, (1, 5))
    with torch.no_grad():
        plain = model(ids)
        full = model(ids, output_attentions=True, output_hidden_states=True)
    assert plain.attentions is None and plain.hidden_states is None
    assert len(full.attentions) == 2 and full.attentions[0].shape == (1, 4, 5, 5)
    torch.testing.assert_close(full.attentions[1].sum(-1), torch.ones(1, 4, 5))
    assert len(full.hidden_states) == 3 and full.hidden_states[0].shape == (1, 5, 32)


def test_the_configured_attention_implementation_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []

    def recording(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: Any, **kwargs: Any) -> Any:
        calls.append(query.shape[2])
        return eager_attention(query, key, value, mask, **kwargs)

    get = registry.get
    monkeypatch.setattr(
        registry,
        "get",
        lambda kind, name: (
            SimpleNamespace(load=lambda: recording) if (kind, name) == ("attention", "recording") else get(kind, name)
        ),
    )
    torch.manual_seed(0)
    config = MixtralConfig(**TINY)
    config._attn_implementation = "recording"
    with torch.no_grad():
        MixtralForCausalLM(config).eval()(torch.randint(1, 64, (1, 5)))
    assert calls == [5, 5]  # both layers
