"""microformers-qwen2-moe: the SDK conformance kits, layer layout and config checks (no reference needed)."""

from __future__ import annotations

import pytest
import torch

from microformers.errors import ConfigError
from microformers_qwen2_moe.configuration_qwen2_moe import Qwen2MoeConfig
from microformers_qwen2_moe.modeling_qwen2_moe import Qwen2MoeForCausalLM, Qwen2MoeForSequenceClassification
from microformers_sdk.layers import GatedMLP
from microformers_sdk.moe import SparseMoeBlock
from microformers_sdk.testing import ModelConformanceTests, PluginConformanceTests

TINY = {
    "vocab_size": 64,
    "hidden_size": 32,
    "intermediate_size": 40,
    "moe_intermediate_size": 16,
    "shared_expert_intermediate_size": 24,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "max_position_embeddings": 64,
    "pad_token_id": 0,
}


class TestQwen2MoeConformance(ModelConformanceTests):
    """One sparse layer (routed experts + shared expert) and one dense layer (``mlp_only_layers``)."""

    config_class = Qwen2MoeConfig
    config_kwargs = {**TINY, "mlp_only_layers": [1], "num_labels": 3}
    model_classes = (Qwen2MoeForCausalLM, Qwen2MoeForSequenceClassification)
    padding_side = "left"


class TestQwen2MoePluginConformance(PluginConformanceTests):
    plugin_name = "qwen2_moe"
    registers = (("configs", "qwen2_moe"),)


@pytest.mark.parametrize(
    ("changes", "sparse"),
    [
        ({}, [True, True, True, True]),
        ({"mlp_only_layers": [0, 3]}, [False, True, True, False]),
        ({"decoder_sparse_step": 2}, [False, True, False, True]),
        ({"num_experts": 0, "num_experts_per_tok": 0}, [False, False, False, False]),
    ],
)
def test_sparse_and_dense_layers(changes: dict[str, object], sparse: list[bool]) -> None:
    config = Qwen2MoeConfig(**{**TINY, "num_hidden_layers": 4, **changes})
    model = Qwen2MoeForCausalLM(config)
    assert [isinstance(layer.mlp, SparseMoeBlock) for layer in model.model.layers] == sparse
    dense = [layer.mlp for layer in model.model.layers if not isinstance(layer.mlp, SparseMoeBlock)]
    assert all(isinstance(mlp, GatedMLP) and mlp.up_proj.out_features == 40 for mlp in dense)
    names = set(model.state_dict())
    if sparse[1]:
        assert "model.layers.1.mlp.experts.3.gate_proj.weight" in names
        assert "model.layers.1.mlp.shared_expert.down_proj.weight" in names
        assert "model.layers.1.mlp.shared_expert_gate.weight" in names
    with torch.no_grad():
        out = model(torch.randint(1, 64, (1, 5)), output_router_logits=True)
    assert len(out.router_logits or ()) == sum(sparse)


def test_shared_expert_is_added_through_its_sigmoid_gate() -> None:
    torch.manual_seed(0)
    block = Qwen2MoeForCausalLM(Qwen2MoeConfig(**TINY)).model.layers[0].mlp
    hidden = torch.randn(1, 3, 32)
    flat = hidden.reshape(3, 32)
    with torch.no_grad():
        full, _ = block(hidden)
        shared = torch.sigmoid(block.shared_expert_gate(flat)) * block.shared_expert(flat)
        block.shared_expert.down_proj.weight.zero_()  # the shared expert now adds nothing
        routed_only, _ = block(hidden)
    assert shared.abs().max() > 1e-3
    torch.testing.assert_close(full.reshape(3, 32), routed_only.reshape(3, 32) + shared)


def test_sliding_window_layers_follow_the_reference_rule() -> None:
    config = Qwen2MoeConfig(
        **{**TINY, "num_hidden_layers": 4}, use_sliding_window=True, sliding_window=3, max_window_layers=3
    )
    assert config.layer_types == ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]
    assert [config.layer_sliding_window(i) for i in range(4)] == [3, None, 3, None]
    assert Qwen2MoeConfig(**TINY).sliding_window == 0  # stored as the reference stores it when off


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"num_experts_per_tok": 5}, "num_experts_per_tok"),
        ({"num_experts": -2}, "num_experts"),
        ({"num_key_value_heads": 3}, "num_key_value_heads"),
        ({"hidden_size": 30}, "hidden_size"),
        ({"decoder_sparse_step": 0}, "decoder_sparse_step"),
        ({"mlp_only_layers": "1"}, "mlp_only_layers"),
        ({"layer_types": ["full_attention"]}, "layer_types"),
        ({"use_sliding_window": True, "sliding_window": None}, "sliding_window"),
    ],
)
def test_bad_config_is_refused_naming_the_field(changes: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        Qwen2MoeConfig(**{**TINY, **changes})
