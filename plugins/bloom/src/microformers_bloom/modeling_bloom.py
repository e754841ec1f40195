"""BLOOM decoder (``model_type: bloom``) over the Llama decoder of ``microformers-llama``.

Parameter names equal the checkpoint tensor names of the reference implementation
(``transformer.word_embeddings.weight``, ``transformer.word_embeddings_layernorm.*``,
``transformer.h.{i}.input_layernorm.*``, ``transformer.h.{i}.self_attention.query_key_value.*``,
``transformer.h.{i}.self_attention.dense.*``, ``transformer.h.{i}.post_attention_layernorm.*``,
``transformer.h.{i}.mlp.dense_h_to_4h.*`` / ``dense_4h_to_h.*``, ``transformer.ln_f.*``, ``lm_head.weight``,
``score.weight``), so files load and save without renaming.

Top to bottom: positions are ALiBi, not rotary: each head adds ``slope_h * key_position`` to its scores
(:func:`alibi_slopes`; a per-row constant shift of the reference's padding-aware positions, which softmax
ignores), folded into one additive mask per forward pass (``BloomModel.prepare``), so the SDPA and eager
attention functions and the KV caches (static steps included) are the SDK's. ``BloomAttention`` splits the
fused ``query_key_value`` per head (query, key, value in turn). ``BloomBlock`` is a pre-norm block whose
residuals start from the normed input with ``apply_residual_connection_post_layernorm``. ``BloomModel``
normalises the embeddings (``word_embeddings_layernorm``) and runs Llama's decoder loop under BLOOM's module
names, which the ``embed_tokens`` / ``layers`` / ``norm`` / ``self_attn`` properties expose to it.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import attrs
import torch
import torch.nn.functional as F
from torch import nn

from microformers_llama import LlamaForCausalLM, LlamaForSequenceClassification, LlamaModel, LlamaPreTrainedModel
from microformers_sdk.attention import eager_attention, get_attention_function
from microformers_sdk.cache import Cache
from microformers_sdk.decode_steps import DecodeStepLayout, LayerInputs
from microformers_sdk.inputs import DecoderInputs, prepare_decoder_inputs
from microformers_sdk.layers import apply_linear, get_activation
from microformers_sdk.masks import build_attention_mask
from microformers_sdk.static_steps import DecoderStepShape, static_step_position, visible_storage

from .configuration_bloom import BloomConfig

__all__ = [
    "BloomAttention",
    "BloomBlock",
    "BloomConfig",
    "BloomForCausalLM",
    "BloomForSequenceClassification",
    "BloomMLP",
    "BloomModel",
    "BloomPreTrainedModel",
    "alibi_slopes",
]


def alibi_slopes(num_heads: int) -> torch.Tensor:
    """ALiBi's per-head slopes: a geometric series for the largest power of two of heads, the rest interleaved
    from the next power's series (as the BLOOM paper and the reference define them)."""
    closest = 2 ** math.floor(math.log2(num_heads))
    base = 2 ** (-(2 ** -(math.log2(closest) - 3)))
    slopes = torch.pow(torch.tensor(base, dtype=torch.float32), torch.arange(1, 1 + closest, dtype=torch.int32))
    if closest != num_heads:
        extra_base = 2 ** (-(2 ** -(math.log2(2 * closest) - 3)))
        remaining = min(closest, num_heads - closest)
        powers = torch.arange(1, 1 + 2 * remaining, 2, dtype=torch.int32)
        slopes = torch.cat([slopes, torch.pow(torch.tensor(extra_base, dtype=torch.float32), powers)])
    return slopes


def _dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    return F.dropout(x, p, training=True) if training and p > 0 else x


class BloomAttention(nn.Module):
    """Multi-head self-attention over a fused per-head ``query_key_value``; positions come in the ALiBi mask."""

    def __init__(self, config: BloomConfig, layer_idx: int) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.num_heads = config.n_head
        self.head_dim = config.head_dim
        self.scaling = self.head_dim**-0.5
        self.sliding_window = None
        self.attention_dropout = float(config.attention_dropout or 0.0)
        self.query_key_value = nn.Linear(config.hidden_size, 3 * config.hidden_size)
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor,
        past_key_values: Cache | None,
        attention_fn: Any,
        output_attentions: bool = False,
        cache_position: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        batch, q_len, _ = hidden_states.shape
        qkv = apply_linear(self.query_key_value, hidden_states).view(batch, q_len, self.num_heads, 3, self.head_dim)
        query, key, value = (qkv[..., i, :].transpose(1, 2) for i in range(3))
        if cache_position is not None:  # static step: write into the storage, attend over all of it
            key_storage, value_storage = past_key_values.layer_storage(self.layer_idx)
            key_storage.index_copy_(2, cache_position, key)
            value_storage.index_copy_(2, cache_position, value)
            key, value = key_storage, value_storage
        elif past_key_values is not None:
            key, value = past_key_values.update(key, value, self.layer_idx)
        dropout = self.attention_dropout if self.training else 0.0
        weights = None
        if output_attentions:
            output, weights = eager_attention(
                query, key, value, attention_mask, scaling=self.scaling, dropout=dropout, is_causal=False,
                return_weights=True,
            )  # fmt: skip
        else:
            output = attention_fn(
                query, key, value, attention_mask, scaling=self.scaling, dropout=dropout, is_causal=False
            )
        return apply_linear(self.dense, output.transpose(1, 2).reshape(batch, q_len, -1)), weights


class BloomMLP(nn.Module):
    """``dense_4h_to_h(gelu(dense_h_to_4h(x)))`` with the tanh GELU."""

    def __init__(self, config: BloomConfig) -> None:
        super().__init__()
        self.dense_h_to_4h = nn.Linear(config.hidden_size, 4 * config.hidden_size)
        self.gelu_impl = get_activation("gelu_pytorch_tanh")
        self.dense_4h_to_h = nn.Linear(4 * config.hidden_size, config.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return apply_linear(self.dense_4h_to_h, self.gelu_impl(apply_linear(self.dense_h_to_4h, x)))


class BloomBlock(nn.Module):
    """``h = r1 + dropout(attn(ln1(x)))``, ``h2 = r2 + dropout(mlp(ln2(h)))``; the residuals ``r`` are the block
    inputs, or the normed ones with ``apply_residual_connection_post_layernorm``."""

    def __init__(self, config: BloomConfig, layer_idx: int) -> None:
        super().__init__()
        eps = config.layer_norm_epsilon
        self.input_layernorm = nn.LayerNorm(config.hidden_size, eps=eps)
        self.self_attention = BloomAttention(config, layer_idx)
        self.post_attention_layernorm = nn.LayerNorm(config.hidden_size, eps=eps)
        self.mlp = BloomMLP(config)
        self.post_layernorm_residual = bool(config.apply_residual_connection_post_layernorm)
        self.hidden_dropout = float(config.hidden_dropout or 0.0)

    @property
    def self_attn(self) -> BloomAttention:
        """Llama's name for the attention module (its decoder reads the window from it)."""
        return self.self_attention

    def forward(
        self,
        hidden_states: torch.Tensor,
        rotary: None,
        attention_mask: torch.Tensor,
        is_causal: bool,
        past_key_values: Cache | None,
        attention_fn: Any,
        output_attentions: bool = False,
        cache_position: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        normed = self.input_layernorm(hidden_states)
        residual = normed if self.post_layernorm_residual else hidden_states
        attended, weights = self.self_attention(
            normed, attention_mask, past_key_values, attention_fn, output_attentions, cache_position
        )
        hidden_states = residual + _dropout(attended, self.hidden_dropout, self.training)
        normed = self.post_attention_layernorm(hidden_states)
        residual = normed if self.post_layernorm_residual else hidden_states
        return residual + _dropout(self.mlp(normed), self.hidden_dropout, self.training), weights


class BloomPreTrainedModel(LlamaPreTrainedModel):
    config_class = BloomConfig
    base_model_prefix = "transformer"
    _no_split_modules: ClassVar[list[str]] = ["BloomBlock"]


class BloomModel(LlamaModel, BloomPreTrainedModel):
    """The decoder stack without a head (Llama's decoder loop over BLOOM blocks); returns ``BaseModelOutputWithPast``."""

    layer_class: ClassVar[type[nn.Module]] = BloomBlock

    def __init__(self, config: BloomConfig) -> None:
        BloomPreTrainedModel.__init__(self, config)  # not LlamaModel.__init__: BLOOM's names, norms and positions
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.word_embeddings_layernorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_epsilon)
        self.h = nn.ModuleList(self.layer_class(config, i) for i in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_epsilon)
        self.post_init()

    # Llama's names for BLOOM's modules (its forward/decode read them)
    @property
    def embed_tokens(self) -> nn.Embedding:
        return self.word_embeddings

    @property
    def layers(self) -> nn.ModuleList:
        return self.h

    @property
    def norm(self) -> nn.LayerNorm:
        return self.ln_f

    def get_input_embeddings(self) -> nn.Module:
        return self.word_embeddings

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.word_embeddings = value

    def prepare(self, *, attention_mask: torch.Tensor | None, **kwargs: Any) -> tuple[DecoderInputs, LayerInputs]:
        """Normed embeddings, cache and one additive mask: ALiBi biases where a query may attend, the minimum elsewhere."""
        inputs = prepare_decoder_inputs(self, self.word_embeddings, attention_mask=attention_mask, **kwargs)
        embeds = self.word_embeddings_layernorm(inputs.inputs_embeds)
        inputs = attrs.evolve(inputs, inputs_embeds=embeds)
        cache, q_len, past = inputs.cache, embeds.shape[1], inputs.past_length
        cache_position = static_step_position(cache, embeds, {None}, len(self.h))
        if cache_position is not None:
            allowed = visible_storage(cache.max_cache_len, past, attention_mask, embeds)
        else:
            allowed, _ = build_attention_mask(attention_mask, q_len, past, device=embeds.device)
            if allowed is None:  # no padding: plain causality (one new token sees everything)
                kv = past + q_len
                allowed = torch.ones(q_len, kv, dtype=torch.bool, device=embeds.device).tril(kv - q_len)[None, None]
        kv_length = allowed.shape[-1]
        slopes = alibi_slopes(self.config.n_head).to(embeds.device)
        bias = slopes[:, None] * torch.arange(kv_length, device=embeds.device, dtype=torch.float32)
        mask = bias[None, :, None, :].to(embeds.dtype).masked_fill(~allowed.bool(), torch.finfo(embeds.dtype).min)
        attention_fn = get_attention_function(self.config)
        return inputs, LayerInputs(None, {None: (mask, False)}, cache_position, attention_fn)


class BloomForCausalLM(LlamaForCausalLM, BloomPreTrainedModel):
    """Decoder (``transformer``) plus a language-modelling head (``lm_head``, tied to the embeddings by default)."""

    base_model_class: ClassVar[type[nn.Module]] = BloomModel
    decoder_attribute: ClassVar[str] = "transformer"
    _tied_weights_keys: ClassVar[dict[str, str]] = {"lm_head.weight": "transformer.word_embeddings.weight"}

    @property
    def model(self) -> BloomModel:
        """Llama's name for the decoder (its forward calls it)."""
        return self.transformer

    def decode_step_layout(self) -> DecodeStepLayout:
        """The decoder as a static step runs it (every block through its own forward: no native step)."""
        config, layers = self.config, self.transformer.h
        shape = DecoderStepShape(config.n_head, config.n_head, config.head_dim, config.head_dim**-0.5)
        return DecodeStepLayout(layers, self.transformer.ln_f, self.lm_head, shape, [None] * len(layers))


class BloomForSequenceClassification(LlamaForSequenceClassification, BloomPreTrainedModel):
    """Decoder plus a linear ``score`` head read at each row's last non-padding token."""

    base_model_class: ClassVar[type[nn.Module]] = BloomModel
    decoder_attribute: ClassVar[str] = "transformer"
