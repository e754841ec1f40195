"""Reading a tokenizer folder into the in-memory ``files`` mapping that ``from_files`` takes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from microformers.errors import ConfigError, FileMissingError

TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
SPECIAL_TOKENS_MAP_FILE = "special_tokens_map.json"
ADDED_TOKENS_FILE = "added_tokens.json"
CHAT_TEMPLATE_FILE = "chat_template.jinja"
CHAT_TEMPLATE_DIR = "additional_chat_templates"
VOCAB_FILE = "vocab.txt"
MODEL_CONFIG_FILE = "config.json"

_JSON_DICT_FILES = (TOKENIZER_CONFIG_FILE, SPECIAL_TOKENS_MAP_FILE, ADDED_TOKENS_FILE, MODEL_CONFIG_FILE)


# Loading arguments the kernel's AutoTokenizer has already used to find the folder (Hub, cache, revision):
# a backend's from_pretrained drops them.
HUB_ARGUMENTS = (
    "cache_dir",
    "force_download",
    "local_files_only",
    "token",
    "revision",
    "trust_remote_code",
    "subfolder",
    "proxies",
    "_from_auto",
    "_from_pipeline",
    "use_fast",
    "gguf_file",
)


def can_load(folder: str | Path) -> bool:
    """True when ``folder`` holds a ``tokenizer.json`` or a WordPiece ``vocab.txt``."""
    path = Path(folder)
    return path.is_dir() and ((path / TOKENIZER_FILE).is_file() or (path / VOCAB_FILE).is_file())


def read_text(path: Path) -> str:
    """A text file of the tokenizer, as UTF-8; a ConfigError naming the file otherwise."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path} is not UTF-8 text ({exc}); re-download or re-save the tokenizer.") from exc


def read_json_dict(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise ConfigError(f"{path} is not valid JSON ({exc}); re-download or re-save the tokenizer.") from exc
    if not isinstance(value, dict):
        raise ConfigError(f"{path} must hold a JSON object, found {type(value).__name__}; re-save the tokenizer.")
    return value


def read_folder(folder: str | Path) -> dict[str, Any]:
    """The tokenizer files of a local folder: JSON configs parsed, ``tokenizer.json`` kept as text."""
    path = Path(folder)
    if not path.is_dir():
        raise FileMissingError(
            f"tokenizer folder {str(path)!r} does not exist or is not a directory; pass the folder that holds "
            "tokenizer.json / tokenizer_config.json (or a Hub id to microformers.AutoTokenizer)."
        )
    files: dict[str, Any] = {}
    tokenizer_file = path / TOKENIZER_FILE
    if tokenizer_file.is_file():
        files[TOKENIZER_FILE] = read_text(tokenizer_file)
    for name in _JSON_DICT_FILES:
        if (path / name).is_file():
            files[name] = read_json_dict(path / name)
    if (path / VOCAB_FILE).is_file():
        files[VOCAB_FILE] = read_text(path / VOCAB_FILE)
    if (path / CHAT_TEMPLATE_FILE).is_file():
        files[CHAT_TEMPLATE_FILE] = read_text(path / CHAT_TEMPLATE_FILE)
    template_dir = path / CHAT_TEMPLATE_DIR
    if template_dir.is_dir():
        files[CHAT_TEMPLATE_DIR] = {
            p.name.removesuffix(".jinja"): read_text(p) for p in sorted(template_dir.glob("*.jinja"))
        }
    if TOKENIZER_FILE not in files and VOCAB_FILE not in files:
        present = sorted(p.name for p in path.iterdir())
        raise FileMissingError(
            f"no tokenizer in {str(path)!r}: expected {TOKENIZER_FILE} (or a WordPiece {VOCAB_FILE}); found "
            f"{present}. Save the tokenizer into this folder (tokenizer.save_pretrained(folder))."
        )
    return files


def parse_vocab_txt(text: str) -> dict[str, int]:
    """``vocab.txt``: one token per line, the line number is the id."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    # Same rule as the tokenizers library's WordPiece file reader: trailing whitespace is not part of a token.
    return {line.rstrip(): index for index, line in enumerate(lines)}
