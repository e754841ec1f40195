"""Behaviour of ``microformers.modeling`` that the mutation pass found unasserted (docs/reliability.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from microformers import AutoModelForCausalLM, ConfigError


def test_a_declared_size_larger_than_the_weights_is_refused_with_the_fix(saved_toy: Path) -> None:
    config_json = saved_toy / "config.json"
    config_json.write_text(json.dumps({**json.loads(config_json.read_text()), "vocab_size": 1_000_000}))
    with pytest.raises(ConfigError) as info:
        AutoModelForCausalLM.from_pretrained(saved_toy)
    message = str(info.value)
    assert message.startswith("vocab_size=1000000 in ") and "does not match the weights" in message
    assert message.endswith(
        "The configuration is corrupt or belongs to another checkpoint; fix the value or use the matching files."
    )
