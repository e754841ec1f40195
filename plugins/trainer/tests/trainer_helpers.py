"""Tiny models and datasets for the trainer tests (hidden size 16, 2 layers: milliseconds per step)."""

from __future__ import annotations

from typing import Any

import torch

VOCAB = 40


def tiny_gpt2(**overrides: Any) -> Any:
    from microformers_gpt2.configuration_gpt2 import GPT2Config
    from microformers_gpt2.modeling_gpt2 import GPT2LMHeadModel

    torch.manual_seed(0)
    config = {"vocab_size": VOCAB, "n_embd": 16, "n_layer": 2, "n_head": 2, "n_positions": 16, **overrides}
    return GPT2LMHeadModel(GPT2Config(**config))


def tiny_bert_classifier(**overrides: Any) -> Any:
    from microformers_bert.configuration_bert import BertConfig
    from microformers_bert.modeling_bert import BertForSequenceClassification

    torch.manual_seed(0)
    config = {
        "vocab_size": VOCAB,
        "hidden_size": 16,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 32,
        "max_position_embeddings": 16,
        "num_labels": 3,
        **overrides,
    }
    return BertForSequenceClassification(BertConfig(**config))


def lm_rows(n: int, length: int = 8, seed: int = 0) -> list[dict[str, list[int]]]:
    g = torch.Generator().manual_seed(seed)
    rows = [torch.randint(1, VOCAB, (length,), generator=g).tolist() for _ in range(n)]
    return [{"input_ids": r, "labels": list(r)} for r in rows]


def cls_rows(n: int, length: int = 6, seed: int = 0) -> list[dict[str, Any]]:
    g = torch.Generator().manual_seed(seed)
    return [{"input_ids": torch.randint(1, VOCAB, (length,), generator=g).tolist(), "labels": i % 3} for i in range(n)]


def tiny_llama(**overrides: Any) -> Any:
    from microformers_llama.configuration_llama import LlamaConfig
    from microformers_llama.modeling_llama import LlamaForCausalLM

    torch.manual_seed(0)
    config = {
        "vocab_size": VOCAB,
        "hidden_size": 16,
        "intermediate_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "max_position_embeddings": 32,
        **overrides,
    }
    return LlamaForCausalLM(LlamaConfig(**config))


# -- a tiny encoder-decoder (T5) and a word-level tokenizer for the Seq2SeqTrainer tests ------------------
SEQ2SEQ_WORDS = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen".split()


def write_t5_word_tokenizer(folder: Any) -> int:
    """T5's special tokens (``<pad>`` 0, ``</s>`` 1, ``<unk>`` 2) and :data:`SEQ2SEQ_WORDS`, as ``tokenizer.json``."""
    import json
    from pathlib import Path

    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    folder = Path(folder)
    specials = ["<pad>", "</s>", "<unk>"]
    vocab = {token: i for i, token in enumerate([*specials, *SEQ2SEQ_WORDS])}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.add_special_tokens(specials)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="$A </s>", pair="$A </s> $B </s>", special_tokens=[("</s>", 1)]
    )
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "pad_token": "<pad>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return len(vocab)


def tiny_t5(vocab_size: int = 3 + len(SEQ2SEQ_WORDS), **overrides: Any) -> Any:
    """A 2-layer T5 (width 32) built with microformers-t5."""
    import microformers

    torch.manual_seed(0)
    config = {
        "vocab_size": vocab_size,
        "d_model": 32,
        "d_kv": 8,
        "d_ff": 64,
        "num_layers": 2,
        "num_heads": 4,
        "relative_attention_num_buckets": 8,
        "pad_token_id": 0,
        "eos_token_id": 1,
        "decoder_start_token_id": 0,
        **overrides,
    }
    return microformers.AutoModelForSeq2SeqLM.from_config(microformers.AutoConfig.for_model("t5", **config))
