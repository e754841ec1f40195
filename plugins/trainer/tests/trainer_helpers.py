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
