"""microformers-sdk: what model plugins are built from.

Layers (``RMSNorm``, ``GatedMLP``), rotary position embeddings (``RotaryEmbedding`` with default,
linear, dynamic NTK, YaRN, llama3 and LongRoPE scaling), attention through
``torch.nn.functional.scaled_dot_product_attention`` (``sdpa_attention``, ``eager_attention``,
``get_attention_function``), masks and position ids (``build_attention_mask``,
``position_ids_from_attention_mask``), KV caches (``DynamicCache``, ``StaticCache``) and
checkpoint-name helpers (``KeyRenamer``), and mixture-of-experts routing (``SparseMoeBlock``,
``TopKRouter``, ``run_experts``, ``load_balancing_loss``).

Importing this package is cheap: submodules (and torch) load on first attribute access, so the
entry-point module ``microformers_sdk.plugin`` can be imported at discovery time for free.
"""

from __future__ import annotations

from microformers.lazy import lazy_exports

__version__ = "0.1.0"

_LAZY: dict[str, str] = {
    "RMSNorm": "layers",
    "GatedMLP": "layers",
    "FusedGatedMLP": "layers",
    "OffsetRMSNorm": "layers",
    "ScaledEmbedding": "layers",
    "ACTIVATIONS": "layers",
    "get_activation": "layers",
    "PackedLinear": "packed",
    "pack_linear_weights": "packed",
    "RotaryEmbedding": "rotary",
    "RopeSettings": "rope_settings",
    "SUPPORTED_ROPE_TYPES": "rope_settings",
    "apply_rotary_pos_emb": "rotary",
    "compute_inv_freq": "rotary",
    "normalize_rope_settings": "rope_settings",
    "rope_settings_from_config": "rope_settings",
    "rotate_half": "rotary",
    "eager_attention": "attention",
    "get_attention_function": "attention",
    "repeat_kv": "attention",
    "sdpa_attention": "attention",
    "soft_cap": "attention",
    "AttentionMask": "masks",
    "build_attention_mask": "masks",
    "build_attention_masks": "masks",
    "position_ids_from_attention_mask": "masks",
    "Cache": "cache",
    "DynamicCache": "cache",
    "StaticCache": "cache",
    "EncoderDecoderCache": "seq2seq",
    "Seq2SeqLMMixin": "seq2seq",
    "as_encoder_decoder_cache": "seq2seq",
    "shift_tokens_right": "seq2seq",
    "KeyRenamer": "weights",
    "check_checkpoint_keys": "weights",
    "Quantizer": "quantization",
    "ConvertingSource": "quantization",
    "SparseMoeBlock": "moe",
    "TopKRouter": "moe",
    "run_experts": "moe",
    "load_balancing_loss": "moe",
    "FusedExpertsSource": "moe",
    "check_expert_counts": "moe",
    "DecoderHead": "decoder_heads",
    "DecoderForCausalLM": "decoder_heads",
    "MoeDecoderForCausalLM": "decoder_heads",
    "MoeDecoderModel": "decoder_heads",
    "DecoderForSequenceClassification": "decoder_heads",
    "keep_logits_positions": "decoder_heads",
    "pool_last_tokens": "decoder_heads",
}

__all__ = ["__version__", *_LAZY]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
