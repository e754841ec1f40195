from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch

import microformers
from microformers import ConfigError, FileMissingError, PretrainedConfig
from microformers.configuration import (
    MAX_JSON_DEPTH,
    MAX_LABELS,
    check_config_dict,
    config_file,
    config_from_dict,
    dtype_name,
    read_json,
    refuse_push_to_hub,
)


def test_round_trip_keeps_unknown_keys_auto_map_and_special_tokens(tmp_path):
    original = {
        "model_type": "toy",
        "architectures": ["ToyForCausalLM"],
        "hidden_size": 16,
        "torch_dtype": "bfloat16",
        "bos_token_id": 1,
        "eos_token_id": [2, 3],
        "pad_token_id": 0,
        "auto_map": {"AutoConfig": "configuration_x.XConfig"},
        "some_vendor_key": {"nested": [1, 2, 3]},
        "id2label": {"0": "NEG", "1": "POS"},
    }
    (tmp_path / "config.json").write_text(json.dumps(original))
    config = microformers.AutoConfig.from_pretrained(tmp_path)
    assert config.dtype == "bfloat16" and config.torch_dtype == "bfloat16"
    assert config.eos_token_id == [2, 3]
    assert config.id2label == {0: "NEG", 1: "POS"} and config.label2id == {"NEG": 0, "POS": 1}
    assert config.some_vendor_key == {"nested": [1, 2, 3]}
    out = tmp_path / "out"
    config.save_pretrained(out)
    saved = json.loads((out / "config.json").read_text())
    for key in ("architectures", "hidden_size", "bos_token_id", "eos_token_id", "auto_map", "some_vendor_key"):
        assert saved[key] == original[key]
    assert saved["dtype"] == "bfloat16" and saved["model_type"] == "toy"
    assert microformers.AutoConfig.from_pretrained(out) == config


def test_kwargs_override_and_num_labels():
    config = PretrainedConfig(num_labels=3, dtype="float16")
    assert config.num_labels == 3 and list(config.id2label.values()) == ["LABEL_0", "LABEL_1", "LABEL_2"]
    assert config.dtype == "float16"


def test_missing_config_names_folder(tmp_path):
    with pytest.raises(FileMissingError, match=r"config\.json not found in folder"):
        microformers.AutoConfig.from_pretrained(tmp_path)


def test_missing_folder(tmp_path):
    with pytest.raises(FileMissingError, match="does not exist"):
        microformers.AutoConfig.from_pretrained(tmp_path / "nope" / "deeper")


def test_malformed_json_names_file_and_line(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "toy",\n  "hidden_size": }')
    with pytest.raises(ConfigError, match=r"config\.json.*not valid JSON.*line 2"):
        microformers.AutoConfig.from_pretrained(tmp_path)


def test_config_without_model_type(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ConfigError, match="no 'model_type'"):
        microformers.AutoConfig.from_pretrained(tmp_path)


def test_hub_cache_layout_offline(tmp_path, monkeypatch):
    """A Hub id resolves from the standard cache layout with HF_HUB_OFFLINE=1 (no network)."""
    cache = tmp_path / "hub"
    repo = cache / "models--acme--tiny-toy"
    snapshot = repo / "snapshots" / ("a" * 40)
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("a" * 40)
    (snapshot / "config.json").write_text('{"model_type": "toy", "hidden_size": 12}')
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    config = microformers.AutoConfig.from_pretrained("acme/tiny-toy", cache_dir=cache)
    assert config.hidden_size == 12
    with pytest.raises(FileMissingError, match="offline"):
        microformers.AutoConfig.from_pretrained("acme/other-model", cache_dir=cache)


# From test_configuration_mutants.py: Behaviour of ``microformers.configuration`` that the mutation pass found
# unasserted (docs/reliability.md). Every test here checks documented behaviour of ``PretrainedConfig`` and the
# config-file checks: defaults as the reference has them, aliases, serialisation, and the exact refusal messages
# (which name the file and the fix).


PUSH_MESSAGE = (
    "=True: microformers does not upload to the Hub. Save with save_pretrained(folder), then upload that folder "
    "with huggingface_hub (HfApi().upload_folder(folder_path=folder, repo_id=...))."
)


class AliasConfig(PretrainedConfig):
    model_type = "alias_toy"
    attribute_map: ClassVar[dict[str, str]] = {"n_embd": "hidden_size"}

    def __init__(self, hidden_size: int = 8, depth: Any = 2, **kwargs: Any) -> None:
        self.hidden_size = hidden_size
        self.depth = int(depth)
        super().__init__(**kwargs)


# -- push_to_hub, file lookup, dtype names --------------------------------------------------------------
def test_push_to_hub_is_refused_with_the_upload_recipe(tmp_path: Path) -> None:
    refuse_push_to_hub(False)
    refuse_push_to_hub(None)
    with pytest.raises(ConfigError) as info:
        refuse_push_to_hub(True)
    assert str(info.value) == "push_to_hub" + PUSH_MESSAGE
    with pytest.raises(ConfigError) as info:
        refuse_push_to_hub(1, argument="upload")
    assert str(info.value) == "upload" + PUSH_MESSAGE
    config = PretrainedConfig()
    with pytest.raises(ConfigError, match="^push_to_hub=True"):
        config.push_to_hub("repo")
    with pytest.raises(ConfigError, match="^push_to_hub=True"):
        config.save_pretrained(tmp_path / "out", push_to_hub=True)
    assert not (tmp_path / "out").exists()


def test_config_file_is_a_json_file_or_the_config_json_of_a_folder(tmp_path: Path) -> None:
    other = tmp_path / "other.json"
    other.write_text("{}")
    assert config_file(other, {}) == other
    folder = tmp_path / "folder.json"  # a folder whose name ends in .json is still a folder
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    assert config_file(folder, {}) == folder / "config.json"
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "config.json").write_text("{}")
    assert config_file(tmp_path, {"subfolder": "sub"}) == sub / "config.json"
    with pytest.raises(FileMissingError):
        config_file(tmp_path / "missing.json", {})


def test_dtype_names() -> None:
    assert dtype_name(None) is None
    assert dtype_name(torch.float16) == "float16"
    assert dtype_name("torch.bfloat16") == "bfloat16"
    assert dtype_name("float32") == "float32"


# -- construction -----------------------------------------------------------------------------------------
def test_defaults_are_the_references() -> None:
    config = PretrainedConfig()
    assert config.return_dict is True and config.use_return_dict is True
    assert config.output_hidden_states is False and config.output_attentions is False
    assert config.dtype is None and config.torch_dtype is None
    for name in ("architectures", "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id"):
        assert getattr(config, name) is None, name
    assert config.decoder_start_token_id is None and config.problem_type is None
    assert config.tie_word_embeddings is True
    assert config.is_encoder_decoder is False and config.is_decoder is False
    assert config._attn_implementation == "sdpa" and config._attn_implementation_internal is None
    assert config.name_or_path == ""
    assert config.id2label == {0: "LABEL_0", 1: "LABEL_1"} and config.label2id == {"LABEL_0": 0, "LABEL_1": 1}
    assert config.num_labels == 2


def test_every_named_argument_is_taken() -> None:
    values = {
        "return_dict": False,
        "output_hidden_states": True,
        "output_attentions": True,
        "architectures": ["X"],
        "bos_token_id": 1,
        "eos_token_id": [2, 3],
        "pad_token_id": 0,
        "sep_token_id": 4,
        "decoder_start_token_id": 5,
        "tie_word_embeddings": False,
        "is_encoder_decoder": True,
        "is_decoder": True,
        "problem_type": "regression",
    }
    config = PretrainedConfig(**values, attn_implementation="eager", model_type="x", transformers_version="5.0")
    for key, value in values.items():
        assert getattr(config, key) == value, key
    assert config.use_return_dict is False
    assert config._attn_implementation == "eager"
    assert "model_type" not in vars(config) and "transformers_version" not in vars(config)
    assert "attn_implementation" not in vars(config)


def test_dtype_and_torch_dtype_are_normalised_and_dtype_wins() -> None:
    assert PretrainedConfig(dtype=torch.float16).dtype == "float16"
    assert PretrainedConfig(torch_dtype="torch.bfloat16").dtype == "bfloat16"
    assert PretrainedConfig(torch_dtype=torch.bfloat16).to_dict()["dtype"] == "bfloat16"
    assert PretrainedConfig(dtype="float32", torch_dtype="float16").dtype == "float32"
    config = PretrainedConfig()
    config.torch_dtype = torch.float64
    assert config.dtype == "float64" and config.torch_dtype == "float64"


def test_name_or_path_is_a_string_from_either_spelling() -> None:
    assert PretrainedConfig(_name_or_path=Path("a/b")).name_or_path == "a/b"
    assert PretrainedConfig(name_or_path=Path("c")).name_or_path == "c"
    assert isinstance(PretrainedConfig(_name_or_path=Path("a/b"))._name_or_path, str)
    assert PretrainedConfig(name_or_path="first", _name_or_path="second").name_or_path == "first"
    config = PretrainedConfig()
    config.name_or_path = Path("x")
    assert config.name_or_path == "x" and isinstance(config._name_or_path, str)


def test_labels_from_id2label_num_labels_and_label2id() -> None:
    config = PretrainedConfig(id2label={"0": "NEG", "1": "POS", "2": "MID"})
    assert config.id2label == {0: "NEG", 1: "POS", 2: "MID"} and config.num_labels == 3
    assert config.label2id == {"NEG": 0, "POS": 1, "MID": 2}
    assert PretrainedConfig(num_labels=3).id2label == {0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"}
    assert PretrainedConfig(num_labels="1").id2label == {0: "LABEL_0"}
    # a num_labels that disagrees with id2label wins, as in the reference
    config = PretrainedConfig(id2label={"0": "A", "1": "B"}, num_labels=3)
    assert config.id2label == {0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"}
    # agreeing: the names stay
    assert PretrainedConfig(id2label={"0": "A", "1": "B"}, num_labels=2).id2label == {0: "A", 1: "B"}
    config = PretrainedConfig(id2label={"0": "A", "1": "B"}, label2id={"A": "0", "B": "1"})
    assert config.label2id == {"A": 0, "B": 1}
    assert PretrainedConfig(label2id={}).label2id == {"LABEL_0": 0, "LABEL_1": 1}


def test_num_labels_setter_keeps_matching_labels() -> None:
    config = PretrainedConfig(id2label={"0": "A", "1": "B"})
    config.num_labels = 2
    assert config.id2label == {0: "A", 1: "B"}
    config.num_labels = 4
    assert config.id2label == {i: f"LABEL_{i}" for i in range(4)}
    assert config.label2id == {f"LABEL_{i}": i for i in range(4)}


def test_unknown_keys_become_attributes_and_reserved_ones_are_refused() -> None:
    assert PretrainedConfig(vendor_key={"a": 1}).vendor_key == {"a": 1}
    with pytest.raises(ConfigError) as info:
        PretrainedConfig(__class__="x")
    assert str(info.value) == "config key '__class__' is reserved: it names a method of PretrainedConfig"
    with pytest.raises(ConfigError) as info:
        AliasConfig(to_dict=1)
    assert str(info.value) == "config key 'to_dict' is reserved: it names a method of AliasConfig"
    with pytest.raises(ConfigError) as info:
        PretrainedConfig(use_return_dict=False)  # a read-only property
    assert str(info.value).startswith("cannot set config attribute 'use_return_dict' of PretrainedConfig: ")


def test_attribute_map_aliases_reads_and_writes() -> None:
    config = AliasConfig(n_embd=32)
    assert config.hidden_size == 32 and config.n_embd == 32 and "n_embd" not in vars(config)
    config.n_embd = 12
    assert config.hidden_size == 12
    with pytest.raises(AttributeError) as info:
        _ = config.not_there
    assert str(info.value) == "'AliasConfig' object has no attribute 'not_there'"


def test_attn_implementation_setter() -> None:
    config = PretrainedConfig()
    config._attn_implementation = "eager"
    assert config._attn_implementation == "eager" and config._attn_implementation_internal == "eager"
    config._attn_implementation = None
    assert config._attn_implementation == "sdpa"


# -- serialisation ------------------------------------------------------------------------------------------
def test_to_dict_copies_drops_transient_keys_and_writes_label_keys_as_strings() -> None:
    inner = AliasConfig(hidden_size=4)
    config = AliasConfig(
        dtype=torch.bfloat16, _name_or_path="somewhere", attn_implementation="eager", nested=[[1]], sub=inner
    )
    config._commit_hash = "abc"
    out = config.to_dict()
    for key in ("_name_or_path", "_attn_implementation_internal", "_commit_hash"):
        assert key not in out, key
    assert out["dtype"] == "bfloat16" and out["model_type"] == "alias_toy"
    assert out["id2label"] == {"0": "LABEL_0", "1": "LABEL_1"} and out["label2id"] == {"LABEL_0": 0, "LABEL_1": 1}
    assert out["sub"] == inner.to_dict() and isinstance(out["sub"], dict)
    out["nested"][0].append(2)
    assert config.nested == [[1]]  # a deep copy
    transient = {"_name_or_path", "_attn_implementation_internal", "_commit_hash"}
    assert set(out) == (set(vars(config)) - transient) | {"model_type"}
    config.dtype = torch.float16  # set directly, not through the torch_dtype setter: written as a name
    assert config.to_dict()["dtype"] == "float16"
    assert "model_type" not in PretrainedConfig().to_dict()


def test_json_form_and_repr() -> None:
    config = AliasConfig(hidden_size=4)
    text = config.to_json_string()
    assert text.endswith("}\n") and text.startswith('{\n  "')
    assert list(json.loads(text)) == sorted(config.to_dict())
    assert json.loads(text) == config.to_dict()
    assert repr(config) == "AliasConfig " + text


def test_diff_dict_keeps_only_changed_keys_and_model_type() -> None:
    assert AliasConfig().to_diff_dict() == {"model_type": "alias_toy"}
    diff = AliasConfig(hidden_size=16, extra=1, pad_token_id=3).to_diff_dict()
    assert diff == {"model_type": "alias_toy", "hidden_size": 16, "extra": 1, "pad_token_id": 3}
    assert PretrainedConfig(problem_type="regression").to_diff_dict() == {"problem_type": "regression"}


def test_update_sets_through_aliases() -> None:
    config = AliasConfig()
    config.update({"n_embd": 20, "new_key": "v"})
    assert config.hidden_size == 20 and config.new_key == "v"


def test_save_pretrained_creates_folders_and_refuses_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code = tmp_path / "code"
    code.mkdir()
    (code / "configuration_custom_mut.py").write_text(
        "from microformers import PretrainedConfig\n\n\nclass CustomMutConfig(PretrainedConfig):\n"
        "    model_type = 'custom_mut'\n"
    )
    monkeypatch.syspath_prepend(str(code))
    from configuration_custom_mut import CustomMutConfig  # type: ignore[import-not-found]

    CustomMutConfig.register_for_auto_class()
    CustomMutConfig().save_pretrained(tmp_path / "custom")
    assert (tmp_path / "custom" / "configuration_custom_mut.py").read_text() == (
        code / "configuration_custom_mut.py"
    ).read_text()
    saved = json.loads((tmp_path / "custom" / "config.json").read_text())
    assert saved["auto_map"]["AutoConfig"].endswith("configuration_custom_mut.CustomMutConfig")
    config = AliasConfig(hidden_size=6)
    target = tmp_path / "a" / "b"
    config.save_pretrained(target)
    assert json.loads((target / "config.json").read_text()) == config.to_dict()
    config.save_pretrained(target)  # an existing folder is fine
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ConfigError) as info:
        config.save_pretrained(blocker)
    assert str(info.value) == f"save_pretrained: {blocker} is a file; pass a folder to write config.json into"


def test_from_dict_kwargs_override_file_values() -> None:
    config = AliasConfig.from_dict({"hidden_size": 4, "depth": 3}, hidden_size=9)
    assert config.hidden_size == 9 and config.depth == 3 and isinstance(config, AliasConfig)


def test_from_pretrained_checks_model_type_and_records_the_source(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "alias_toy", "hidden_size": 5}))
    config = AliasConfig.from_pretrained(tmp_path, depth=7, trust_remote_code=True, revision="main")
    assert config.hidden_size == 5 and config.depth == 7 and config.name_or_path == str(tmp_path)
    assert not hasattr(config, "trust_remote_code") and not hasattr(config, "revision")
    assert AliasConfig.get_config_dict(tmp_path, revision="main") == {"model_type": "alias_toy", "hidden_size": 5}
    # the base class takes any model_type; a file without one is taken by a subclass
    assert PretrainedConfig.from_pretrained(tmp_path).hidden_size == 5
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 5}))
    assert AliasConfig.from_pretrained(tmp_path).hidden_size == 5
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "other"}))
    with pytest.raises(ConfigError) as info:
        AliasConfig.from_pretrained(tmp_path)
    assert str(info.value) == (
        f"{tmp_path}/config.json has model_type 'other', but AliasConfig is for 'alias_toy'; "
        "load it with AutoConfig instead"
    )


def test_from_pretrained_checks_the_file_and_its_errors_name_config_json(tmp_path: Path) -> None:
    config_json = tmp_path / "config.json"
    config_json.write_text('{"rms_norm_eps": -1}')  # the model-configuration checks run on the file
    with pytest.raises(ConfigError) as info:
        AliasConfig.from_pretrained(tmp_path)
    assert (
        str(info.value)
        == f"{config_json}: rms_norm_eps=-1 must be a positive number. Fix the file (or download it again)."
    )
    config_json.write_text("{")
    with pytest.raises(ConfigError, match=r"config\.json \(model configuration\) is not valid JSON"):
        AliasConfig.get_config_dict(tmp_path)
    config_json.write_text('{"depth": "deep"}')  # a value the class cannot use: the file is named
    with pytest.raises(ConfigError) as info:
        AliasConfig.from_pretrained(tmp_path)
    assert str(info.value).startswith(f"{config_json} holds a value AliasConfig cannot use (ValueError: ")


def test_from_pretrained_with_a_plain_dict_names_what_was_asked_for() -> None:
    class PlainDictConfig(AliasConfig):
        @classmethod
        def get_config_dict(cls, pretrained: Any, **kwargs: Any) -> dict[str, Any]:
            return {"depth": "deep"}  # a subclass's own source: a dict without ``.source``

    with pytest.raises(ConfigError) as info:
        PlainDictConfig.from_pretrained("some/where")
    assert str(info.value).startswith("some/where holds a value PlainDictConfig cannot use (ValueError: ")


# -- reading files ----------------------------------------------------------------------------------------
def test_read_json_errors_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "f.json"
    path.write_bytes(b'{"a": "\xff"}')
    with pytest.raises(
        ConfigError, match=r"f\.json \(tokenizer file\) is not UTF-8 text: .*\. Replace it with a valid"
    ):
        read_json(path, what="tokenizer file")
    path.write_text('{"a": }')
    with pytest.raises(ConfigError) as info:
        read_json(path)
    assert str(info.value) == (
        f"{path} (JSON file) is not valid JSON: Expecting value at line 1 column 7. Fix or re-download the file."
    )
    for text in ('{"a": NaN}', '{"a": Infinity}', '{"a": -Infinity}'):
        path.write_text(text)
        with pytest.raises(ConfigError, match=r"is not a valid JSON number \(NaN and infinities are refused\)"):
            read_json(path)
    path.write_text('{"a": 1' + "0" * 400 + ".5}")
    with pytest.raises(ConfigError) as info:
        read_json(path)
    assert str(info.value) == (
        f"{path} (JSON file) cannot be used: the number 1{'0' * 39} overflows to infinity. Fix or re-download the file."
    )
    path.write_text('{"a": 1.5e300, "b": -2.5}')
    assert read_json(path) == {"a": 1.5e300, "b": -2.5}
    path.write_text("[1, 2]")
    with pytest.raises(ConfigError) as info:
        read_json(path, what="index")
    assert str(info.value) == f"{path} (index) must hold a JSON object, found list"


def test_read_json_nesting_limit_and_source(tmp_path: Path) -> None:
    path = tmp_path / "deep.json"

    def nested(depth: int, container: str) -> str:
        inner = "1"
        for _ in range(depth - 1):
            inner = f'{{"k": {inner}}}' if container == "dict" else f"[{inner}]"
        return f'{{"k": {inner}}}'

    for container in ("dict", "list"):
        path.write_text(nested(MAX_JSON_DEPTH, container))
        data = read_json(path)
        assert data.source == str(path) and isinstance(data, dict)
        path.write_text(nested(MAX_JSON_DEPTH + 1, container))
        with pytest.raises(ConfigError) as info:
            read_json(path)
        assert str(info.value) == f"{path} (JSON file) nests objects/lists more than 64 deep; fix the file"


def test_only_a_model_configuration_gets_the_config_checks(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text('{"rms_norm_eps": -1}')
    assert read_json(path, what="tokenizer configuration") == {"rms_norm_eps": -1}
    with pytest.raises(ConfigError) as info:
        read_json(path, what="model configuration")
    assert str(info.value) == f"{path}: rms_norm_eps=-1 must be a positive number. Fix the file (or download it again)."


# -- config checks ------------------------------------------------------------------------------------------
def _refusal(data: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as info:
        check_config_dict(data, "SRC")
    message = str(info.value)
    assert message.startswith("SRC: ") and message.endswith(". Fix the file (or download it again).")
    return message[len("SRC: ") : -len(". Fix the file (or download it again).")]


GOOD = {
    "model_type": "llama",
    "rms_norm_eps": 1e-6,
    "layer_norm_epsilon": 1,
    "bos_token_id": 1,
    "eos_token_id": [2, 3],
    "pad_token_id": None,
    "attention_dropout": 0.0,
    "hidden_dropout": None,
    "initializer_range": 0.02,
    "rope_theta": 10000,
    "auto_map": {"AutoConfig": "a.B", "AutoTokenizer": ["a.T", None]},
    "dtype": "torch.bfloat16",
    "torch_dtype": "auto",
    "tie_word_embeddings": False,
    "use_cache": True,
    "hidden_size": 0,
    "num_labels": MAX_LABELS,
    "id2label": {"0": "a", "-1": "b"},
    "label2id": {"a": 0},
    "architectures": ["LlamaForCausalLM"],
}


def test_a_good_config_passes() -> None:
    check_config_dict(GOOD, "SRC")
    check_config_dict({}, "SRC")


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("__class__", 1, "the key '__class__' is reserved (it names a method of the configuration object)"),
        ("save_pretrained", 1, "the key 'save_pretrained' is reserved (it names a method of the configuration object)"),
        ("rms_norm_eps", 0, "rms_norm_eps=0 must be a positive number"),
        ("layer_norm_eps", True, "layer_norm_eps=True must be a positive number"),
        ("norm_epsilon", "1e-5", "norm_epsilon='1e-5' must be a positive number"),
        ("bos_token_id", "1", "bos_token_id='1' must be a token id (an integer), a list of them, or null"),
        ("eos_token_id", [1, True], "eos_token_id=[1, True] must be a token id (an integer), a list of them, or null"),
        ("pad_token_id", 1.0, "pad_token_id=1.0 must be a token id (an integer), a list of them, or null"),
        ("attention_dropout", "0.1", "attention_dropout='0.1' must be a number"),
        ("dropout", False, "dropout=False must be a number"),
        ("rope_theta", [1], "rope_theta=[1] must be a number"),
        ("initializer_range", "x", "initializer_range='x' must be a number"),
        ("model_type", 5, 'model_type=5 must be a string such as "llama"'),
        ("auto_map", "a.B", "auto_map must map Auto class names to 'module.Class' strings, found 'a.B'"),
        (
            "auto_map",
            {"AutoConfig": 1},
            "auto_map must map Auto class names to 'module.Class' strings, found {'AutoConfig': 1}",
        ),
        ("dtype", "int4", 'dtype=\'int4\' is not a dtype name; use e.g. "float32" or "bfloat16"'),
        ("torch_dtype", 16, 'torch_dtype=16 is not a dtype name; use e.g. "float32" or "bfloat16"'),
        ("use_cache", "yes", "use_cache='yes' must be true or false"),
        ("mlp_bias", 0, "mlp_bias=0 must be true or false"),
        ("output_attentions", None, "output_attentions=None must be true or false"),
        ("hidden_size", -1, "hidden_size=-1 must be a non-negative integer"),
        ("vocab_size", 10.0, "vocab_size=10.0 must be a non-negative integer"),
        ("n_layer", True, "n_layer=True must be a non-negative integer"),
        ("type_vocab_size", "2", "type_vocab_size='2' must be a non-negative integer"),
        ("num_labels", -2, "num_labels=-2 must be a non-negative integer"),
        ("num_labels", MAX_LABELS + 1, f"num_labels={MAX_LABELS + 1} is more than {MAX_LABELS} labels"),
        ("id2label", {"a": "x"}, 'id2label must map label ids ("0", "1", ...) to label names (strings)'),
        ("id2label", {"0": 1}, 'id2label must map label ids ("0", "1", ...) to label names (strings)'),
        ("id2label", ["x"], 'id2label must map label ids ("0", "1", ...) to label names (strings)'),
        ("label2id", {"x": "0"}, "label2id must map label names to integer ids"),
        ("label2id", {"x": False}, "label2id must map label names to integer ids"),
        ("label2id", [0], "label2id must map label names to integer ids"),
        ("architectures", "LlamaForCausalLM", "architectures='LlamaForCausalLM' must be a list of class names"),
        ("architectures", [1], "architectures=[1] must be a list of class names"),
    ],
)
def test_each_bad_value_is_refused_naming_the_key(key: str, value: Any, message: str) -> None:
    assert _refusal({**GOOD, key: value}) == message


def test_every_size_and_flag_key_is_checked() -> None:
    for key in (
        "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
        "intermediate_size", "max_position_embeddings", "head_dim", "type_vocab_size",
        "n_embd", "n_layer", "n_head", "n_positions", "n_inner",
    ):  # fmt: skip
        assert _refusal({key: -1}) == f"{key}=-1 must be a non-negative integer"
    for key in (
        "tie_word_embeddings", "is_encoder_decoder", "is_decoder", "return_dict", "use_cache",
        "output_hidden_states", "output_attentions", "attention_bias", "mlp_bias",
    ):  # fmt: skip
        assert _refusal({key: 1}) == f"{key}=1 must be true or false"
    for key in ("initializer_range", "rope_theta", "layer_norm_eps", "rms_norm_eps", "layer_norm_epsilon"):
        assert _refusal({key: "1"}).startswith(f"{key}='1' must be a")
    for dtype in ("float32", "float16", "bfloat16", "float64", "half", "double", "float8_e4m3fn", "int8", "bool"):
        check_config_dict({"dtype": dtype, "torch_dtype": f"torch.{dtype}"}, "SRC")


# -- config_from_dict ------------------------------------------------------------------------------------
def test_config_from_dict_errors_name_the_source() -> None:
    class Strict(PretrainedConfig):
        def __init__(self, size: Any = 1, **kwargs: Any) -> None:
            if size == "config":
                raise ConfigError("config.json: size is wrong")
            if size == "named":
                raise ConfigError("/x/model.gguf: size is wrong")
            self.size = int(size)
            super().__init__(**kwargs)

    assert config_from_dict(Strict, {"size": 2}, "/x/model.gguf", {"size": 3}).size == 3
    assert config_from_dict(Strict, {"size": 2}, "/x/model.gguf").size == 2
    with pytest.raises(ConfigError) as info:
        config_from_dict(Strict, {"size": "config"}, "/x/model.gguf")
    assert str(info.value) == "/x/model.gguf: model.gguf: size is wrong"
    with pytest.raises(ConfigError) as info:
        config_from_dict(Strict, {"size": "named"}, "/x/model.gguf")
    assert str(info.value) == "/x/model.gguf: size is wrong"
    with pytest.raises(ConfigError) as info:
        config_from_dict(Strict, {"size": "abc"}, "/x/config.json")
    assert str(info.value) == (
        "/x/config.json holds a value Strict cannot use (ValueError: invalid literal for int() with base 10: 'abc'); "
        "fix the file"
    )
    for bad, error in (([1], "TypeError"), (float("inf"), "OverflowError")):
        with pytest.raises(ConfigError, match=f"holds a value Strict cannot use \\({error}: "):
            config_from_dict(Strict, {"size": bad}, "/x/config.json")


def test_register_for_auto_class_defaults_to_auto_config() -> None:
    class Registered(PretrainedConfig):
        model_type = "registered_toy"

    Registered.register_for_auto_class()
    assert Registered._auto_class == "AutoConfig"
    Registered.register_for_auto_class("AutoOther")
    assert Registered._auto_class == "AutoOther"
    assert PretrainedConfig._auto_class is None


# From test_configuration_full_mutants.py: ``microformers.configuration``: behaviour the fourth (full) mutation run
# found unasserted (docs/reliability.md, "Fourth pass").


def test_a_given_label2id_is_kept_as_given() -> None:
    # the reference keeps label2id as written, even when it is not the inverse of id2label
    config = PretrainedConfig(id2label={"0": "NEG", "1": "POS"}, label2id={"negative": "0", "positive": 1})
    assert config.label2id == {"negative": 0, "positive": 1}
    assert config.id2label == {0: "NEG", 1: "POS"}


def test_dunder_keys_that_are_not_methods_are_refused_too() -> None:
    with pytest.raises(ConfigError) as info:
        PretrainedConfig(__module__="evil")
    assert str(info.value) == "config key '__module__' is reserved: it names a method of PretrainedConfig"
    with pytest.raises(ConfigError) as info:
        check_config_dict({"__module__": "evil"}, "/models/x/config.json")
    assert str(info.value) == (
        "/models/x/config.json: the key '__module__' is reserved (it names a method of the configuration object). "
        "Fix the file (or download it again)."
    )


def test_label_ids_must_be_digit_strings() -> None:
    check_config_dict({"id2label": {"-1": "none", "0": "a"}}, "c.json")  # negative ids are ids
    with pytest.raises(ConfigError, match=r"^c\.json: id2label must map label ids"):
        check_config_dict({"id2label": {"X1": "a"}}, "c.json")


def test_from_pretrained_reads_the_config_of_a_subfolder(tmp_path: Path) -> None:
    (tmp_path / "text").mkdir()
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 1}))
    (tmp_path / "text" / "config.json").write_text(json.dumps({"hidden_size": 2}))
    assert PretrainedConfig.from_pretrained(tmp_path, subfolder="text").hidden_size == 2
    assert PretrainedConfig.from_pretrained(tmp_path).hidden_size == 1


# From test_mutation_kills.py: Tests written for mutants that survived the mutation run (docs/reliability.md,
# "Mutation testing"). Each test names the change it catches; together with the rest of the suite they make the
# kernel's behaviour, not just its happy path, pinned down.


def test_config_equality_needs_same_values_not_just_same_type() -> None:
    """Caught mutant: ``isinstance(other, PretrainedConfig) and ...`` -> ``or`` in ``__eq__``."""
    from microformers_test_toy.modeling_toy import ToyConfig

    a = ToyConfig(vocab_size=40, hidden_size=24, num_layers=2)
    assert a == ToyConfig(vocab_size=40, hidden_size=24, num_layers=2)
    assert a != ToyConfig(vocab_size=40, hidden_size=16, num_layers=2)
    assert a != {"vocab_size": 40}
    assert isinstance(a, microformers.PretrainedConfig)
