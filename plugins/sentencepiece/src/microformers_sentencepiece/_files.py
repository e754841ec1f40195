"""Reading a SentencePiece tokenizer folder into the ``files`` mapping that ``from_files`` takes."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from microformers.configuration import read_json
from microformers.errors import ConfigError, FileMissingError

TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
SPECIAL_TOKENS_MAP_FILE = "special_tokens_map.json"
TOKENIZER_FILE = "tokenizer.json"
SPM_FILES = ("spiece.model", "sentencepiece.bpe.model", "source.spm")
JSON_FILES = (TOKENIZER_CONFIG_FILE, SPECIAL_TOKENS_MAP_FILE, "vocab.json", "target_vocab.json")



def can_load(folder: str | Path) -> bool:
    """A folder with a SentencePiece model (T5, mBART, Marian) and no ``tokenizer.json``."""
    path = Path(folder)
    return (
        path.is_dir() and not (path / TOKENIZER_FILE).is_file() and any((path / name).is_file() for name in SPM_FILES)
    )


def read_folder(folder: str | Path, binary: Iterable[str]) -> dict[str, Any]:
    """The JSON files (parsed), ``tokenizer.json`` (text) and the named binary files present in ``folder``."""
    path = Path(folder)
    if not path.is_dir():
        raise FileMissingError(
            f"tokenizer folder {str(path)!r} does not exist or is not a directory; pass the folder that holds the "
            "SentencePiece model and tokenizer_config.json."
        )
    files: dict[str, Any] = {}
    for name in JSON_FILES:
        if (path / name).is_file():
            files[name] = read_json(path / name, what=name)
    if (path / TOKENIZER_FILE).is_file():
        files[TOKENIZER_FILE] = (path / TOKENIZER_FILE).read_text(encoding="utf-8")
    for name in binary:
        if (path / name).is_file():
            files[name] = (path / name).read_bytes()
    return files


def json_dict(files: Mapping[str, Any], name: str) -> dict[str, Any]:
    value = files.get(name)
    if value is None:
        return {}
    if isinstance(value, str | bytes):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{name} is not valid JSON ({exc}); re-save the tokenizer.") from exc
    if not isinstance(value, Mapping):
        raise ConfigError(f"{name} must hold a JSON object, got {type(value).__name__}; re-save the tokenizer.")
    return dict(value)


def token_text(value: Any) -> Any:
    """``{"content": ...}`` dicts of saved configs to their text; other values unchanged."""
    if isinstance(value, Mapping) and "content" in value:
        return str(value["content"])
    return value


def merged_config(files: Mapping[str, Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """tokenizer_config.json, then special_tokens_map.json for what it lacks, then the keyword arguments."""
    config = json_dict(files, TOKENIZER_CONFIG_FILE)
    for key, value in json_dict(files, SPECIAL_TOKENS_MAP_FILE).items():
        config.setdefault(key, value)
    for key in ("tokenizer_class", "auto_map", "init_inputs", "name_or_path", "backend", "tokenizer_file"):
        config.pop(key, None)
    config.update(kwargs)
    for key, value in list(config.items()):
        if key.endswith("_token"):
            config[key] = token_text(value)
    for key in ("additional_special_tokens", "extra_special_tokens"):
        if isinstance(config.get(key), list):
            config[key] = [token_text(v) for v in config[key]]
    return config


def unigram_from_tokenizer_json(text: str, where: str) -> tuple[list[tuple[str, float]], bytes | None]:
    """The Unigram vocabulary and the precompiled charsmap of a ``tokenizer.json``."""
    import base64

    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{where}/tokenizer.json is not valid JSON ({exc}); re-download or re-save it.") from exc
    model = parsed.get("model") if isinstance(parsed, dict) else None
    if not isinstance(model, dict) or model.get("type") != "Unigram" or not isinstance(model.get("vocab"), list):
        raise ConfigError(
            f"{where}/tokenizer.json does not hold a Unigram (SentencePiece) model; remove it to load the "
            "SentencePiece file, or use a tokenizer_class that matches it."
        )
    vocab = [(str(p), float(s)) for p, s in model["vocab"]]
    charsmap = None
    normalizer = parsed.get("normalizer") or {}
    stack = [normalizer]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if item.get("type") == "Precompiled" and item.get("precompiled_charsmap"):
                charsmap = base64.b64decode(item["precompiled_charsmap"])
            stack.extend(item.get("normalizers") or [])
    return vocab, charsmap
