"""``microformers_sdk.inputs``, ``config_checks`` and ``sources``: input validation, config checks and weight
sources."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from microformers import ConfigError, FileMissingError, InputError
from microformers_sdk.cache import DynamicCache
from microformers_sdk.config_checks import check_choice, check_heads_divide, check_positive_ints
from microformers_sdk.inputs import prepare_decoder_inputs
from microformers_sdk.sources import package_folder

# From test_inputs_full_mutants.py: ``microformers_sdk.inputs``, ``config_checks`` and ``sources``: behaviour the
# fourth (full) mutation run found unasserted (docs/reliability.md, "Fourth pass").


class ToyModel:
    def __init__(self, **config: object) -> None:
        defaults = {"output_attentions": False, "output_hidden_states": False, "return_dict": True}
        self.config = SimpleNamespace(**{**defaults, **config})


def _prepare(model: ToyModel, **kwargs: object):
    arguments = dict(
        input_ids=torch.tensor([[1, 2]]), inputs_embeds=None, attention_mask=None, position_ids=None,
        past_key_values=None, use_cache=None, output_attentions=None, output_hidden_states=None, return_dict=None,
    )  # fmt: skip
    arguments.update(kwargs)
    return prepare_decoder_inputs(model, torch.nn.Embedding(8, 2), **arguments)


def test_both_or_neither_input_is_refused_naming_the_model_class() -> None:
    with pytest.raises(InputError) as info:
        _prepare(ToyModel(), inputs_embeds=torch.zeros(1, 2, 2))
    assert str(info.value) == "ToyModel.forward needs exactly one of input_ids or inputs_embeds"


def test_use_cache_comes_from_the_config_and_defaults_to_true() -> None:
    off = _prepare(ToyModel(use_cache=False))
    assert off.use_cache is False and off.cache is None
    unset = _prepare(ToyModel())  # a config without use_cache: caching on, like the reference's default
    assert unset.use_cache is True and isinstance(unset.cache, DynamicCache)
    asked = _prepare(ToyModel(use_cache=False), use_cache=True)
    assert asked.use_cache is True and isinstance(asked.cache, DynamicCache)


def test_an_explicit_output_hidden_states_wins_over_the_config() -> None:
    assert _prepare(ToyModel(), output_hidden_states=True).output_hidden_states is True
    assert _prepare(ToyModel(output_hidden_states=True), output_hidden_states=False).output_hidden_states is False


def test_one_is_a_positive_integer() -> None:
    check_positive_ints(SimpleNamespace(num_hidden_layers=1), ["num_hidden_layers"])


def test_heads_that_do_not_divide_the_size_are_refused_naming_both_fields() -> None:
    config = SimpleNamespace(hidden_size=10, num_attention_heads=3)
    with pytest.raises(ConfigError) as info:
        check_heads_divide(config)
    assert str(info.value) == (
        "hidden_size=10 is not a multiple of num_attention_heads=3 in SimpleNamespace; fix config.json so each "
        "head gets hidden_size / num_attention_heads dimensions"
    )


def test_a_file_missing_from_an_installed_model_package_is_named_with_the_reinstall_command() -> None:
    import microformers_sdk

    folder = Path(microformers_sdk.__file__).parent
    assert package_folder("microformers_sdk", "microformers-sdk==0", "inputs.py") == folder
    with pytest.raises(FileMissingError) as info:
        package_folder("microformers_sdk", "microformers-sdk==0", "model/missing.bin")
    assert str(info.value) == (
        f"{folder / 'model/missing.bin'} is missing from the installed 'microformers_sdk' package; "
        "reinstall it with: pip install --no-deps --force-reinstall microformers-sdk==0"
    )


# From test_inputs_mutants.py: ``microformers_sdk.inputs`` and ``config_checks`` behaviour the mutation pass found
# unasserted (docs/reliability.md).


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
