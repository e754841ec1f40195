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
    "t5": (
        "t5", "AutoModelForSeq2SeqLM",
        {"vocab_size": VOCAB, "d_model": 32, "d_kv": 8, "d_ff": 48, "num_layers": 2, "num_heads": 4,
         "relative_attention_num_buckets": 8, "relative_attention_max_distance": 16, "pad_token_id": 0,
         "eos_token_id": 2, "decoder_start_token_id": 0},
    ),
    "bart": (
        "bart", "AutoModelForSeq2SeqLM",
        {"vocab_size": VOCAB, "d_model": 32, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4,
         "decoder_attention_heads": 4, "encoder_ffn_dim": 40, "decoder_ffn_dim": 48, "max_position_embeddings": 48,
         "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2, "decoder_start_token_id": 2,
         "forced_eos_token_id": None},
    ),
    "marian": (
        "marian", "AutoModelForSeq2SeqLM",
        {"vocab_size": VOCAB, "d_model": 32, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4,
         "decoder_attention_heads": 4, "encoder_ffn_dim": 40, "decoder_ffn_dim": 48, "max_position_embeddings": 48,
         "pad_token_id": 0, "eos_token_id": 2, "decoder_start_token_id": 0, "forced_eos_token_id": None},
    ),
    "whisper": (
        "whisper", "AutoModelForSpeechSeq2Seq",
        {"vocab_size": VOCAB, "num_mel_bins": 8, "d_model": 32, "encoder_layers": 2, "decoder_layers": 2,
         "encoder_attention_heads": 4, "decoder_attention_heads": 4, "encoder_ffn_dim": 40, "decoder_ffn_dim": 48,
         "max_source_positions": 10, "max_target_positions": 32, "pad_token_id": 0, "bos_token_id": 1,
         "eos_token_id": 2, "decoder_start_token_id": 1, "begin_suppress_tokens": None, "suppress_tokens": None},
    ),
    "vit": (
        "vit", "AutoModelForImageClassification",
        {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 37,
         "image_size": 16, "patch_size": 4, "num_labels": 5},
    ),
    "dinov2": (
        "dinov2", "AutoModel",
        {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "mlp_ratio": 2, "image_size": 16,
         "patch_size": 4},
    ),
}

CAUSAL = [name for name, (_, head, _) in FAMILIES.items() if head == "AutoModelForCausalLM"]
SEQ2SEQ = [name for name, (_, head, _) in FAMILIES.items() if head in ("AutoModelForSeq2SeqLM", "AutoModelForSpeechSeq2Seq")]


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
    """CPU inputs for the family: token ids (no special ids), a waveform, log-mel features or pixels; encoder-decoder
    families also get decoder ids."""
    generator = torch.Generator().manual_seed(seed)
    if family == "wav2vec2":
        return {"input_values": torch.randn(batch, 1600, generator=generator)}
    if family in ("vit", "dinov2"):
        return {"pixel_values": torch.randn(batch, 3, 16, 16, generator=generator)}
    if family == "whisper":
        inputs: dict[str, torch.Tensor] = {"input_features": torch.randn(batch, 8, 20, generator=generator)}
    else:
        ids = torch.randint(3, VOCAB, (batch, length), generator=generator)
        inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if family in SEQ2SEQ:
        inputs["decoder_input_ids"] = torch.randint(3, VOCAB, (batch, 5), generator=generator)
    return inputs


def encoder_inputs(family: str, batch: int = 1, seed: int = 0) -> dict[str, torch.Tensor]:
    """What an encoder-decoder family's ``generate`` takes: the inputs without decoder ids."""
    inputs = tiny_inputs(family, batch=batch, seed=seed)
    inputs.pop("decoder_input_ids")
    return inputs


def main_output(outputs: Any) -> torch.Tensor:
    logits = getattr(outputs, "logits", None)
    return logits if logits is not None else outputs.last_hidden_state
