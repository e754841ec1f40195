"""Rebuilding a Hugging Face tokenizer (``tokenizer.json`` + ``tokenizer_config.json``) from GGUF metadata.

A GGUF file stores its vocabulary under llama.cpp keys (``tokenizer.ggml.*``): token strings,
token types, merges or scores, special token ids and flags, and the chat template. Two families
are rebuilt here:

- ``gpt2``: byte-level BPE (GPT-2 style byte alphabet) with the file's merges; the pre-tokenizer
  split regexes follow ``tokenizer.ggml.pre`` (:data:`PRE_TOKENIZER_SPLITS`, llama.cpp's table).
- ``llama``: SentencePiece-style BPE over ``▁``-prefixed pieces with byte fallback; merges come
  from the file, or are derived from the pieces and their scores when the file has none.

The result is plain JSON text, so no tokenizer library is needed to build it.
"""

from __future__ import annotations

import json
import logging
from functools import cache
from typing import Any

from microformers.errors import CheckpointError

from .architectures import UNLIMITED_LENGTH
from .reader import GGUFFile

logger = logging.getLogger("microformers")

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

# GPT-2's split (ByteLevel's own regex), as llama.cpp writes it; a piece nothing matches stays a piece, so the
# trailing "|\s+" of GPT-2's pattern is not needed
_GPT2_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_BLOOM_SPLIT = r" ?[^(\s|.,!?…。，、।۔،)]+"
_CJK_RUNS = "[一-龥ࠀ-一가-퟿]+"
# the tokenizer.json patterns of these families (llama.cpp's table keeps them as comments beside its rewrites)
_TEKKEN_SPLIT = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
    r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_CONTRACTION = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
_GPT4O_SPLIT = (
    rf"[^\r\n\p{{L}}\p{{N}}]?[\p{{Lu}}\p{{Lt}}\p{{Lm}}\p{{Lo}}\p{{M}}]*[\p{{Ll}}\p{{Lm}}\p{{Lo}}\p{{M}}]+{_CONTRACTION}"
    rf"|[^\r\n\p{{L}}\p{{N}}]?[\p{{Lu}}\p{{Lt}}\p{{Lm}}\p{{Lo}}\p{{M}}]+[\p{{Ll}}\p{{Lm}}\p{{Lo}}\p{{M}}]*{_CONTRACTION}"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_SEED_CODER_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}"
    r"| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# DeepSeek LLM's cased letters, by code point (several are canonical singletons that text tools normalise away)
_DEEPSEEK_LLM_LETTERS = (
    "A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af"
    "\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5"
    "\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba"
    "\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45"
    "\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe"
    "\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc"
    "\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139"
    "\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3"
    "\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06"
    "\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3"
    "\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df"
    "\U0001e900-\U0001e943"
)

# tokenizer.ggml.pre -> the regexes its merges were learned with, applied in turn (each splits the pieces the
# previous one left; unmatched text stays a piece), as llama.cpp's pre-tokenizer table lists them. Files whose
# value is not here split with GPT-2's regex (ByteLevel's own): the names in GPT2_PRES quietly, others with a
# warning.
PRE_TOKENIZER_SPLITS: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(
        ("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "jina-v5-nano"),
        (_LLAMA3_SPLIT,),
    ),
    **dict.fromkeys(("smaug-bpe", "dbrx", "chatglm-bpe", "glm4"), (_LLAMA3_SPLIT,)),
    **dict.fromkeys(
        ("qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez", "stablelm2", "hunyuan", "grok-2"), (_QWEN2_SPLIT,)
    ),
    # StarCoder's tokenizer.json: digits one by one, then GPT-2's split
    **dict.fromkeys(
        ("starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"), (r"\p{N}", _GPT2_SPLIT)
    ),
    # Falcon's: runs of punctuation (ASCII symbols included), GPT-2's split, then digits in threes
    "falcon": (r"[\p{P}\$\+<=>\^~\|`]+", _GPT2_SPLIT, "[0-9][0-9][0-9]"),
    # BLOOM's: a piece is an optional space and anything up to whitespace or . , ! ? and their CJK/Indic/Arabic kin
    **dict.fromkeys(("bloom", "poro-chat", "gpt3-finnish"), (_BLOOM_SPLIT,)),
    "viking": (_BLOOM_SPLIT, r"\p{N}"),
    "deepseek-llm": (
        "[\r\n]",
        rf"\s?[{_DEEPSEEK_LLM_LETTERS}]+",
        r"\s?[!-/:-~！-／：-～‘-‟　-。]+",
        r"\s+$",
        _CJK_RUNS,
        r"\p{N}+",
    ),
    "deepseek-coder": ("[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", _CJK_RUNS, r"\p{N}"),
    "tekken": (_TEKKEN_SPLIT,),
    **dict.fromkeys(("gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"), (_GPT4O_SPLIT,)),
    "seed-coder": (_SEED_CODER_SPLIT,),
}
# values llama.cpp splits with GPT-2's regex, like the fallback ("default": a converter that did not recognise
# the tokenizer; llama.cpp then uses a regex set of its own, the reference's GGUF loader GPT-2's, as here)
GPT2_PRES = frozenset(
    {
        "default", "gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0", "mellum",
        "modern-bert", "jina-v1-en", "jina-v2-code", "roberta-bpe", "mpt", "olmo", "jais", "trillion",
        "granite-docling", "exaone4",
    }
)  # fmt: skip


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
    pre = gguf.metadata.get("tokenizer.ggml.pre")
    splits = PRE_TOKENIZER_SPLITS.get(str(pre))
    if splits is None and pre is not None and str(pre) not in GPT2_PRES:
        logger.warning(
            "GGUF file %s: tokenizer.ggml.pre %r is not one microformers-gguf knows; text is split with GPT-2's "
            "regex, so token ids may differ from llama.cpp's (which refuses unknown values). Re-convert the file "
            "with a current llama.cpp, or use the model's own tokenizer.json",
            gguf.path,
            str(pre),
        )
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": splits is None}
    if splits is None:
        pre_tokenizer = byte_level
    else:
        pre_tokenizer = {
            "type": "Sequence",
            "pretokenizers": [
                *({"type": "Split", "pattern": {"Regex": r}, "behavior": "Isolated", "invert": False} for r in splits),
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
