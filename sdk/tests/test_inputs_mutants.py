"""``microformers_sdk.inputs`` and ``config_checks`` behaviour the mutation pass found unasserted
(docs/reliability.md)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from microformers import ConfigError
from microformers_sdk.cache import DynamicCache
from microformers_sdk.config_checks import check_choice, check_positive_ints
from microformers_sdk.inputs import prepare_decoder_inputs


def test_decoder_inputs_continue_after_the_cache_and_take_unset_flags_from_the_config() -> None:
    config = SimpleNamespace(use_cache=True, output_attentions=True, output_hidden_states=False, return_dict=False)
    model = SimpleNamespace(config=config)
    cache = DynamicCache()
    cache.update(torch.zeros(1, 1, 3, 2), torch.zeros(1, 1, 3, 2), 0)
    inputs = prepare_decoder_inputs(
        model, torch.nn.Embedding(8, 2), input_ids=torch.tensor([[1, 2]]), inputs_embeds=None, attention_mask=None,
        position_ids=None, past_key_values=cache, use_cache=None, output_attentions=None, output_hidden_states=None,
        return_dict=None,
    )  # fmt: skip
    assert inputs.past_length == 3 and inputs.position_ids.tolist() == [[3, 4]]
    assert inputs.output_attentions is True and inputs.return_dict is False
    explicit = prepare_decoder_inputs(
        model, torch.nn.Embedding(8, 2), input_ids=torch.tensor([[1]]), inputs_embeds=None, attention_mask=None,
        position_ids=None, past_key_values=None, use_cache=None, output_attentions=False, output_hidden_states=None,
        return_dict=True,
    )  # fmt: skip
    assert explicit.output_attentions is False and explicit.return_dict is True


@pytest.mark.parametrize("value", [2.5, "3", True, 0])
def test_positive_ints_refuse_other_types_and_non_positive_values(value: object) -> None:
    config = SimpleNamespace(hidden_size=value)
    with pytest.raises(
        ConfigError, match=r"^hidden_size=.* in SimpleNamespace must be a positive integer; fix config.json$"
    ):
        check_positive_ints(config, ["hidden_size"])


def test_an_unsupported_choice_lists_the_supported_ones() -> None:
    with pytest.raises(ConfigError) as info:
        check_choice(SimpleNamespace(act="relu2"), "act", ["gelu", "silu"], "microformers-toy")
    assert (
        str(info.value) == "act='relu2' in SimpleNamespace is not supported by microformers-toy (supported: gelu, silu)"
    )
