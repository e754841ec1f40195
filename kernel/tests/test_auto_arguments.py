"""Auto-class arguments of the wrong kind are ConfigErrors naming the call (issue 42 audit): a number or None as the
model source was looked up on the Hub under its str(); a dict given to from_config was an AttributeError;
return_unused_kwargs=True was set on the config (and saved into config.json) instead of being honoured."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from microformers import (
    AutoConfig,
    AutoFeatureExtractor,
    AutoModelForCausalLM,
    AutoProcessor,
    AutoTokenizer,
    ConfigError,
)


@pytest.mark.parametrize("source", [5, None, ["a"], {"model_type": "toy"}])
@pytest.mark.parametrize(
    "load",
    [
        AutoConfig.from_pretrained,
        AutoModelForCausalLM.from_pretrained,
        AutoTokenizer.from_pretrained,
        AutoFeatureExtractor.from_pretrained,
        AutoProcessor.from_pretrained,
    ],
)
def test_a_source_that_is_no_string_or_path_is_refused_naming_the_call(load: Any, source: Any) -> None:
    call = load.__qualname__.replace("_AutoModel", "AutoModelForCausalLM")
    expected = f"{call}({source!r}): pass a folder, a Hub repo id ('owner/name') or an installed model alias"
    with pytest.raises(ConfigError, match=f"^{re.escape(expected)}"):
        load(source)


def test_a_config_argument_of_the_wrong_kind_is_refused(saved_toy: Path) -> None:
    with pytest.raises(ConfigError, match=r"^AutoModelForCausalLM\.from_pretrained\(config=5\): pass a config object"):
        AutoModelForCausalLM.from_pretrained(saved_toy, config=5)


def test_from_config_wants_a_config_object() -> None:
    with pytest.raises(ConfigError, match=r"^AutoModelForCausalLM\.from_config\(\{'model_type': 'toy'\}\): pass a "):
        AutoModelForCausalLM.from_config({"model_type": "toy"})


def test_return_unused_kwargs_returns_what_is_no_setting_and_sets_only_settings(saved_toy: Path) -> None:
    config, unused = AutoConfig.from_pretrained(saved_toy, return_unused_kwargs=True, hidden_size=48, foo=1)
    assert (config.hidden_size, unused) == (48, {"foo": 1})
    assert not hasattr(config, "foo") and "return_unused_kwargs" not in config.to_dict()
    plain = AutoConfig.from_pretrained(saved_toy, foo=1)  # without it, a keyword still becomes a setting
    assert plain.foo == 1 and "return_unused_kwargs" not in plain.to_dict()
    with pytest.raises(ConfigError, match=r"return_unused_kwargs='yes'\): pass a bool"):
        AutoConfig.from_pretrained(saved_toy, return_unused_kwargs="yes")
