"""Behaviour of ``microformers.formats`` that the mutation pass found unasserted (docs/reliability.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from microformers import ConfigError
from microformers.formats import plan_shards
from microformers.formats.bin_format import PytorchBinFormat
from microformers.formats.safetensors_format import SafetensorsFormat


def test_shards_fill_up_to_exactly_the_limit() -> None:
    assert plan_shards({"a": 4, "b": 6, "c": 1}, 10) == [["a", "b"], ["c"]]  # 4 + 6 == 10 fits
    assert plan_shards({"a": 10, "b": 1}, 10) == [["a"], ["b"]]
    assert plan_shards({"big": 25, "b": 1}, 10) == [["big"], ["b"]]  # a larger tensor gets its own shard


def test_safetensors_download_patterns() -> None:
    assert SafetensorsFormat().patterns() == ["*.safetensors"] and SafetensorsFormat().patterns(use_safetensors=False) == []


def test_malformed_shard_indexes_are_named_as_such(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors.index.json").write_text("{")
    with pytest.raises(ConfigError, match=r"\(safetensors shard index\) is not valid JSON"):
        SafetensorsFormat().find(tmp_path)
    (tmp_path / "model.safetensors.index.json").unlink()
    (tmp_path / "pytorch_model.bin.index.json").write_text("[")
    with pytest.raises(ConfigError, match=r"\(pytorch shard index\) is not valid JSON"):
        PytorchBinFormat().find(tmp_path)


def test_a_pytorch_index_without_a_weight_map_lists_no_shards(tmp_path: Path) -> None:
    # no raw AttributeError: no shards are listed, and the loader then reports that it found no weights
    (tmp_path / "pytorch_model.bin.index.json").write_text('{"metadata": {}}')
    assert PytorchBinFormat().find(tmp_path) == []
