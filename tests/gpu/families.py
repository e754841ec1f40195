"""Tiny random models of every installed model family, with inputs, for the CUDA-vs-CPU checks.

Each entry: model_type, the Auto class, config values, and the kind of input the model takes.
"""

from __future__ import annotations

from typing import Any

import torch

import microformers

VOCAB = 96
DECODER = {
    "vocab_size": VOCAB, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 128,
    "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
}  # fmt: skip
ENCODER = {
    "vocab_size": VOCAB, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
    "intermediate_size": 37, "max_position_embeddings": 64, "pad_token_id": 0,
}  # fmt: skip

FAMILIES: dict[str, tuple[str, str, dict[str, Any]]] = {
    # name: (model_type, Auto class, config values)
    "llama": ("llama", "AutoModelForCausalLM", DECODER),
    "gemma2": ("gemma2", "AutoModelForCausalLM", {**DECODER, "head_dim": 16}),
    "gemma3_text": ("gemma3_text", "AutoModelForCausalLM", {**DECODER, "head_dim": 16}),
    "qwen3": ("qwen3", "AutoModelForCausalLM", {**DECODER, "head_dim": 16}),
    "phi3": ("phi3", "AutoModelForCausalLM", DECODER),
    "mixtral": ("mixtral", "AutoModelForCausalLM", {**DECODER, "num_local_experts": 4, "num_experts_per_tok": 2}),
    "qwen2_moe": (
        "qwen2_moe", "AutoModelForCausalLM",
        {**DECODER, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
         "shared_expert_intermediate_size": 48},
    ),
    "gpt2": (
        "gpt2", "AutoModelForCausalLM",
        {"vocab_size": VOCAB, "n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 128, "bos_token_id": 1,
         "eos_token_id": 2},
    ),
    "bert": ("bert", "AutoModelForMaskedLM", ENCODER),
    "roberta": ("roberta", "AutoModelForMaskedLM", {**ENCODER, "pad_token_id": 1, "max_position_embeddings": 66}),
    "distilbert": (
        "distilbert", "AutoModelForMaskedLM",
        {"vocab_size": VOCAB, "dim": 32, "n_layers": 2, "n_heads": 4, "hidden_dim": 37, "max_position_embeddings": 64,
         "pad_token_id": 0},
    ),
    "wav2vec2": (
        "wav2vec2", "AutoModel",
        {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 37,
         "conv_dim": [16, 16], "conv_stride": [5, 2], "conv_kernel": [10, 3], "num_conv_pos_embeddings": 16,
         "num_conv_pos_embedding_groups": 2, "vocab_size": 32},
    ),
}

CAUSAL = [name for name, (_, head, _) in FAMILIES.items() if head == "AutoModelForCausalLM"]


def tiny_model(family: str, seed: int = 0) -> Any:
    """The family's tiny model, float32, random weights (a wide spread: clear-cut greedy choices), eval mode."""
    model_type, head, values = FAMILIES[family]
    config = microformers.AutoConfig.for_model(model_type, **values)
    torch.manual_seed(seed)
    model = getattr(microformers, head).from_config(config)
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(0.0, 0.1)
    return model.eval()


def tiny_inputs(family: str, batch: int = 2, length: int = 9, seed: int = 0) -> dict[str, torch.Tensor]:
    """CPU inputs for the family: token ids (no special ids) or, for audio, a waveform."""
    generator = torch.Generator().manual_seed(seed)
    if family == "wav2vec2":
        return {"input_values": torch.randn(batch, 1600, generator=generator)}
    ids = torch.randint(3, VOCAB, (batch, length), generator=generator)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def main_output(outputs: Any) -> torch.Tensor:
    logits = getattr(outputs, "logits", None)
    return logits if logits is not None else outputs.last_hidden_state
