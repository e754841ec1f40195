"""A tiktoken ``tokenizer.model`` (base64 token, rank per line) as a byte-level BPE fast tokenizer.

The ranks become the vocabulary (rank = id, tokens written with the GPT-2 byte-to-unicode alphabet) and
the merges are every split of a token into two ranked tokens, ordered by the rank of the token they
form: a ``tokenizers`` BPE that looks whole pieces up first (``ignore_merges``) then merges by that order
gives tiktoken's ids. Special tokens come from ``tokenizer_config.json`` (``added_tokens_decoder`` ids
past the ranks, ``extra_special_tokens``), as the reference's conversion does.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer, decoders, pre_tokenizers, processors
from tokenizers.models import BPE

from microformers.configuration import read_json
from microformers.errors import ConfigError, FileMissingError
from microformers_tokenizers import HUB_ARGUMENTS, PreTrainedTokenizerFast

TIKTOKEN_FILE = "tokenizer.model"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
SPECIAL_TOKENS_MAP_FILE = "special_tokens_map.json"
# The split pattern the reference applies to tiktoken files (cl100k / Llama 3 style).
DEFAULT_PATTERN = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""


def _byte_alphabet() -> dict[int, str]:
    """GPT-2's reversible map of the 256 bytes to printable characters (what byte-level BPE vocabularies use)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    mapping = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


def parse_ranks(data: bytes | str, where: str) -> dict[bytes, int]:
    """The ``token -> rank`` table of a tiktoken file; a ConfigError naming ``where`` when malformed."""
    text = data.decode("utf-8") if isinstance(data, bytes | bytearray) else data
    ranks: dict[bytes, int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split()
        try:
            if len(parts) != 2:
                raise ValueError("expected '<base64 token> <rank>'")
            ranks[base64.b64decode(parts[0], validate=True)] = int(parts[1])
        except (ValueError, binascii.Error) as exc:
            raise ConfigError(
                f"{where} line {number} is not a tiktoken rank line ({exc}); the file must hold one "
                "'<base64 token> <rank>' per line. Re-download it."
            ) from None
    if not ranks:
        raise ConfigError(f"{where} holds no tiktoken ranks; re-download it.")
    return ranks


def is_tiktoken_file(path: Path) -> bool:
    """Whether the file's first line looks like a tiktoken rank line (a SentencePiece model is binary)."""
    try:
        with path.open("rb") as handle:
            first = handle.readline(4096)
        token, rank = first.decode("ascii").split()
        base64.b64decode(token, validate=True)
        int(rank)
    except (OSError, ValueError, UnicodeDecodeError, binascii.Error):
        return False
    return True


def build_backend(ranks: Mapping[bytes, int], special_tokens: list[str], pattern: str = DEFAULT_PATTERN) -> Tokenizer:
    """A byte-level BPE ``tokenizers.Tokenizer`` equal to the tiktoken encoding ``ranks`` (plus special tokens)."""
    alphabet = _byte_alphabet()

    def text(token: bytes) -> str:
        return "".join(alphabet[b] for b in token)

    vocab = {text(token): rank for token, rank in ranks.items()}
    merges: list[tuple[int, int, int, bytes, bytes]] = []
    for token, rank in ranks.items():
        for cut in range(1, len(token)):
            left, right = token[:cut], token[cut:]
            if left in ranks and right in ranks:
                merges.append((rank, ranks[left], ranks[right], left, right))
    merges.sort(key=lambda m: m[:3])
    backend = Tokenizer(BPE(vocab, [(text(m[3]), text(m[4])) for m in merges], fuse_unk=False, ignore_merges=True))
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    backend.decoder = decoders.ByteLevel()
    backend.post_processor = processors.ByteLevel(trim_offsets=False)
    if special_tokens:
        backend.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in special_tokens])
    return backend


def _content(value: Any) -> str:
    return str(value["content"]) if isinstance(value, Mapping) and "content" in value else str(value)


def special_tokens_after(base_size: int, config: Mapping[str, Any]) -> list[str]:
    """The tokens to append after the ranks: ``added_tokens_decoder`` ids from ``base_size`` on (placeholders
    ``<|reserved_token_N|>`` fill gaps), then ``extra_special_tokens`` not listed yet."""
    decoder = {int(k): _content(v) for k, v in (config.get("added_tokens_decoder") or {}).items()}
    extra = config.get("extra_special_tokens") or config.get("additional_special_tokens") or []
    extra = list(extra.keys()) if isinstance(extra, Mapping) else list(extra)
    tokens: list[str] = []
    top = max(decoder, default=0)
    if top >= base_size:
        tokens = [decoder.get(i, f"<|reserved_token_{i}|>") for i in range(base_size, top + 1)]
    for token in map(_content, extra):
        if token not in tokens:
            tokens.append(token)
    return tokens


class TiktokenTokenizer:
    """Loads a folder with a tiktoken ``tokenizer.model`` as a ``PreTrainedTokenizerFast``."""

    @staticmethod
    def can_load(path: str | os.PathLike[str]) -> bool:
        """A folder with a tiktoken-format ``tokenizer.model`` and no ``tokenizer.json``."""
        folder = Path(path)
        return (
            folder.is_dir()
            and not (folder / "tokenizer.json").is_file()
            and (folder / TIKTOKEN_FILE).is_file()
            and is_tiktoken_file(folder / TIKTOKEN_FILE)
        )

    @staticmethod
    def from_pretrained(path: str | os.PathLike[str], *inputs: Any, **kwargs: Any) -> PreTrainedTokenizerFast:
        for ignored in HUB_ARGUMENTS:
            kwargs.pop(ignored, None)
        folder = Path(path)
        model = folder / TIKTOKEN_FILE
        if not model.is_file():
            present = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
            raise FileMissingError(
                f"{model} is missing (found {present}): a tiktoken tokenizer needs its rank file saved as "
                f"{TIKTOKEN_FILE}. Put it in the folder, or convert the tokenizer to tokenizer.json."
            )
        files: dict[str, Any] = {TIKTOKEN_FILE: model.read_bytes()}
        for name in (TOKENIZER_CONFIG_FILE, SPECIAL_TOKENS_MAP_FILE):
            if (folder / name).is_file():
                files[name] = read_json(folder / name, what=name)
        kwargs.setdefault("name_or_path", str(path))
        return TiktokenTokenizer.from_files(files, *inputs, **kwargs)

    @staticmethod
    def from_files(files: Mapping[str, Any], *inputs: Any, **kwargs: Any) -> PreTrainedTokenizerFast:
        """``files``: ``tokenizer.model`` (bytes or text), ``tokenizer_config.json`` / ``special_tokens_map.json``
        (dicts). Keyword arguments override the config."""
        where = f"{kwargs.get('name_or_path') or '<in-memory files>'}/{TIKTOKEN_FILE}"
        if files.get(TIKTOKEN_FILE) is None:
            raise FileMissingError(f"{where} is missing: from_files needs the tiktoken rank file {TIKTOKEN_FILE!r}.")
        ranks = parse_ranks(files[TIKTOKEN_FILE], where)
        config = dict(files.get(TOKENIZER_CONFIG_FILE) or {})
        for key, value in (files.get(SPECIAL_TOKENS_MAP_FILE) or {}).items():
            config.setdefault(key, value)
        for key in ("tokenizer_class", "auto_map", "init_inputs", "vocab_file", "tokenizer_file", "backend"):
            config.pop(key, None)
        config.update(kwargs)
        backend = build_backend(ranks, special_tokens_after(len(ranks), config))
        return PreTrainedTokenizerFast(tokenizer_object=backend, **config)
