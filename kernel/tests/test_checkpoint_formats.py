"""``microformers.formats``: sharding, safetensors and legacy ``.bin`` reading and writing."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from microformers import CheckpointError, ConfigError, FileMissingError
from microformers.formats import parse_size, plan_shards, save_sharded, shard_file_names
from microformers.formats.bin_format import PYTORCH_BIN, PytorchBinFormat
from microformers.formats.safetensors_format import SAFETENSORS, SafetensorsFormat, tensor_entries, variant_name
from microformers.weights import FormatRefused

# From test_formats_full_mutants.py: ``microformers.formats`` (sharding, safetensors, legacy ``.bin``): behaviour
# the fourth (full) mutation run found unasserted (docs/reliability.md, "Fourth pass").


class NotATensor:
    pass


def test_sizes() -> None:
    assert parse_size("1024") == 1024 and parse_size("2KiB") == 2048
    with pytest.raises(ConfigError) as info:
        parse_size("lots")
    assert str(info.value) == "max_shard_size='lots' is not a size; use bytes or a string like '500MB' or '5GB'"


def test_a_new_shard_starts_empty() -> None:
    sizes = {"a": 4, "b": 4, "c": 4, "d": 4}
    assert plan_shards(sizes, 8) == [["a", "b"], ["c", "d"]]


def test_shard_names_count_from_one() -> None:
    assert shard_file_names("model", ".safetensors", 3) == [
        "model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors"
    ]  # fmt: skip


def test_the_shard_index_is_written_like_the_references(tmp_path: Path) -> None:
    state = {"b": torch.zeros(4), "a": torch.ones(4)}
    written = save_sharded(state, tmp_path, 16, "model.safetensors", "model.safetensors.index.json", lambda t, p: None)
    assert written == [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "model.safetensors.index.json",
    ]
    index = {
        "metadata": {"total_size": 32},
        "weight_map": {"b": "model-00001-of-00002.safetensors", "a": "model-00002-of-00002.safetensors"},
    }
    text = (tmp_path / "model.safetensors.index.json").read_text()
    assert text == json.dumps(index, indent=2, sort_keys=True) + "\n"


def test_a_corrupt_safetensors_file_says_what_to_do(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{not json")
    with pytest.raises(CheckpointError, match=r"truncated or corrupted\. Re-download or re-save the checkpoint\.$"):
        SAFETENSORS.load([tmp_path / "model.safetensors"])


def test_variants_are_found_in_both_formats(tmp_path: Path) -> None:
    assert variant_name("model.safetensors.index.json", "fp16") == "model.safetensors.index.fp16.json"
    save_file({"w": torch.ones(2)}, str(tmp_path / "model.fp16.safetensors"))
    assert SAFETENSORS.find(tmp_path, variant="fp16") == [tmp_path / "model.fp16.safetensors"]
    assert SAFETENSORS.find(tmp_path) is None
    index = {"weight_map": {"w": "model-00001-of-00001.safetensors"}}
    (tmp_path / "model.safetensors.index.fp16.json").write_text(json.dumps(index))
    save_file({"w": torch.ones(2)}, str(tmp_path / "model-00001-of-00001.safetensors"))
    assert SAFETENSORS.find(tmp_path, variant="fp16") == [tmp_path / "model-00001-of-00001.safetensors"]
    torch.save({"w": torch.ones(2)}, tmp_path / "pytorch_model.fp16.bin")
    assert PYTORCH_BIN.find(tmp_path, variant="fp16") == [tmp_path / "pytorch_model.fp16.bin"]
    assert PYTORCH_BIN.find(tmp_path) is None
    (tmp_path / "pytorch_model.bin.index.fp16.json").write_text(json.dumps({"weight_map": {"w": "p-1.bin"}}))
    torch.save({"w": torch.ones(2)}, tmp_path / "p-1.bin")
    assert PYTORCH_BIN.find(tmp_path, variant="fp16") == [tmp_path / "p-1.bin"]


def test_use_safetensors_false_skips_safetensors(tmp_path: Path) -> None:
    save_file({"w": torch.ones(2)}, str(tmp_path / "model.safetensors"))
    assert SAFETENSORS.find(tmp_path, use_safetensors=False) is None
    assert SAFETENSORS.find(tmp_path, use_safetensors=True) == [tmp_path / "model.safetensors"]


@pytest.mark.parametrize("bad", ["", ".", "..", "sub/model.safetensors", "sub\\model.safetensors", 5])
def test_an_index_naming_anything_but_a_plain_file_is_refused(tmp_path: Path, bad: object) -> None:
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"w": bad}}))
    with pytest.raises(CheckpointError) as info:
        SAFETENSORS.find(tmp_path)
    assert str(info.value) == (
        f"{index} names shard {bad!r}: weight_map values must be shard file names in the same folder (no paths, "
        "no '..'); the index is corrupt or hostile. Re-save or re-download the checkpoint."
    )


def test_an_index_without_a_weight_map_is_refused(tmp_path: Path) -> None:
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {}}))
    with pytest.raises(CheckpointError) as info:
        SAFETENSORS.find(tmp_path)
    assert str(info.value) == f"{index} has no 'weight_map' object; re-save the checkpoint"


def test_saved_safetensors_carry_the_metadata_and_follow_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        SAFETENSORS.save({"w": torch.ones(2)}, tmp_path, "5GB", {"format": "pt"})
    finally:
        os.umask(old)
    path = tmp_path / "model.safetensors"
    assert (path.stat().st_mode & 0o777) == 0o644
    with safe_open(str(path), framework="pt") as handle:
        assert handle.metadata() == {"format": "pt"}


def test_bin_files_are_fetched_only_when_safetensors_are_declined() -> None:
    assert PYTORCH_BIN.patterns(use_safetensors=False) == ["*.bin"]
    assert PYTORCH_BIN.patterns() == [] and PYTORCH_BIN.patterns(use_safetensors=True) == []


def test_bin_refusals_name_the_file_and_the_fix(tmp_path: Path) -> None:
    torch.save({"w": torch.ones(2)}, tmp_path / "pytorch_model.bin")
    with pytest.raises(FormatRefused) as info:
        PYTORCH_BIN.find(tmp_path, use_safetensors=True)
    assert str(info.value) == (
        f"{tmp_path} only has legacy pickle weights (pytorch_model.bin) and use_safetensors=True was passed; drop it "
        "to load them (read with torch.load(weights_only=True))."
    )
    index = tmp_path / "pytorch_model.bin.index.json"
    index.write_text(json.dumps({"weight_map": {"w": "pytorch_model-00001-of-00002.bin"}}))
    with pytest.raises(FormatRefused, match=r"legacy pickle weights \(pytorch_model\.bin\.index\.json\) and"):
        PYTORCH_BIN.find(tmp_path, use_safetensors=True)
    with pytest.raises(FileMissingError) as missing:
        PYTORCH_BIN.find(tmp_path)
    assert str(missing.value) == f"shard pytorch_model-00001-of-00002.bin named in {index} is missing from {tmp_path}"


def test_a_bin_file_with_arbitrary_objects_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "pytorch_model.bin"
    torch.save({"w": torch.ones(2), "x": NotATensor()}, path)
    with pytest.raises(CheckpointError, match=rf"^cannot read {path} as PyTorch weights \(weights_only=True\): "):
        PYTORCH_BIN.load([path])


def test_a_saved_view_stores_only_its_own_values(tmp_path: Path) -> None:
    big = torch.arange(100_000, dtype=torch.float32)
    PYTORCH_BIN.save({"w": big[:4]}, tmp_path, "5GB", {})
    assert (tmp_path / "pytorch_model.bin").stat().st_size < 10_000
    # exact: a save/load round trip copies bytes
    assert torch.equal(PYTORCH_BIN.load([tmp_path / "pytorch_model.bin"])["w"], big[:4])


# From test_formats_mutants.py: Behaviour of ``microformers.formats`` that the mutation pass found unasserted
# (docs/reliability.md).


def test_shards_fill_up_to_exactly_the_limit() -> None:
    assert plan_shards({"a": 4, "b": 6, "c": 1}, 10) == [["a", "b"], ["c"]]  # 4 + 6 == 10 fits
    assert plan_shards({"a": 10, "b": 1}, 10) == [["a"], ["b"]]
    assert plan_shards({"big": 25, "b": 1}, 10) == [["big"], ["b"]]  # a larger tensor gets its own shard


def test_safetensors_download_patterns() -> None:
    assert (
        SafetensorsFormat().patterns() == ["*.safetensors"]
        and SafetensorsFormat().patterns(use_safetensors=False) == []
    )


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


def test_float32_tensors_off_a_cache_line_are_read_into_aligned_memory(tmp_path: Path) -> None:
    """safetensors packs tensors end to end after an 8-byte-aligned header: after a 3-float tensor the next starts
    12 bytes into a line. float32 ones come back line-aligned (read from the file), with the file's values; others
    stay views of the mapping."""
    path = tmp_path / "model.safetensors"
    tensors = {
        "a": torch.arange(3, dtype=torch.float32),
        "b": torch.randn(5, 40),
        "c": torch.randn(7).to(torch.bfloat16),
        "d": torch.arange(9, dtype=torch.int64),
        "e": torch.empty(0, 4),
        "f": torch.randn(6, 8),
    }
    save_file(tensors, str(path))
    source = SAFETENSORS.load([path])
    with safe_open(str(path), framework="pt") as mapped:
        assert any(mapped.get_tensor(name).data_ptr() % 64 for name in "bf")  # the file puts float32 off a line
        in_place = {name: mapped.get_tensor(name).data_ptr() % 64 for name in "cd"}
    for name, expected in tensors.items():
        loaded = source[name]
        # exact: the same bytes, read instead of mapped
        assert loaded.dtype == expected.dtype and torch.equal(loaded, expected), name
        if loaded.dtype == torch.float32:
            assert loaded.data_ptr() % 64 == 0, name
        elif name in in_place:
            assert loaded.data_ptr() % 64 == in_place[name], name  # a view of the mapping, as it lies


def test_header_entries_give_each_tensor_its_offset_dtype_and_shape(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    save_file({"a": torch.zeros(3, dtype=torch.float16), "b": torch.arange(6, dtype=torch.float32).view(2, 3)}, str(path))
    entries = tensor_entries(path)
    assert {name: entry[1:] for name, entry in entries.items()} == {"a": ("F16", (3,)), "b": ("F32", (2, 3))}
    with open(path, "rb") as file:
        file.seek(entries["b"][0])
        assert torch.equal(torch.frombuffer(bytearray(file.read(24)), dtype=torch.float32), torch.arange(6.0))


def test_a_header_longer_than_its_file_is_refused_before_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    path.write_bytes((2**62).to_bytes(8, "little") + b"{}")  # a hostile size: reading it would allocate 4 EiB
    with pytest.raises(CheckpointError, match=r"model.safetensors has no readable safetensors header .*re-save"):
        tensor_entries(path)
