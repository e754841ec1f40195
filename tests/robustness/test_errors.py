"""One error type: hostile or broken files raise a MicroformersError naming the file (regressions of issue 19)."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

import microformers
from microformers.errors import CheckpointError, ConfigError, MicroformersError

from ._build import llama_folder, llama_gguf

CONFIG_CASES: list[tuple[str, Any]] = [
    ("model_type", 5),
    ("model_type", ["llama"]),
    ("auto_map", "module.Class"),
    ("id2label", ["a", "b"]),
    ("id2label", {"first": "a"}),
    ("num_labels", "3"),
    ("num_labels", 10**12),
    ("max_position_embeddings", "2048"),
    ("__class__", "x"),
    ("to_dict", 1),
    ("rms_norm_eps", -1.0),
    ("rms_norm_eps", None),
    ("tie_word_embeddings", -1e-9),
    ("dtype", 1.5),
    ("dtype", "float33"),
    ("pad_token_id", True),
    ("eos_token_id", [1, "2"]),
    ("attention_dropout", [1, 2]),
    ("architectures", "LlamaForCausalLM"),
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return llama_folder(tmp_path_factory.mktemp("llama") / "m")


def edited(folder: Path, tmp_path: Path, text: str) -> Path:
    copy = tmp_path / "copy"
    copy.mkdir()
    for item in folder.iterdir():
        (copy / item.name).write_bytes(item.read_bytes())
    (copy / "config.json").write_text(text)
    return copy


@pytest.mark.parametrize("key, value", CONFIG_CASES)
def test_bad_config_values_name_the_file(folder: Path, tmp_path: Path, key: str, value: Any) -> None:
    config = json.loads((folder / "config.json").read_text())
    config[key] = value
    copy = edited(folder, tmp_path, json.dumps(config))
    for load in (microformers.AutoConfig.from_pretrained, microformers.AutoModelForCausalLM.from_pretrained):
        with pytest.raises(ConfigError) as info:
            load(copy)
        assert str(copy / "config.json") in str(info.value) and key.strip("_") in str(info.value)


@pytest.mark.parametrize(
    "entry",
    [
        "",
        "   ",
        [None, ""],
        [],
        # not a module of the folder: paths, empty or spaced names, a class name that is no identifier
        "../outside.MyModel",
        "/etc/passwd.X",
        "a..b.X",
        ".MyModel",
        "modeling x.MyModel",
        "modeling_x.My-Model",
        [None, "modeling_x."],
    ],
)
def test_an_empty_or_malformed_auto_map_entry_is_refused_naming_the_file_and_the_entry(
    folder: Path, tmp_path: Path, entry: Any
) -> None:
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"] = {"AutoConfig": "configuration_x.XConfig", "AutoModelForCausalLM": entry}
    copy = edited(folder, tmp_path, json.dumps(config))
    for load in (microformers.AutoConfig.from_pretrained, microformers.AutoModelForCausalLM.from_pretrained):
        with pytest.raises(ConfigError) as info:
            load(copy, trust_remote_code=True)  # with consent too: nothing is looked up for such an entry
        assert str(info.value).startswith(
            f"{copy / 'config.json'}: the auto_map entry 'AutoModelForCausalLM' is {entry!r}: name its class as "
            "'module.ClassName' (a module file of the folder, no path; 'owner/repo--module.ClassName' for another "
            "repo), or remove the entry"
        )


@pytest.mark.parametrize("entry", ["sub.modeling_x.MyModel", "owner/repo--modeling_x.MyModel", [None, "tok.MyTok"]])
def test_well_formed_auto_map_entries_pass_the_config_check(tmp_path: Path, entry: Any) -> None:
    from microformers.configuration import check_config_dict

    check_config_dict({"model_type": "llama", "auto_map": {"AutoModel": entry}}, tmp_path / "config.json")


@pytest.mark.parametrize(
    "text",
    [
        '{"model_type": "llama", "rms_norm_eps": NaN}',
        '{"model_type": "llama", "rms_norm_eps": Infinity}',
        '{"model_type": "llama", "rms_norm_eps": 1e999}',
        '{"model_type": "llama", "x": ' + "[" * 100000 + "]" * 100000 + "}",
        '{"model_type": "llama", "x": ' + "[" * 200 + "]" * 200 + "}",
    ],
)
def test_non_finite_numbers_and_deep_nesting_are_refused(folder: Path, tmp_path: Path, text: str) -> None:
    copy = edited(folder, tmp_path, text)
    with pytest.raises(ConfigError, match=str(copy / "config.json")):
        microformers.AutoConfig.from_pretrained(copy)


@pytest.mark.parametrize("shard", ["../outside.safetensors", "/etc/passwd", 5, "sub/model.safetensors", ""])
def test_shard_index_entries_outside_the_folder_are_refused(tmp_path: Path, shard: Any) -> None:
    folder = llama_folder(tmp_path / "m", max_shard_size="8KB")
    (tmp_path / "outside.safetensors").write_bytes((next(folder.glob("model-*.safetensors"))).read_bytes())
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    first = next(iter(index["weight_map"]))
    index["weight_map"][first] = shard
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match="model.safetensors.index.json"):
        microformers.AutoModelForCausalLM.from_pretrained(folder)


def test_float_parameter_stored_as_integers_is_refused(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    folder = llama_folder(tmp_path / "m")
    state = microformers.AutoModelForCausalLM.from_pretrained(folder).state_dict()
    state["model.norm.weight"] = (state["model.norm.weight"] * 1e8).to(torch.int32)
    save_file({k: v.contiguous() for k, v in state.items() if k != "lm_head.weight"}, folder / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"model\.norm\.weight.*int32"):
        microformers.AutoModelForCausalLM.from_pretrained(folder)


def tokenizer_folder(tmp_path: Path) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers

    from microformers_tokenizers import PreTrainedTokenizerFast

    backend = Tokenizer(models.WordLevel({"<unk>": 0, "a": 1, "b": 2}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", chat_template="{{ messages }}")
    tok.save_pretrained(tmp_path / "tok")
    return tmp_path / "tok"


@pytest.mark.parametrize("name", ["tokenizer.json", "tokenizer_config.json", "chat_template.jinja"])
def test_non_utf8_tokenizer_files_name_the_file(tmp_path: Path, name: str) -> None:
    folder = tokenizer_folder(tmp_path)
    (folder / name).write_bytes(b"\xff\xfe" + (folder / name).read_bytes())
    with pytest.raises(ConfigError, match=str(folder / name)):
        microformers.AutoTokenizer.from_pretrained(str(folder))


def test_non_utf8_vocab_txt(tmp_path: Path) -> None:
    (tmp_path / "vocab.txt").write_bytes(b"[PAD]\n[UNK]\n\xff\n")
    with pytest.raises(ConfigError, match=str(tmp_path / "vocab.txt")):
        microformers.AutoTokenizer.from_pretrained(str(tmp_path))


def test_tokenizer_class_that_is_not_a_string(tmp_path: Path) -> None:
    folder = tokenizer_folder(tmp_path)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["tokenizer_class"] = 5
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match="tokenizer_class=5"):
        microformers.AutoTokenizer.from_pretrained(str(folder))


def test_catastrophic_split_regex_is_a_microformers_error(tmp_path: Path) -> None:
    """The Rust regex engine panics (pyo3 PanicException, a BaseException) on this pattern."""
    folder = tokenizer_folder(tmp_path)
    data = json.loads((folder / "tokenizer.json").read_text())
    data["pre_tokenizer"] = {
        "type": "Split",
        "pattern": {"Regex": "(?:a|a)*$"},
        "behavior": "Isolated",
        "invert": False,
    }
    (folder / "tokenizer.json").write_text(json.dumps(data))
    tok = microformers.AutoTokenizer.from_pretrained(str(folder))
    with pytest.raises(MicroformersError, match=str(folder)):
        tok("a" * 50000 + "c")


def test_overlapping_gguf_tensor_data_is_refused(tmp_path: Path) -> None:
    path = llama_gguf(tmp_path / "m.gguf")
    data = bytearray(path.read_bytes())
    name = b"output_norm.weight"
    at = data.index(struct.pack("<Q", len(name)) + name) + 8 + len(name)
    n_dims = struct.unpack_from("<I", data, at)[0]
    offset_at = at + 4 + 8 * n_dims + 4
    struct.pack_into("<Q", data, offset_at, 0)  # the same bytes as the first tensor
    (tmp_path / "bad.gguf").write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"bad\.gguf.*overlap"):
        microformers.AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file="bad.gguf")


def _quadratic_merges(tokens: list[str], scores: list[float]) -> list[tuple[str, str]]:
    """The previous (every-cut) derivation, kept as the oracle."""
    ids = {t: i for i, t in enumerate(tokens)}
    out: list[tuple[str, str, float]] = []
    for token, score in dict(zip(tokens, scores)).items():
        local = [(token[:c], token[c:], score) for c in range(1, len(token)) if token[:c] in ids and token[c:] in ids]
        local.sort(key=lambda c: (ids[c[0]], ids[c[1]]))
        out.extend(local)
    out.sort(key=lambda c: (c[2], len(c[0]), len(c[1])), reverse=True)
    return [(a, b) for a, b, _ in out]


def test_merge_derivation_matches_the_every_cut_rule() -> None:
    import random

    from microformers_gguf.tokenizer import derive_merges

    rng = random.Random(0)
    pieces = {"".join(rng.choice("ab▁c") for _ in range(rng.randint(1, 9))) for _ in range(3000)}
    tokens = sorted(pieces)
    scores = [rng.choice([-1.0, -2.0, -3.5]) for _ in tokens]
    assert derive_merges(tokens, scores) == _quadratic_merges(tokens, scores)


def test_merge_derivation_of_a_huge_token_is_not_quadratic() -> None:
    code = (
        "from microformers_gguf.tokenizer import derive_merges\n"
        "tokens = ['a', 'b', 'ab', 'a' * 2_000_000 + 'b']\n"
        "print(len(derive_merges(tokens, [0.0] * 4)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == ["1"]
