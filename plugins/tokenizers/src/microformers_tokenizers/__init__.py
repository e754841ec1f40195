"""microformers-tokenizers: the tokenizer backend of microformers.

Importing this package is cheap: the ``tokenizers`` library, ``jinja2`` and ``numpy`` load only when
one of the names below is first used, and ``torch`` only when ``return_tensors="pt"`` asks for it.
"""

from __future__ import annotations

from microformers.lazy import lazy_exports

__version__ = "0.1.0"

_LAZY: dict[str, str] = {
    "PreTrainedTokenizerFast": "tokenizer",
    "TokenizersBackend": "tokenizer",
    "BertTokenizer": "model_tokenizers",
    "BertTokenizerFast": "model_tokenizers",
    "DistilBertTokenizer": "model_tokenizers",
    "DistilBertTokenizerFast": "model_tokenizers",
    "GPT2Tokenizer": "model_tokenizers",
    "GPT2TokenizerFast": "model_tokenizers",
    "RobertaTokenizer": "model_tokenizers",
    "RobertaTokenizerFast": "model_tokenizers",
    "bpe_vocab_and_merges": "model_tokenizers",
    "parse_merges_txt": "model_tokenizers",
    "BatchEncoding": "batch_encoding",
    "ChatTemplateError": "chat_template",
    "render_chat_template": "chat_template",
    "VERY_LARGE_INTEGER": "tokenizer",
    "HUB_ARGUMENTS": "_files",
}

__all__ = ["__version__", *_LAZY]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
