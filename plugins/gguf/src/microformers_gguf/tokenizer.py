"""Rebuilding a Hugging Face tokenizer (``tokenizer.json`` + ``tokenizer_config.json``) from GGUF metadata.

A GGUF file stores its vocabulary under llama.cpp keys (``tokenizer.ggml.*``): token strings,
token types, merges or scores, special token ids and flags, and the chat template. Two families
are rebuilt here:

- ``gpt2``: byte-level BPE (GPT-2 style byte alphabet) with the file's merges; the pre-tokenizer
  split regex follows ``tokenizer.ggml.pre``.
- ``llama``: SentencePiece-style BPE over ``▁``-prefixed pieces with byte fallback; merges come
  from the file, or are derived from the pieces and their scores when the file has none.

The result is plain JSON text, so no tokenizer library is needed to build it.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from microformers.errors import CheckpointError

from .architectures import UNLIMITED_LENGTH
from .reader import GGUFFile

# llama.cpp token types (tokenizer.ggml.token_type).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

SPIECE_SPACE = "\u2581"

_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# tokenizer.ggml.pre -> the regex its merges were learned with (others use GPT-2's own ByteLevel split).
PRE_TOKENIZER_SPLITS: dict[str, str] = {
    **dict.fromkeys(("llama3", "llama-v3", "llama-bpe", "falcon3", "smaug-bpe", "dbrx"), _LLAMA3_SPLIT),
    **dict.fromkeys(("qwen2", "deepseek-r1-qwen", "megrez"), _QWEN2_SPLIT),
}


@cache
def byte_alphabet() -> tuple[str, ...]:
    """GPT-2's byte-level alphabet: the printable character standing for each byte 0..255."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars: list[str] = []
    extra = 0
    for byte in range(256):
        if byte in printable:
            chars.append(chr(byte))
        else:
            chars.append(chr(256 + extra))
            extra += 1
    return tuple(chars)


def _respell_bytes(token: str, alphabet: frozenset[str]) -> str:
    """A byte-level vocabulary entry as the byte alphabet spells it."""
    if alphabet.issuperset(token):
        return token
    chars = byte_alphabet()
    return "".join(chars[b] for b in token.encode("utf-8"))


def _added_token(token_id: int, content: str, special: bool) -> dict[str, Any]:
    return {
        "id": token_id,
        "content": content,
        "single_word": False,
        "lstrip": False,
        "rstrip": False,
        "normalized": False,
        "special": special,
    }


def derive_merges(tokens: list[str], scores: list[float]) -> list[tuple[str, str]]:
    """BPE merges implied by a SentencePiece vocabulary: every split of a piece into two pieces, best score first.

    Candidates of one piece are ordered by the ids of their halves; all candidates are then ordered by
    the merged piece's score (higher first), then by the longer left and right half first. Only cuts
    where both halves have the length of some vocabulary entry are tried, so a very long piece costs
    as many slices as there are distinct piece lengths, not one per character.
    """
    ids: dict[str, int] = {}
    for index, token in enumerate(tokens):
        ids[token] = index
    score_of: dict[str, float] = {}
    for token, score in zip(tokens, scores):
        score_of[token] = score
    lengths = sorted({len(token) for token in ids})
    length_set = frozenset(lengths)
    candidates: list[tuple[str, str, float]] = []
    for token, score in score_of.items():
        size = len(token)
        local = []
        for cut in lengths:
            if cut >= size:
                break
            if size - cut in length_set and token[:cut] in ids and token[cut:] in ids:
                local.append((token[:cut], token[cut:], score))
        local.sort(key=lambda c: (ids[c[0]], ids[c[1]]))
        candidates.extend(local)
    candidates.sort(key=lambda c: (c[2], len(c[0]), len(c[1])), reverse=True)
    return [(left, right) for left, right, _ in candidates]


def _template(bos: str | None, eos: str | None, ids: dict[str, int]) -> dict[str, Any]:
    def sequence(piece: str, type_id: int) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if bos is not None:
            out.append({"SpecialToken": {"id": bos, "type_id": type_id}})
        out.append({"Sequence": {"id": piece, "type_id": type_id}})
        if eos is not None:
            out.append({"SpecialToken": {"id": eos, "type_id": type_id}})
        return out

    specials = {t: {"id": t, "ids": [ids[t]], "tokens": [t]} for t in (bos, eos) if t is not None}
    return {
        "type": "TemplateProcessing",
        "single": sequence("A", 0),
        "pair": sequence("A", 0) + sequence("B", 1),
        "special_tokens": specials,
    }


def build_tokenizer_files(gguf: GGUFFile) -> dict[str, Any]:
    """``{"tokenizer.json": <JSON text>, "tokenizer_config.json": <dict>}`` for the file's vocabulary."""
    md = gguf.metadata
    tokens = md.get("tokenizer.ggml.tokens")
    model_kind = md.get("tokenizer.ggml.model")
    if model_kind is not None and model_kind not in ("gpt2", "llama"):
        raise CheckpointError(
            f"GGUF file {gguf.path} uses tokenizer model '{model_kind}'; microformers-gguf rebuilds 'gpt2' "
            "(byte-level BPE) and 'llama' (SentencePiece BPE) tokenizers. Load the tokenizer from a folder "
            "with tokenizer.json instead."
        )
    if not isinstance(tokens, list) or not tokens or not all(isinstance(t, str) for t in tokens):
        raise CheckpointError(
            f"GGUF file {gguf.path} has no tokenizer vocabulary (tokenizer.ggml.tokens); "
            "load the tokenizer from a folder with tokenizer.json instead."
        )
    if model_kind is None:
        raise CheckpointError(
            f"GGUF file {gguf.path} does not say which tokenizer its vocabulary is for (tokenizer.ggml.model); "
            "load the tokenizer from a folder with tokenizer.json instead."
        )
    token_types = md.get("tokenizer.ggml.token_type")
    if not isinstance(token_types, list) or len(token_types) != len(tokens):
        token_types = [NORMAL] * len(tokens)
    elif not all(isinstance(t, int) for t in token_types):
        raise CheckpointError(
            f"GGUF file {gguf.path}: tokenizer.ggml.token_type holds non-integers; the file is corrupt"
        )

    def special(key: str) -> str | None:
        token_id = md.get(f"tokenizer.ggml.{key}_token_id")
        if isinstance(token_id, int) and 0 <= token_id < len(tokens):
            return tokens[token_id]
        return None

    bos, eos, unk, pad = special("bos"), special("eos"), special("unknown"), special("padding")
    add_bos = bool(md.get("tokenizer.ggml.add_bos_token", model_kind == "llama"))
    add_eos = bool(md.get("tokenizer.ggml.add_eos_token", False))

    if model_kind == "gpt2":
        model, pre_tokenizer, decoder, alphabet = _byte_level_parts(gguf, tokens)
        normalizer = None
    else:
        model, normalizer, pre_tokenizer, decoder = _sentencepiece_parts(gguf, tokens, _sentencepiece_flavour(gguf))
        alphabet = None
    vocab: dict[str, int] = model["vocab"]

    added: dict[int, dict[str, Any]] = {}
    for token_id, (token, kind) in enumerate(zip(tokens, token_types)):
        if kind == CONTROL and (alphabet is None or set(token) <= alphabet):
            added[token_id] = _added_token(token_id, token, special=True)
        elif kind == USER_DEFINED and token in vocab:
            added.setdefault(token_id, _added_token(token_id, token, special=False))
    for token in (bos, eos, unk, pad):
        if token is not None and token in vocab:
            token_id = vocab[token]
            if token_id not in added or not added[token_id]["special"]:
                added[token_id] = _added_token(token_id, token, special=True)

    post_ids = {t: vocab[t] for t in (bos, eos) if t is not None and t in vocab}
    tokenizer_json = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [added[i] for i in sorted(added)],
        "normalizer": normalizer,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": _template(
            bos if add_bos and bos in post_ids else None, eos if add_eos and eos in post_ids else None, post_ids
        ),
        "decoder": decoder,
        "model": model,
    }
    tokenizer_config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": bos,
        "eos_token": eos,
        "unk_token": unk,
        "pad_token": pad,
        "add_bos_token": add_bos,
        "add_eos_token": add_eos,
        "clean_up_tokenization_spaces": False,
        "model_max_length": UNLIMITED_LENGTH,
    }
    chat_template = md.get("tokenizer.chat_template")
    if isinstance(chat_template, str):
        tokenizer_config["chat_template"] = chat_template
    return {
        "tokenizer.json": json.dumps(tokenizer_json, ensure_ascii=False),
        "tokenizer_config.json": tokenizer_config,
    }


def _merges(gguf: GGUFFile) -> list[str] | None:
    """The file's merges as ``"left right"`` strings (a form tokenizer.json accepts as is)."""
    merges = gguf.metadata.get("tokenizer.ggml.merges")
    if merges is None:
        return None
    if not isinstance(merges, list):
        raise CheckpointError(f"GGUF file {gguf.path}: tokenizer.ggml.merges is not a list; the file is corrupt")
    for merge in merges:
        if not isinstance(merge, str) or " " not in merge.strip(" "):
            raise CheckpointError(f"GGUF file {gguf.path} has a malformed merge {merge!r} (expected 'left right')")
    return merges


def _bpe_model(vocab: dict[str, int], merges: list[Any], *, sentencepiece: bool) -> dict[str, Any]:
    return {
        "type": "BPE",
        "dropout": None,
        "unk_token": None,
        "continuing_subword_prefix": None,
        "end_of_word_suffix": None,
        "fuse_unk": sentencepiece,
        "byte_fallback": sentencepiece,
        "ignore_merges": False,
        "vocab": vocab,
        "merges": merges,
    }


def _byte_level_parts(
    gguf: GGUFFile, tokens: list[str]
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], frozenset[str]]:
    alphabet = frozenset(byte_alphabet())
    vocab = {_respell_bytes(token, alphabet): index for index, token in enumerate(tokens)}
    merges = _merges(gguf)
    if merges is None:
        raise CheckpointError(
            f"GGUF file {gguf.path} has a byte-level (gpt2) vocabulary but no tokenizer.ggml.merges; "
            "the tokenizer cannot be rebuilt. Re-convert the file with a current llama.cpp."
        )
    split = PRE_TOKENIZER_SPLITS.get(str(gguf.metadata.get("tokenizer.ggml.pre")))
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": split is None}
    if split is None:
        pre_tokenizer = byte_level
    else:
        pre_tokenizer = {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": split}, "behavior": "Isolated", "invert": False},
                byte_level,
            ],
        }
    decoder = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
    return _bpe_model(vocab, merges, sentencepiece=False), pre_tokenizer, decoder, alphabet


def _sentencepiece_flavour(gguf: GGUFFile) -> str:
    """How the architecture's SentencePiece vocabulary adds the prefix space (its GGUF mapping says; default Llama's)."""
    from microformers import registry

    name = gguf.architecture
    reg = registry.get("gguf_architectures", name) if name else None
    if reg is None:
        return "metaspace"
    return str(getattr(reg.load(), "tokenizer", "metaspace"))


def _sentencepiece_parts(
    gguf: GGUFFile, tokens: list[str], flavour: str = "metaspace"
) -> tuple[dict[str, Any], dict[str, Any] | None, dict[str, Any] | None, dict[str, Any]]:
    """The BPE model, normalizer, pre-tokenizer and decoder of a SentencePiece vocabulary.

    ``flavour`` (from the architecture's GGUF mapping): ``"metaspace"`` (Llama: a ``Metaspace``
    pre-tokenizer prepends the prefix space), ``"normalizer"`` (Phi-3: a normalizer prepends ``▁`` and
    replaces spaces, so leading spaces are kept as they are) or ``"gemma"`` (no prefix space; pieces made
    only of spaces are respelled with ``▁``; merges follow the vocabulary order, not the scores).
    """
    if flavour == "gemma":
        tokens = [SPIECE_SPACE * len(t) if t and not t.strip(" ") else t for t in tokens]
    vocab = {token: index for index, token in enumerate(tokens)}
    file_merges = _merges(gguf)
    # Pairs, not "left right" strings: SentencePiece pieces may contain spaces.
    merges: list[Any] | None = None if file_merges is None else [list(m.partition(" ")[::2]) for m in file_merges]
    if merges is None:
        scores = gguf.metadata.get("tokenizer.ggml.scores")
        if flavour == "gemma":
            scores = [-float(index) for index in range(len(tokens))]
        elif not isinstance(scores, list) or len(scores) != len(tokens):
            scores = [0.0] * len(tokens)
        elif not all(isinstance(s, (int, float)) for s in scores):
            raise CheckpointError(
                f"GGUF file {gguf.path}: tokenizer.ggml.scores holds non-numbers; the file is corrupt"
            )
        merges = [list(pair) for pair in derive_merges(tokens, scores)]
    replace = {"type": "Replace", "pattern": {"String": SPIECE_SPACE}, "content": " "}
    pieces = [replace, {"type": "ByteFallback"}, {"type": "Fuse"}]
    strip = {"type": "Strip", "content": " ", "start": 1, "stop": 0}
    model = _bpe_model(vocab, merges, sentencepiece=True)
    if flavour == "gemma":
        unk_id = gguf.metadata.get("tokenizer.ggml.unknown_token_id")
        if isinstance(unk_id, int) and 0 <= unk_id < len(tokens):
            model["unk_token"] = tokens[unk_id]
        split = {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious", "invert": False}
        to_spiece = {"type": "Replace", "pattern": {"String": " "}, "content": SPIECE_SPACE}
        return model, to_spiece, split, {"type": "Sequence", "decoders": pieces}
    if flavour == "normalizer":
        prepend = {
            "type": "Sequence",
            "normalizers": [
                {"type": "Prepend", "prepend": SPIECE_SPACE},
                {"type": "Replace", "pattern": {"String": " "}, "content": SPIECE_SPACE},
            ],
        }
        return model, prepend, None, {"type": "Sequence", "decoders": [*pieces, strip]}
    metaspace = {"type": "Metaspace", "replacement": SPIECE_SPACE, "prepend_scheme": "first", "split": False}
    return model, None, metaspace, {"type": "Sequence", "decoders": [*pieces, strip]}
