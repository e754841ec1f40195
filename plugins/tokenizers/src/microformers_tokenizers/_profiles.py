"""Per-``tokenizer_class`` behaviour.

A ``tokenizer_config.json`` names a tokenizer class. The reference implementation gives some of those
classes their own defaults (special tokens, padding side, model inputs) and rebuilds part of the
``tokenizer.json`` pipeline from settings in the config (e.g. BERT's lowercasing from
``do_lower_case``). A profile records those differences, so one backend class serves them all and
gives the same ids.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

import attrs
from tokenizers import Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import WordPiece

# Qwen2's pre-tokenization pattern (a published fact of that tokenizer format).
QWEN2_SPLIT_PATTERN = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""

BERT_SPECIAL_TOKENS = {
    "unk_token": "[UNK]",
    "sep_token": "[SEP]",
    "pad_token": "[PAD]",
    "cls_token": "[CLS]",
    "mask_token": "[MASK]",
}


@attrs.frozen
class Profile:
    """How one ``tokenizer_class`` behaves."""

    name: str
    model_input_names: tuple[str, ...] = ("input_ids", "attention_mask")
    padding_side: str = "right"
    default_tokens: dict[str, str | None] = attrs.field(factory=dict)
    # Rewrites the parsed tokenizer.json model section (vocab kept) before the backend is built.
    edit_model: Callable[[dict[str, Any], dict[str, Any]], None] | None = None
    # Replaces normalizer / pre-tokenizer / decoder on the built backend from config settings.
    set_pipeline: Callable[[Tokenizer, dict[str, Any]], None] | None = None
    # BERT always writes its own [CLS] A [SEP] (B [SEP]) post-processor.
    cls_sep_post_processor: bool = False

    @property
    def rebuilds(self) -> bool:
        return self.edit_model is not None or self.set_pipeline is not None


# -- BERT ---------------------------------------------------------------------------------------
def _bert_model(model: dict[str, Any], config: dict[str, Any]) -> None:
    model.update(
        type="WordPiece",
        unk_token=str(config.get("unk_token") or "[UNK]"),
        continuing_subword_prefix="##",
        max_input_chars_per_word=100,
    )
    vocab = model.get("vocab")
    if isinstance(vocab, list):
        model["vocab"] = {(v[0] if isinstance(v, list) else v): i for i, v in enumerate(vocab)}


def _bert_pipeline(backend: Tokenizer, config: dict[str, Any]) -> None:
    backend.normalizer = normalizers.BertNormalizer(
        clean_text=True,
        handle_chinese_chars=config.get("tokenize_chinese_chars", True),
        strip_accents=config.get("strip_accents"),
        lowercase=config.get("do_lower_case", True),
    )
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.decoder = decoders.WordPiece(prefix="##")


def bert_from_vocab(vocab: dict[str, int], config: dict[str, Any]) -> Tokenizer:
    """The backend the reference builds for a folder that only has a WordPiece ``vocab.txt``."""
    backend = Tokenizer(WordPiece(vocab, unk_token=str(config.get("unk_token") or "[UNK]")))
    _bert_pipeline(backend, config)
    return backend


# -- byte-level BPE families ------------------------------------------------------------------
def _bpe_model(fuse_unk: bool, byte_fallback: bool) -> Callable[[dict[str, Any], dict[str, Any]], None]:
    def edit(model: dict[str, Any], config: dict[str, Any]) -> None:
        model.update(
            type="BPE",
            dropout=None,
            unk_token=None,
            continuing_subword_prefix="",
            end_of_word_suffix="",
            fuse_unk=fuse_unk,
            byte_fallback=byte_fallback,
            ignore_merges=False,
        )

    return edit


def _gpt2_pipeline(backend: Tokenizer, config: dict[str, Any]) -> None:
    backend.normalizer = None
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=bool(config.get("add_prefix_space", False)))
    backend.decoder = decoders.ByteLevel()


def _qwen2_pipeline(backend: Tokenizer, config: dict[str, Any]) -> None:
    add_prefix_space = config.get("add_prefix_space")
    backend.normalizer = normalizers.NFC()
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=bool(add_prefix_space), use_regex=False),
        ]
    )
    backend.decoder = decoders.ByteLevel()


def _llama_pipeline(backend: Tokenizer, config: dict[str, Any]) -> None:
    add_prefix_space = config.get("add_prefix_space")
    add_prefix_space = True if add_prefix_space is None else bool(add_prefix_space)
    legacy = bool(config.get("legacy", False))
    scheme = ("always" if legacy else "first") if add_prefix_space else "never"
    backend.normalizer = None
    backend.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme=scheme, split=False)
    steps = [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
    if add_prefix_space:
        steps.append(decoders.Strip(content=" ", left=1))
    backend.decoder = decoders.Sequence(steps)


# -- RoBERTa (byte-level BPE) and XLM-RoBERTa (SentencePiece Unigram) --------------------------------
ROBERTA_SPECIAL_TOKENS = {
    "bos_token": "<s>",
    "eos_token": "</s>",
    "sep_token": "</s>",
    "cls_token": "<s>",
    "unk_token": "<unk>",
    "pad_token": "<pad>",
    "mask_token": "<mask>",
}


def _token_id(backend: Tokenizer, config: dict[str, Any], name: str) -> tuple[str, int] | None:
    token = config.get(name)
    content = token.get("content") if isinstance(token, dict) else token
    token_id = backend.token_to_id(str(content)) if content is not None else None
    return (str(content), token_id) if token_id is not None else None


def _roberta_pipeline(backend: Tokenizer, config: dict[str, Any]) -> None:
    """No normalizer; byte-level pre-tokenizer and ``<s> A </s></s> B </s>`` from ``add_prefix_space``/``trim_offsets``."""
    add_prefix_space = bool(config.get("add_prefix_space", False))
    backend.normalizer = None
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space)
    backend.decoder = decoders.ByteLevel()
    sep, cls = _token_id(backend, config, "sep_token"), _token_id(backend, config, "cls_token")
    if sep is not None and cls is not None:
        trim_offsets = bool(config.get("trim_offsets", True))
        backend.post_processor = processors.RobertaProcessing(sep, cls, trim_offsets, add_prefix_space)


def _xlm_roberta_model(model: dict[str, Any], config: dict[str, Any]) -> None:
    model.update(type="Unigram", unk_id=3, byte_fallback=False)


def _xlm_roberta_pipeline(backend: Tokenizer, config: dict[str, Any]) -> None:
    """Only a SentencePiece ``Precompiled`` normalizer is kept; whitespace split + Metaspace; ``<s> A </s>``."""
    kept = None
    if backend.normalizer is not None:
        state = json.loads(backend.normalizer.__getstate__())
        steps = state.get("normalizers", [state]) if state.get("type") == "Sequence" else [state]
        for step in steps:
            if step.get("type") == "Precompiled" and step.get("precompiled_charsmap"):
                kept = normalizers.Precompiled(base64.b64decode(step["precompiled_charsmap"]))
                break
    backend.normalizer = kept
    scheme = "always" if config.get("add_prefix_space", True) else "never"
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace(replacement="▁", prepend_scheme=scheme)]
    )
    backend.decoder = decoders.Metaspace(replacement="▁", prepend_scheme=scheme)
    bos, eos = _token_id(backend, config, "bos_token"), _token_id(backend, config, "eos_token")
    if bos is not None and eos is not None:
        backend.post_processor = processors.TemplateProcessing(
            single=[bos[0], "$A", eos[0]],
            pair=[bos[0], "$A", eos[0], eos[0], "$B", eos[0]],
            special_tokens=[bos, eos],
        )


BERT_INPUTS = ("input_ids", "token_type_ids", "attention_mask")
GENERIC = Profile(name="TokenizersBackend")
BERT = Profile(
    name="BertTokenizer",
    model_input_names=BERT_INPUTS,
    default_tokens=BERT_SPECIAL_TOKENS,
    edit_model=_bert_model,
    set_pipeline=_bert_pipeline,
    cls_sep_post_processor=True,
)
GPT2 = Profile(
    name="GPT2Tokenizer",
    default_tokens={"unk_token": "<|endoftext|>", "bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"},
    edit_model=_bpe_model(fuse_unk=False, byte_fallback=False),
    set_pipeline=_gpt2_pipeline,
)
QWEN2 = Profile(
    name="Qwen2Tokenizer",
    default_tokens={"unk_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"},
    edit_model=_bpe_model(fuse_unk=False, byte_fallback=False),
    set_pipeline=_qwen2_pipeline,
)
LLAMA = Profile(
    name="LlamaTokenizer",
    padding_side="left",
    default_tokens={"unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>"},
    edit_model=_bpe_model(fuse_unk=True, byte_fallback=True),
    set_pipeline=_llama_pipeline,
)
ROBERTA = Profile(
    name="RobertaTokenizer",
    default_tokens=ROBERTA_SPECIAL_TOKENS,
    edit_model=_bpe_model(fuse_unk=False, byte_fallback=False),
    set_pipeline=_roberta_pipeline,
)
XLM_ROBERTA = Profile(
    name="XLMRobertaTokenizer",
    default_tokens=ROBERTA_SPECIAL_TOKENS,
    edit_model=_xlm_roberta_model,
    set_pipeline=_xlm_roberta_pipeline,
)
# Llama-classed folders whose tokenizer.json is byte-level (Llama 3 style) are served as-is, with the
# generic defaults (right padding), as the reference's AutoTokenizer does.
LLAMA_BYTE_LEVEL = GENERIC

_BY_CLASS: dict[str, Profile] = {
    "BertTokenizer": BERT,
    "DistilBertTokenizer": attrs.evolve(
        BERT, name="DistilBertTokenizer", model_input_names=("input_ids", "attention_mask")
    ),
    "GPT2Tokenizer": GPT2,
    "Qwen2Tokenizer": QWEN2,
    "LlamaTokenizer": LLAMA,
    "RobertaTokenizer": ROBERTA,
    "XLMRobertaTokenizer": XLM_ROBERTA,
    "TokenizersBackend": GENERIC,
    "PreTrainedTokenizer": GENERIC,
}

# model_type -> tokenizer class, for folders whose tokenizer_config.json names none.
MODEL_TYPE_CLASSES: dict[str, str] = {
    "bert": "BertTokenizer",
    "distilbert": "DistilBertTokenizer",
    "gpt2": "GPT2Tokenizer",
    "qwen2": "Qwen2Tokenizer",
    "llama": "LlamaTokenizer",
    "roberta": "RobertaTokenizer",
    "xlm-roberta": "XLMRobertaTokenizer",
}


def _is_byte_level(tokenizer_json: dict[str, Any]) -> bool:
    text = json.dumps({k: tokenizer_json.get(k) for k in ("pre_tokenizer", "decoder")})
    return '"ByteLevel"' in text


def profile_for(class_name: str | None, tokenizer_json: dict[str, Any] | None) -> Profile:
    """The profile for a ``tokenizer_class`` value (``None`` or unknown: the tokenizer.json as is)."""
    if not class_name:
        return GENERIC
    base = class_name.removesuffix("Fast")
    profile = _BY_CLASS.get(base, GENERIC)
    if profile is LLAMA and tokenizer_json is not None and _is_byte_level(tokenizer_json):
        return LLAMA_BYTE_LEVEL
    return profile
