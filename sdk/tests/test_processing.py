"""``microformers_sdk.processing``: the exact results of padding, truncation and conversions that processors and
feature extractors return."""

from __future__ import annotations

import copy
import enum
import json
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from microformers import ConfigError, InputError
from microformers.errors import FileMissingError
from microformers_sdk.processing import (
    BatchFeature,
    FeatureExtractionMixin,
    ProcessorMixin,
    SequenceFeatureExtractor,
    is_sequence_of_arrays,
)

# From test_processing_full_mutants.py: ``microformers_sdk.processing`` behaviour that the full mutation run
# (workspace hproc) found unasserted. Each test states what a plugin author or user relies on: the exact results of
# padding and conversion, the files written, and error messages that name the argument or file at fault
# (docs/reliability.md).


def _extractor(**kwargs: Any) -> SequenceFeatureExtractor:
    settings: dict[str, Any] = {"feature_size": 1, "sampling_rate": 16000, "padding_value": 0.0, **kwargs}
    return SequenceFeatureExtractor(**settings)


def _rows(batch: BatchFeature, key: str = "input_values") -> list[list[float]]:
    return [[float(x) for x in np.asarray(row).reshape(-1)] for row in batch[key]]


class _Kind(enum.Enum):  # an enum that is not a str, as some callers pass (TensorType, PaddingStrategy)
    PT = "pt"
    NP = "np"
    LONGEST = "longest"
    MAX_LENGTH = "max_length"


# -- BatchFeature ------------------------------------------------------------------------------------
def test_batch_feature_empty_and_attribute_errors_name_the_keys() -> None:
    assert BatchFeature() == {} and BatchFeature(None, "pt") == {}
    batch = BatchFeature({"a": [1], "b": [2]})
    assert batch.a == [1]
    with pytest.raises(AttributeError) as info:
        _ = batch.c
    assert str(info.value) == "BatchFeature has no key 'c' (keys: a, b)"


def test_batch_feature_survives_pickle_and_deepcopy() -> None:
    batch = BatchFeature({"input_values": np.arange(3.0), "ids": [1, 2]})
    for clone in (pickle.loads(pickle.dumps(batch)), copy.deepcopy(batch)):
        assert isinstance(clone, BatchFeature) and set(clone) == {"input_values", "ids"}
        # exact: a copy
        assert clone.ids == [1, 2] and clone.input_values.tolist() == [0.0, 1.0, 2.0]


def test_convert_to_tensors_numpy_torch_and_enum_types() -> None:
    as_np = BatchFeature({"x": [[1, 2], [3, 4]]}, "np")
    assert isinstance(as_np["x"], np.ndarray) and as_np["x"].tolist() == [[1, 2], [3, 4]]
    as_pt = BatchFeature({"x": [[1, 2], [3, 4]]}, _Kind.PT)
    assert isinstance(as_pt["x"], torch.Tensor) and as_pt["x"].tolist() == [[1, 2], [3, 4]]
    assert isinstance(BatchFeature({"x": [1]}, _Kind.NP)["x"], np.ndarray)
    reversed_rows = np.arange(4.0)[::-1]  # a negative-stride view: torch needs a contiguous copy
    # exact: conversions copy values (both checks)
    assert BatchFeature({"x": reversed_rows}, "pt")["x"].tolist() == [3.0, 2.0, 1.0, 0.0]
    tensors = BatchFeature({"x": [torch.tensor([1.0, 2.0])]}, "np")
    assert isinstance(tensors["x"], np.ndarray) and tensors["x"].tolist() == [[1.0, 2.0]]
    unchanged = BatchFeature({"x": [1, 2]})
    assert unchanged.convert_to_tensors() is unchanged and unchanged["x"] == [1, 2]
    with pytest.raises(InputError) as info:
        BatchFeature({"x": [1]}, "jax")
    assert str(info.value) == "return_tensors='jax' is not supported; use 'pt' (torch) or 'np' (numpy)"


def test_convert_to_tensors_errors_name_the_key_and_the_shapes() -> None:
    shapes = [np.ones(n) for n in (4, 3, 2, 1)]
    with pytest.raises(InputError) as info:
        BatchFeature({"input_values": shapes}, "np")
    assert str(info.value) == (
        "cannot make a tensor of 'input_values' (rows of different shapes [(1,), (2,), (3,)]); its rows have "
        "different lengths — pass padding=True (or padding='max_length' with max_length=...) so every row has "
        "the same length"
    )
    with pytest.raises(InputError, match=r"^cannot make a tensor of 'x' \(ragged nested sequences\); its rows"):
        BatchFeature({"x": [None]}, "pt")
    assert BatchFeature({"x": []}, "np")["x"].shape == (0,)
    assert BatchFeature({"x": [np.ones(2)]}, "np")["x"].shape == (1, 2)


def test_to_casts_floats_moves_devices_and_refuses_bad_arguments() -> None:
    batch = BatchFeature({"names": ["a"], "ids": torch.tensor([1]), "values": torch.ones(2)})
    assert batch.to(dtype=torch.float16) is batch
    assert batch["values"].dtype == torch.float16 and batch["ids"].dtype == torch.int64 and batch.names == ["a"]
    batch.to(torch.device("cpu"), torch.float64)
    assert batch["values"].dtype == torch.float64
    batch.to(device="cpu", non_blocking=True)
    assert batch["values"].device.type == "cpu" and batch["values"].dtype == torch.float64
    batch.to("meta")  # a device every machine has, other than the tensors' own
    assert batch["values"].device.type == "meta" and batch["ids"].device.type == "meta"
    moved = BatchFeature({"values": torch.ones(1)}).to(device=torch.device("meta"), dtype=torch.float16)
    assert moved["values"].device.type == "meta" and moved["values"].dtype == torch.float16
    with pytest.raises(InputError) as info:
        batch.to(devise="cpu", copy=True)
    assert str(info.value) == "BatchFeature.to() got unexpected arguments ['copy', 'devise']; pass a device or dtype"
    with pytest.raises(InputError) as info:
        batch.to(1.5)
    assert str(info.value) == "BatchFeature.to(1.5): pass a device ('cpu', 'cuda:0') or a torch dtype"


# -- FeatureExtractionMixin ----------------------------------------------------------------------------
class _Fixed(FeatureExtractionMixin):
    @property
    def frozen(self) -> int:
        return 1


def test_settings_become_attributes_and_a_read_only_one_is_named() -> None:
    fe = FeatureExtractionMixin(processor_class="P", feature_extractor_type="Old", rate=3)
    assert vars(fe) == {"_processor_class": "P", "rate": 3}
    with pytest.raises(ConfigError, match=r"^cannot set 'frozen' \(argument\) on _Fixed: "):
        _Fixed(frozen=2)


def test_to_dict_json_and_repr_are_exact() -> None:
    fe = FeatureExtractionMixin(
        processor_class="MyProcessor", window=np.array([1.0, 2.0]), gain=np.float32(0.5), size=np.int64(3), dims=(1, 2)
    )
    fe._cache = "private"
    data = fe.to_dict()
    assert data == {
        "window": [1.0, 2.0],
        "gain": 0.5,
        "size": 3,
        "dims": [1, 2],
        "feature_extractor_type": "FeatureExtractionMixin",
        "processor_class": "MyProcessor",
    }
    assert type(data["gain"]) is float and type(data["size"]) is int
    text = fe.to_json_string()
    assert text == json.dumps(data, indent=2, sort_keys=True) + "\n"
    assert text.startswith('{\n  "dims": [\n') and text.endswith("}\n")
    assert repr(fe) == "FeatureExtractionMixin " + text
    data["window"].append(3.0)
    assert fe.window.tolist() == [1.0, 2.0]  # to_dict copies
    plain = FeatureExtractionMixin(rate=1)
    assert plain.to_dict() == {"rate": 1, "feature_extractor_type": "FeatureExtractionMixin"}


def test_to_dict_keeps_a_mutable_setting_separate() -> None:
    fe = FeatureExtractionMixin(nested={"a": [1]})
    fe.to_dict()["nested"]["a"].append(2)
    assert fe.nested == {"a": [1]}


def test_save_pretrained_writes_the_file_and_refuses_bad_targets(tmp_path: Path) -> None:
    fe = _extractor(vendor=1)
    assert fe.save_pretrained(tmp_path / "out") == [str(tmp_path / "out" / "preprocessor_config.json")]
    assert (tmp_path / "out" / "preprocessor_config.json").read_text(encoding="utf-8") == fe.to_json_string()
    fe.to_json_file(tmp_path / "single.json")
    assert (tmp_path / "single.json").read_text(encoding="utf-8") == fe.to_json_string()
    with pytest.raises(ConfigError) as info:
        fe.save_pretrained(tmp_path / "x", push_to_hub=True)
    assert str(info.value) == "push_to_hub is not supported by microformers; upload the folder with huggingface_hub"
    with pytest.raises(ConfigError) as info:
        fe.save_pretrained(tmp_path / "x", shard=1, zip=True)
    assert str(info.value) == "SequenceFeatureExtractor.save_pretrained() got unexpected arguments ['shard', 'zip']"
    assert fe.save_pretrained(tmp_path / "y", push_to_hub=False) == [str(tmp_path / "y" / "preprocessor_config.json")]
    with pytest.raises(ConfigError) as info:
        fe.save_pretrained(tmp_path / "single.json")
    assert str(info.value) == f"save_pretrained: {tmp_path / 'single.json'} is a file; pass a folder"


def test_from_dict_overrides_and_names_every_known_setting() -> None:
    fe = SequenceFeatureExtractor.from_dict(
        {"feature_size": 1, "sampling_rate": 8000, "padding_value": 0.0, "vendor": 1}, sampling_rate=16000
    )
    assert fe.sampling_rate == 16000 and fe.vendor == 1
    fe = SequenceFeatureExtractor.from_dict({"sampling_rate": 8000}, feature_size=2, padding_value=1.0)
    assert (fe.feature_size, fe.sampling_rate, fe.padding_value) == (2, 8000, 1.0)
    with pytest.raises(ConfigError) as info:
        SequenceFeatureExtractor.from_dict({"vendor": 1}, zeta=1, alpha=2, feature_size=1)
    assert str(info.value) == (
        "SequenceFeatureExtractor.from_pretrained() got unexpected arguments ['alpha', 'zeta']; "
        "settings of this feature extractor: feature_size, padding_value, sampling_rate, vendor"
    )
    with pytest.raises(ConfigError) as info:  # a stray "kwargs" key of a file is not offered as a setting
        SequenceFeatureExtractor.from_dict({"kwargs": {}, "vendor": 1}, zeta=1)
    assert str(info.value).endswith(
        "settings of this feature extractor: feature_size, padding_value, sampling_rate, vendor"
    )


def test_get_feature_extractor_dict_reads_either_file(tmp_path: Path) -> None:
    (tmp_path / "pre").mkdir()
    (tmp_path / "pre" / "preprocessor_config.json").write_text('{"sampling_rate": 8000}')
    (tmp_path / "pre" / "processor_config.json").write_text('{"feature_extractor": {"sampling_rate": 1}}')
    assert FeatureExtractionMixin.get_feature_extractor_dict(tmp_path / "pre") == {"sampling_rate": 8000}
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "processor_config.json").write_text('{"feature_extractor": {"sampling_rate": 1}}')
    assert FeatureExtractionMixin.get_feature_extractor_dict(tmp_path / "proc") == {"sampling_rate": 1}
    (tmp_path / "list").mkdir()
    (tmp_path / "list" / "preprocessor_config.json").write_text("[1, 2]")
    with pytest.raises(ConfigError, match=r"preprocessor_config\.json \(feature extractor configuration\)"):
        FeatureExtractionMixin.get_feature_extractor_dict(tmp_path / "list")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "processor_config.json").write_text("{oops")
    with pytest.raises(ConfigError) as info:
        FeatureExtractionMixin.get_feature_extractor_dict(tmp_path / "bad")
    assert str(info.value).startswith(
        f"{tmp_path / 'bad' / 'processor_config.json'} (processor configuration) is not valid JSON"
    )
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileMissingError) as missing:
        FeatureExtractionMixin.get_feature_extractor_dict(tmp_path / "empty")
    assert str(missing.value).startswith(f"{tmp_path / 'empty'} has no preprocessor_config.json (nor a ")
    assert FeatureExtractionMixin.get_feature_extractor_dict(tmp_path, subfolder="proc") == {"sampling_rate": 1}
    assert FeatureExtractionMixin.get_feature_extractor_dict(tmp_path, subfolder="pre") == {"sampling_rate": 8000}
    (tmp_path / "flat").mkdir()
    (tmp_path / "flat" / "processor_config.json").write_text('{"feature_extractor": "name"}')
    with pytest.raises(FileMissingError) as missing:
        FeatureExtractionMixin.get_feature_extractor_dict(tmp_path / "flat")
    assert str(missing.value) == (
        f"{tmp_path / 'flat'} has no preprocessor_config.json (nor a processor_config.json with a "
        "'feature_extractor' entry); save one with feature_extractor.save_pretrained(folder)"
    )


def test_from_pretrained_accepts_hub_and_remote_code_arguments(tmp_path: Path) -> None:
    _extractor(vendor=1).save_pretrained(tmp_path)
    fe = SequenceFeatureExtractor.from_pretrained(
        tmp_path, trust_remote_code=True, local_files_only=True, sampling_rate=8000
    )
    assert isinstance(fe, SequenceFeatureExtractor) and fe.sampling_rate == 8000 and fe.vendor == 1
    _extractor(vendor=2).save_pretrained(tmp_path / "sub")
    assert SequenceFeatureExtractor.from_pretrained(tmp_path, subfolder="sub").vendor == 2


# -- SequenceFeatureExtractor ------------------------------------------------------------------------
def test_sequence_extractor_defaults_and_settings() -> None:
    fe = _extractor()
    assert fe.to_dict() == {
        "feature_size": 1,
        "sampling_rate": 16000,
        "padding_value": 0.0,
        "padding_side": "right",
        "return_attention_mask": True,
        "feature_extractor_type": "SequenceFeatureExtractor",
    }
    assert _extractor(return_attention_mask=False, extra=1).to_dict()["return_attention_mask"] is False
    assert _extractor(padding_side="right").padding_side == "right"
    assert _extractor(padding_side="left").padding_side == "left"
    with pytest.raises(ConfigError) as info:
        _extractor(padding_side="middle")
    assert str(info.value) == "padding_side='middle': use 'left' or 'right'"


def test_pad_longest_right_left_mask_and_dtypes() -> None:
    out = _extractor().pad({"input_values": [[1.0, 2.0, 3.0], [4.0]]})
    assert _rows(out) == [[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]]
    assert [row.tolist() for row in out["attention_mask"]] == [[1, 1, 1], [1, 0, 0]]
    assert all(row.dtype == np.float32 for row in out["input_values"])
    assert all(row.dtype == np.int32 for row in out["attention_mask"])
    left = _extractor(padding_side="left", padding_value=-1.0).pad(
        [{"input_values": [1.0, 2.0]}, {"input_values": [3.0]}]
    )
    assert _rows(left) == [[1.0, 2.0], [-1.0, 3.0]]
    assert [row.tolist() for row in left["attention_mask"]] == [[1, 1], [0, 1]]
    single = _extractor().pad([{"input_values": [1.0, 2.0]}])
    assert _rows(single) == [[1.0, 2.0]] and set(single) == {"input_values", "attention_mask"}
    ints = _extractor().pad({"input_values": [np.array([1, 2], dtype=np.int64), np.array([3], dtype=np.int64)]})
    assert ints["input_values"][0].dtype == np.int64


def test_pad_strategies_max_length_multiple_and_no_padding() -> None:
    fe = _extractor()
    data = {"input_values": [[1.0, 2.0, 3.0], [4.0]]}
    assert _rows(fe.pad(data, padding="max_length", max_length=5)) == [[1, 2, 3, 0, 0], [4, 0, 0, 0, 0]]
    assert _rows(fe.pad(data, padding=_Kind.MAX_LENGTH, max_length=4)) == [[1, 2, 3, 0], [4, 0, 0, 0]]
    assert _rows(fe.pad(data, padding=_Kind.LONGEST)) == [[1, 2, 3], [4, 0, 0]]
    assert _rows(fe.pad(data, padding="longest", pad_to_multiple_of=2)) == [[1, 2, 3, 0], [4, 0, 0, 0]]
    assert _rows(fe.pad(data, pad_to_multiple_of=3)) == [[1, 2, 3], [4, 0, 0]]
    assert _rows(fe.pad(data, padding="max_length", max_length=3, pad_to_multiple_of=4)) == [
        [1, 2, 3, 0],
        [4, 0, 0, 0],
    ]
    for padding in (False, None, "do_not_pad"):
        unpadded = fe.pad(data, padding=padding)
        assert _rows(unpadded) == [[1, 2, 3], [4]]
        assert [row.tolist() for row in unpadded["attention_mask"]] == [[1, 1, 1], [1]]
    no_mask = fe.pad(data, return_attention_mask=False)
    assert set(no_mask) == {"input_values"}
    assert set(_extractor(return_attention_mask=False).pad(data)) == {"input_values"}
    assert set(_extractor(return_attention_mask=False).pad(data, return_attention_mask=True)) == {
        "input_values",
        "attention_mask",
    }


def test_pad_truncates_values_and_a_given_mask() -> None:
    fe = _extractor()
    data = {"input_values": [[1.0, 2.0, 3.0, 4.0, 5.0], [6.0]], "attention_mask": [[1, 1, 1, 1, 0], [1]]}
    out = fe.pad(data, padding="max_length", max_length=3, truncation=True)
    assert _rows(out) == [[1, 2, 3], [6, 0, 0]]
    assert [row.tolist() for row in out["attention_mask"]] == [[1, 1, 1], [1, 0, 0]]
    given = fe.pad({"input_values": [[1.0, 2.0, 3.0], [4.0]], "attention_mask": [[1, 1, 0], [1]]})
    assert [row.tolist() for row in given["attention_mask"]] == [[1, 1, 0], [1, 0, 0]]
    out = fe.pad({"input_values": [[1.0, 2.0, 3.0, 4.0, 5.0]]}, max_length=3, truncation=True, pad_to_multiple_of=2)
    assert _rows(out) == [[1, 2, 3, 4]]
    out = fe.pad({"input_values": [[1.0, 2.0, 3.0, 4.0]]}, max_length=2, truncation=True, pad_to_multiple_of=2)
    assert _rows(out) == [[1, 2]]
    out = fe.pad({"input_values": [[1.0, 2.0]]}, max_length=2, truncation=True)
    assert _rows(out) == [[1, 2]]
    with pytest.raises(InputError, match=r"^truncation=True needs max_length=\.\.\.$"):
        fe.pad({"input_values": [[1.0]]}, padding=False, truncation=True)


def test_pad_frames_of_several_features() -> None:
    fe = SequenceFeatureExtractor(feature_size=2, sampling_rate=100, padding_value=9.0, padding_side="left")
    fe.model_input_names = ["input_features"]
    out = fe.pad({"input_features": [np.ones((2, 2)), np.zeros((1, 2))]}, return_tensors="pt")
    assert out["input_features"].shape == (2, 2, 2) and out["input_features"].dtype == torch.float32
    # exact: padding copies values and adds constants
    assert out["input_features"][1].tolist() == [[9.0, 9.0], [0.0, 0.0]]
    assert out["attention_mask"].tolist() == [[1, 1], [0, 1]]


def test_pad_returns_torch_for_torch_inputs_and_numpy_otherwise() -> None:
    fe = _extractor()
    out = fe.pad({"input_values": [torch.tensor([1.0, 2.0]), torch.tensor([3.0])]})
    assert isinstance(out["input_values"], torch.Tensor) and out["input_values"].tolist() == [[1, 2], [3, 0]]
    nested = fe.pad({"input_values": [[torch.tensor(1.0), torch.tensor(2.0)], [torch.tensor(3.0)]]})
    assert isinstance(nested["input_values"], torch.Tensor) and nested["input_values"].tolist() == [[1, 2], [3, 0]]
    as_np = fe.pad({"input_values": [torch.tensor([1.0]), torch.tensor([2.0])]}, return_tensors="np")
    assert isinstance(as_np["input_values"], np.ndarray)
    listed = fe.pad({"input_values": [[1.0], [2.0]]})
    assert isinstance(listed["input_values"], list)
    batched = fe.pad({"input_values": np.ones((2, 3))})
    assert _rows(batched) == [[1, 1, 1], [1, 1, 1]]
    empty_lists = fe.pad({"input_values": [[], [1.0]]})
    assert _rows(empty_lists) == [[0.0], [1.0]]


def test_pad_empty_batches_and_scalars_per_row() -> None:
    fe = _extractor()
    empty = fe.pad({"input_values": []})
    assert isinstance(empty, BatchFeature) and dict(empty) == {"input_values": [], "attention_mask": []}
    assert dict(fe.pad({"input_values": []}, return_attention_mask=False)) == {"input_values": []}
    scalars = fe.pad({"input_values": [[1.0], [2.0, 3.0]], "label": [0.5, 1]})
    assert [float(x) for x in scalars["label"]] == [0.5, 1.0] and scalars["label"][0].dtype == np.float32


def test_pad_errors_name_the_input_and_the_setting() -> None:
    fe = _extractor()
    with pytest.raises(InputError) as info:
        fe.pad([[1.0]])
    assert str(info.value) == (
        "SequenceFeatureExtractor.pad() takes a dict of lists (or a list of dicts) with 'input_values', got list"
    )
    with pytest.raises(InputError) as info:
        fe.pad([])
    assert str(info.value).endswith("with 'input_values', got list")
    with pytest.raises(InputError) as info:
        fe.pad({"values": [[1.0]]})
    assert str(info.value) == "SequenceFeatureExtractor.pad() needs 'input_values' in its input; got keys ['values']"
    with pytest.raises(InputError) as info:
        fe.pad({"input_values": [[1.0], [2.0]], "attention_mask": [[1]]})
    assert str(info.value) == "SequenceFeatureExtractor.pad(): the entries of the batch have different batch sizes"
    with pytest.raises(InputError) as info:
        fe.pad({"input_values": [[1.0]]}, padding="max_length")
    assert str(info.value) == "padding='max_length' needs max_length=..."
    with pytest.raises(InputError) as info:
        fe.pad({"input_values": [[1.0]]}, padding=_Kind.PT)
    assert str(info.value) == "padding=<_Kind.PT: 'pt'>: use True/'longest', 'max_length', or False/'do_not_pad'"
    no_value = SequenceFeatureExtractor(feature_size=1, sampling_rate=1, padding_value=None)
    with pytest.raises(ConfigError) as config_info:
        no_value.pad({"input_values": [[1.0], [2.0, 3.0]]})
    assert str(config_info.value) == (
        "SequenceFeatureExtractor has no padding_value; set feature_extractor.padding_value = 0.0"
    )
    assert _rows(no_value.pad({"input_values": [[1.0], [2.0, 3.0]]}, padding=False)) == [[1.0], [2.0, 3.0]]


def test_pad_hook_pads_one_example_for_subclasses() -> None:
    fe = _extractor()
    padded = fe._pad({"input_values": np.array([1.0, 2.0])}, None, "longest", 4, True)
    # exact: padding copies values and adds constants (both checks)
    assert padded["input_values"].tolist() == [1.0, 2.0, 0.0, 0.0] and padded["attention_mask"].tolist() == [1, 1, 0, 0]
    same = fe._pad({"input_values": np.array([1.0, 2.0])}, 3, "do_not_pad", None, False)
    assert same["input_values"].tolist() == [1.0, 2.0] and "attention_mask" not in same


# -- ProcessorMixin ------------------------------------------------------------------------------------
class _Tokenizer:
    """A minimal tokenizer: the calls and files a processor relies on."""

    processor_class: str | None = None

    def __init__(self, vocab: dict[str, int] | None = None) -> None:
        self.vocab = vocab or {"a": 1, "b": 2}
        self.saved_with: list[str | None] = []

    def __call__(self, text: Any, add_special_tokens: bool = True, *, max_length: int | None = None) -> dict:
        texts = [text] if isinstance(text, str) else text
        ids = [[self.vocab[c] for c in t][:max_length] for t in texts]
        return {"input_ids": ids[0] if isinstance(text, str) else ids}

    def batch_decode(self, ids: Any, skip: bool = False) -> list[str]:
        return [self.decode(row, skip) for row in ids]

    def decode(self, ids: Any, skip: bool = False) -> str:
        inverse = {v: k for k, v in self.vocab.items()}
        return ("!" if skip else "") + "".join(inverse[i] for i in ids)

    def save_pretrained(self, folder: Path) -> None:
        self.saved_with.append(self.processor_class)
        (Path(folder) / "vocab.json").write_text(json.dumps(self.vocab))

    @classmethod
    def from_pretrained(cls, folder: Any, **kwargs: Any) -> _Tokenizer:
        tokenizer = cls(json.loads((Path(folder) / "vocab.json").read_text()))
        tokenizer.loaded_with = kwargs
        return tokenizer


class _Extractor(SequenceFeatureExtractor):
    def __init__(self, gain: float = 1.0, **kwargs: Any) -> None:
        kwargs.setdefault("feature_size", 1)
        kwargs.setdefault("sampling_rate", 16000)
        kwargs.setdefault("padding_value", 0.0)
        super().__init__(**kwargs)
        self.gain = gain

    def __call__(self, audio: Any, sampling_rate: int | None = None, *, padding: bool = True) -> BatchFeature:
        rows = audio if is_sequence_of_arrays(audio) else [audio]
        return self.pad({"input_values": [np.asarray(r) * self.gain for r in rows]}, padding=padding)


class _Processor(ProcessorMixin):
    feature_extractor_class = _Extractor
    tokenizer_class = _Tokenizer


def _processor() -> _Processor:
    return _Processor(feature_extractor=_Extractor(), tokenizer=_Tokenizer())


def test_processor_needs_both_components_and_no_other_arguments() -> None:
    with pytest.raises(ConfigError) as info:
        _Processor(feature_extractor=_Extractor(), tokenizer=_Tokenizer(), image_processor=1, chat=2)
    assert str(info.value) == "_Processor() got unexpected arguments ['chat', 'image_processor']"
    with pytest.raises(ConfigError) as info:
        _Processor(feature_extractor=_Extractor())
    assert str(info.value) == (
        "_Processor needs both feature_extractor=... and tokenizer=..., got feature_extractor=_Extractor, "
        "tokenizer=NoneType"
    )
    with pytest.raises(ConfigError, match=r"got feature_extractor=NoneType, tokenizer=_Tokenizer$"):
        _Processor(tokenizer=_Tokenizer())
    processor = _processor()
    assert repr(processor) == (
        f"_Processor(feature_extractor={processor.feature_extractor!r}, tokenizer={processor.tokenizer!r})"
    )
    assert processor.model_input_names == ["input_values", "labels"]


def test_processor_call_routes_arguments_to_each_component() -> None:
    processor = _processor()
    audio = processor(audio=[np.ones(2), np.ones(1)], sampling_rate=16000, padding=True)
    assert set(audio) == {"input_values", "attention_mask"} and _rows(audio) == [[1, 1], [1, 0]]
    speech = processor(raw_speech=np.ones(2), padding=False)
    assert _rows(speech) == [[1, 1]]
    unpadded = processor(audio=[np.ones(2), np.ones(1)], padding=False)
    assert _rows(unpadded) == [[1, 1], [1]]
    text = processor(text=["ab", "b"], max_length=1)
    assert text == {"input_ids": [[1], [2]]}
    both = processor(audio=np.ones(3), text="ab", add_special_tokens=False, sampling_rate=16000)
    assert both["labels"] == [1, 2] and _rows(both) == [[1, 1, 1]]
    with pytest.raises(InputError) as info:
        processor(text="a", sampling_rate=16000, zz=1)
    assert str(info.value) == (
        "_Processor() got arguments ['sampling_rate', 'zz'] that neither the feature extractor nor the tokenizer takes"
    )
    with pytest.raises(InputError) as info:
        processor(audio=np.ones(1), max_length=1)
    assert "['max_length']" in str(info.value)
    with pytest.raises(InputError) as info:
        processor(sampling_rate=16000)
    assert str(info.value) == "_Processor() needs audio=... and/or text=..."


def test_processor_call_with_components_whose_signature_is_unknown() -> None:
    class Opaque:
        __call__ = None

    processor = ProcessorMixin(feature_extractor=Opaque(), tokenizer=_Tokenizer())
    with pytest.raises(InputError, match=r"got arguments \['padding'\] that neither"):
        processor(audio=np.ones(1), padding=True)


def test_processor_decodes_with_its_tokenizer() -> None:
    processor = _processor()
    assert processor.batch_decode([[1, 2], [2]], skip=True) == ["!ab", "!b"]
    assert processor.decode([2, 1]) == "ba" and processor.decode([2], True) == "!b"
    assert processor.decode([1], skip=True) == "!a"


def test_processor_pad_passes_positional_settings_to_the_feature_extractor() -> None:
    processor = _processor()
    out = processor.pad({"input_values": [[1.0], [2.0, 3.0]]}, "max_length", 4)
    assert _rows(out) == [[1, 0, 0, 0], [2, 3, 0, 0]]


def test_processor_save_and_load_round_trip(tmp_path: Path) -> None:
    processor = _Processor(feature_extractor=_Extractor(gain=2.0, processor_class="Old"), tokenizer=_Tokenizer())
    assert processor.to_dict() == {
        "feature_extractor": {**_Extractor(gain=2.0).to_dict()},
        "processor_class": "_Processor",
    }
    written = processor.save_pretrained(tmp_path / "saved")
    assert written == [str(tmp_path / "saved" / "processor_config.json"), str(tmp_path / "saved" / "vocab.json")]
    assert processor.tokenizer.saved_with == ["_Processor"] and processor.tokenizer.processor_class is None
    text = (tmp_path / "saved" / "processor_config.json").read_text(encoding="utf-8")
    assert text == json.dumps(processor.to_dict(), indent=2, sort_keys=True) + "\n"
    loaded = _Processor.from_pretrained(tmp_path / "saved", gain=3.0, local_files_only=True, trust_remote_code=True)
    assert isinstance(loaded, _Processor) and loaded.feature_extractor.gain == 3.0
    assert loaded.feature_extractor.sampling_rate == 16000 and loaded.tokenizer.vocab == {"a": 1, "b": 2}
    assert loaded.tokenizer.loaded_with == {"local_files_only": True}
    loaded = _Processor.from_pretrained(tmp_path / "saved", sampling_rate=8000, padding_side="left", extra=1)
    assert loaded.feature_extractor.sampling_rate == 8000 and loaded.feature_extractor.padding_side == "left"
    assert loaded.tokenizer.loaded_with == {"extra": 1}


def test_processor_save_refuses_bad_targets_and_restores_the_tokenizer(tmp_path: Path) -> None:
    class Failing(_Tokenizer):
        processor_class = "Mine"

        def save_pretrained(self, folder: Path) -> None:
            raise OSError(f"disk full ({self.processor_class})")

    processor = _Processor(feature_extractor=_Extractor(), tokenizer=Failing())
    with pytest.raises(OSError, match=r"disk full \(_Processor\)"):
        processor.save_pretrained(tmp_path / "out")
    assert processor.tokenizer.processor_class == "Mine"

    class Plain:
        def save_pretrained(self, folder: Path) -> None:
            (Path(folder) / "t.txt").write_text("t")

    plain = ProcessorMixin(feature_extractor=_Extractor(), tokenizer=Plain())
    plain.save_pretrained(tmp_path / "plain")
    assert not hasattr(plain.tokenizer, "processor_class")
    with pytest.raises(ConfigError) as info:
        plain.save_pretrained(tmp_path / "x", push_to_hub=True)
    assert str(info.value) == "push_to_hub is not supported by microformers; upload the folder with huggingface_hub"
    with pytest.raises(ConfigError) as info:
        plain.save_pretrained(tmp_path / "x", safe=True)
    assert str(info.value) == "ProcessorMixin.save_pretrained() got unexpected arguments ['safe']"
    assert plain.save_pretrained(tmp_path / "y", push_to_hub=False)[-1].endswith("t.txt")
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError) as info:
        plain.save_pretrained(tmp_path / "file")
    assert str(info.value) == f"save_pretrained: {tmp_path / 'file'} is a file; pass a folder"


def test_processor_components_named_in_the_registry_or_by_auto_tokenizer(tmp_path: Path) -> None:
    from microformers_audio import Wav2Vec2CTCTokenizer, Wav2Vec2FeatureExtractor

    (tmp_path / "vocab.json").write_text(json.dumps({"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3, "|": 4, "A": 5}))
    tokenizer = Wav2Vec2CTCTokenizer(tmp_path / "vocab.json")

    class Named(ProcessorMixin):
        feature_extractor_class = "Wav2Vec2FeatureExtractor"

    Named(feature_extractor=Wav2Vec2FeatureExtractor(), tokenizer=tokenizer).save_pretrained(tmp_path / "saved")
    loaded = Named.from_pretrained(tmp_path / "saved", do_normalize=False)
    assert loaded.tokenizer.do_lower_case is False
    nested = Named.from_pretrained(tmp_path, subfolder="saved", do_normalize=False, do_lower_case=True)
    assert nested.feature_extractor.do_normalize is False and nested.tokenizer.do_lower_case is True
    assert nested.tokenizer.get_vocab() == tokenizer.get_vocab()
    assert (
        isinstance(loaded.feature_extractor, Wav2Vec2FeatureExtractor)
        and loaded.feature_extractor.do_normalize is False
    )
    assert isinstance(loaded.tokenizer, Wav2Vec2CTCTokenizer) and loaded.tokenizer.get_vocab() == tokenizer.get_vocab()

    class MissingExtractor(ProcessorMixin):
        feature_extractor_class = "NoSuchExtractor"

    with pytest.raises(Exception, match=r"provides feature extractor 'NoSuchExtractor'"):
        MissingExtractor.from_pretrained(tmp_path / "saved")

    class MissingTokenizer(ProcessorMixin):
        feature_extractor_class = Wav2Vec2FeatureExtractor
        tokenizer_class = "NoSuchTokenizer"

    with pytest.raises(Exception, match=r"provides tokenizer 'NoSuchTokenizer'"):
        MissingTokenizer.from_pretrained(tmp_path / "saved")


# -- helpers ------------------------------------------------------------------------------------------
def test_is_sequence_of_arrays() -> None:
    assert is_sequence_of_arrays(np.ones((2, 3))) and not is_sequence_of_arrays(np.ones(3))
    assert is_sequence_of_arrays([np.ones(2)]) and is_sequence_of_arrays([[1.0]]) and is_sequence_of_arrays(((1,),))
    assert not is_sequence_of_arrays([]) and not is_sequence_of_arrays([1.0, 2.0])
    assert not is_sequence_of_arrays({"a": [1]}) and not is_sequence_of_arrays("ab")
    assert is_sequence_of_arrays([[1.0], 2.0]) and not is_sequence_of_arrays([2.0, [1.0]])


# From test_processing_mutants.py: ``microformers_sdk.processing`` behaviour the mutation pass found unasserted
# (docs/reliability.md).


def test_padding_side_is_taken_and_checked() -> None:
    left = _extractor(padding_side="left")
    assert left.padding_side == "left"
    padded = left.pad({"input_values": [[1.0, 2.0], [3.0]]})
    assert [list(row) for row in padded["input_values"]] == [[1.0, 2.0], [0.0, 3.0]]
    with pytest.raises(ConfigError, match=r"^padding_side='middle': use 'left' or 'right'$"):
        _extractor(padding_side="middle")


def test_bad_padding_and_truncation_arguments_are_named() -> None:
    extractor = _extractor()
    with pytest.raises(InputError) as info:
        extractor.pad({"input_values": [[1.0]]}, padding="everything")
    assert str(info.value) == "padding='everything': use True/'longest', 'max_length', or False/'do_not_pad'"
    with pytest.raises(InputError, match=r"^truncation=True needs max_length=\.\.\.$"):
        extractor.pad({"input_values": [[1.0]]}, truncation=True)


def test_scalar_features_are_kept_as_arrays() -> None:
    padded = _extractor().pad([{"input_values": [1.0, 2.0], "label": 1}, {"input_values": [3.0], "label": 0}])
    assert [int(x) for x in padded["label"]] == [1, 0]


class _Features:
    def pad(self, features: object, *args: object, **kwargs: object) -> dict:
        return {"input_values": ("padded", features, args, kwargs)}


class _Tokens:
    def pad(self, labels: object, **kwargs: object) -> dict:
        return {"input_ids": ("ids", labels, kwargs)}


def test_a_processor_pads_features_and_labels_with_their_own_components() -> None:
    processor = ProcessorMixin(feature_extractor=_Features(), tokenizer=_Tokens())
    both = processor.pad([1], labels=[2], padding=True)
    assert both == {"input_values": ("padded", [1], (), {"padding": True}), "labels": ("ids", [2], {"padding": True})}
    assert processor.pad(input_features=[1]) == {"input_values": ("padded", [1], (), {})}
    assert processor.pad(labels=[2]) == {"input_ids": ("ids", [2], {})}


def test_a_component_named_by_string_comes_from_the_processors_registry() -> None:
    cls = ProcessorMixin._component_class("Wav2Vec2FeatureExtractor", "feature extractor")
    assert cls.__name__ == "Wav2Vec2FeatureExtractor"
    assert ProcessorMixin._component_class(_Features, "feature extractor") is _Features
