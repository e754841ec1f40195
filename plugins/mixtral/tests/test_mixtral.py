"""microformers-mixtral: the SDK conformance kits, routing behaviour and config checks (no reference needed)."""

from __future__ import annotations

import pytest
import torch

from microformers.errors import ConfigError
from microformers_mixtral.configuration_mixtral import MixtralConfig
from microformers_mixtral.modeling_mixtral import MixtralForCausalLM, MixtralForSequenceClassification
from microformers_sdk.testing import ModelConformanceTests, PluginConformanceTests

TINY = {
    "vocab_size": 64,
    "hidden_size": 32,
    "intermediate_size": 24,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
    "max_position_embeddings": 64,
    "pad_token_id": 0,
}


class TestMixtralConformance(ModelConformanceTests):
    config_class = MixtralConfig
    config_kwargs = {**TINY, "num_labels": 3}
    model_classes = (MixtralForCausalLM, MixtralForSequenceClassification)  # MixtralModel: tests/parity
    padding_side = "left"


class TestMixtralPluginConformance(PluginConformanceTests):
    plugin_name = "mixtral"
    registers = (("configs", "mixtral"),)


def test_router_logits_aux_loss_and_loss_with_coefficient() -> None:
    torch.manual_seed(0)
    model = MixtralForCausalLM(MixtralConfig(**TINY, router_aux_loss_coef=0.5)).eval()
    ids = torch.randint(1, 64, (2, 6))
    with torch.no_grad():
        plain = model(ids, labels=ids)
        routed = model(ids, labels=ids, output_router_logits=True)
    assert plain.aux_loss is None and plain.router_logits is None
    assert len(routed.router_logits) == 2 and routed.router_logits[0].shape == (12, 4)
    assert float(routed.aux_loss) >= 1.0  # num_experts * sum f_e P_e is at least 1, equal when balanced
    torch.testing.assert_close(routed.loss, plain.loss + 0.5 * routed.aux_loss)
    torch.testing.assert_close(routed.logits, plain.logits)


def test_only_routed_experts_run() -> None:
    torch.manual_seed(0)
    model = MixtralForCausalLM(MixtralConfig(**TINY)).eval()
    block = model.model.layers[0].block_sparse_moe
    with torch.no_grad():  # send every token to experts 1 and 3
        block.gate.weight.zero_()
        block.gate.weight[1] = 1.0
        block.gate.weight[3] = 0.5
    seen: dict[int, int] = {}
    for index, expert in enumerate(block.experts):
        expert.register_forward_hook(lambda _m, args, _o, i=index: seen.__setitem__(i, args[0].shape[0]))
    hidden = torch.rand(1, 5, 32) + 0.1
    with torch.no_grad():
        block(hidden)
    assert seen == {1: 5, 3: 5}


def test_jitter_noise_only_in_training() -> None:
    torch.manual_seed(0)
    model = MixtralForCausalLM(MixtralConfig(**TINY, router_jitter_noise=0.5))
    ids = torch.randint(1, 64, (1, 6))
    model.eval()
    with torch.no_grad():
        assert torch.equal(model(ids).logits, model(ids).logits)  # exact: the same call twice, no noise in eval
        model.train()
        assert not torch.equal(model(ids).logits, model(ids).logits)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"num_experts_per_tok": 5}, "num_experts_per_tok"),
        ({"num_experts_per_tok": 0}, "num_experts_per_tok"),
        ({"num_local_experts": -1}, "num_local_experts"),
        ({"num_key_value_heads": 3}, "num_key_value_heads"),
        ({"hidden_size": 30}, "hidden_size"),
        ({"sliding_window": 0}, "sliding_window"),
    ],
)
def test_bad_config_is_refused_naming_the_field(changes: dict[str, int], field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        MixtralConfig(**{**TINY, **changes})


def test_config_rope_and_aliases() -> None:
    config = MixtralConfig(**TINY, rope_theta=5000.0)
    assert config.num_experts == 4 and config.rope_parameters == {"rope_type": "default", "rope_theta": 5000.0}
    assert MixtralConfig(**TINY).rope_theta == 1e6
    assert "rope_parameters" in config.to_dict() and "rope_theta" not in config.to_dict()
