"""``reference_module_renames``: module paths translated between a model's names and the reference's."""

from __future__ import annotations

from typing import ClassVar

import pytest
from torch import nn

from microformers.errors import ConfigError
from microformers_peft.renames import ModuleRenames


class Renamed(nn.Module):
    reference_module_renames: ClassVar[tuple[tuple[str, str], ...]] = (
        ("layers.{n}.attention.q_proj", "encoder.layer.{n}.attention.attention.query"),
        ("layers.{n}.mlp.fc2", "encoder.layer.{n}.output.dense"),
        ("layers.{n}", "encoder.layer.{n}"),
    )


def test_paths_and_keys_translate_both_ways_by_whole_components() -> None:
    renames = ModuleRenames.of(Renamed())
    assert renames is not None
    ours = "vit.encoder.layer.11.attention.attention.query.lora_A.weight"
    assert renames.to_reference(ours) == "vit.layers.11.attention.q_proj.lora_A.weight"
    assert renames.from_reference("vit.layers.11.attention.q_proj.lora_A.weight") == ours
    # the most specific rule wins; attention.output.dense is not the MLP's output.dense
    assert renames.to_reference("vit.encoder.layer.0.output.dense") == "vit.layers.0.mlp.fc2"
    assert renames.to_reference("vit.encoder.layer.0.attention.output.dense") == "vit.layers.0.attention.output.dense"
    assert renames.to_reference("vit.encoder.layer.3.layernorm_before.weight") == "vit.layers.3.layernorm_before.weight"
    # whole components only, and paths already in our names (legacy files) stay as they are
    assert renames.from_reference("vit.sublayers.0.x") == "vit.sublayers.0.x"
    assert renames.from_reference(ours) == ours
    assert renames.to_reference("classifier.weight") == "classifier.weight"


def test_models_without_a_declaration_have_no_renames_and_bad_ones_are_refused() -> None:
    assert ModuleRenames.of(nn.Linear(2, 2)) is None

    class Bad(nn.Module):
        reference_module_renames: ClassVar[tuple[str, ...]] = ("layers.{n}",)

    with pytest.raises(ConfigError, match=r"Bad.reference_module_renames: 'layers.\{n\}' is not a \(reference, ours\)"):
        ModuleRenames.of(Bad())
