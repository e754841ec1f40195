"""GenerationConfig.validate (this plugin's implementation): valid settings pass, invalid ones are named."""

from __future__ import annotations

from typing import Any

import pytest

from microformers import GenerationConfig, GenerationError


@pytest.mark.parametrize("settings", [{"stop_strings": ["ab", "c"]}, {"cache_implementation": "dynamic"}])
def test_valid_settings_pass_validation(settings: dict[str, Any]) -> None:
    GenerationConfig(**settings).validate()


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"temperature": -1.0}, r"^temperature=-1\.0 must be a positive number\.$"),
        ({"min_length": -1}, r"^min_length=-1 must be an integer >= 0$"),
    ],
)
def test_invalid_settings_are_named_by_validation(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(GenerationError, match=message):
        GenerationConfig(**settings).validate()
