"""Behaviour of ``microformers.auto`` that the mutation pass found unasserted (docs/reliability.md)."""

from __future__ import annotations

from pathlib import Path

import torch

from microformers import AutoModelForCausalLM


def test_auto_model_applies_config_overrides_and_keeps_dtype_for_loading(saved_toy: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(saved_toy, torch_dtype=torch.float16, output_hidden_states=True)
    assert model.config.output_hidden_states is True  # a config attribute given as a keyword overrides the file
    assert next(model.parameters()).dtype == torch.float16  # torch_dtype is the loading dtype, not a config edit
