"""Gemma 2 decoder, built from SDK layers.

Parameter names equal the reference checkpoint's tensor names (``model.embed_tokens.weight``,
``model.layers.{i}.self_attn.{q,k,v,o}_proj.weight``, ``model.layers.{i}.mlp.{gate,up,down}_proj.weight``,
``model.layers.{i}.{input,post_attention,pre_feedforward,post_feedforward}_layernorm.weight``,
``model.norm.weight``, ``lm_head.weight`` (tied to the embeddings by default), ``score.weight``), so files
load and save without renaming.

One forward pass: embed and multiply by ``sqrt(hidden_size)`` (rounded to the model dtype), compute
the rotary ``cos``/``sin`` once, build one attention mask per distinct window (``Gemma2Model.prepare``:
local layers see the last ``sliding_window`` cache positions, global layers everything), then run
the layers. Each layer is ``x + post_norm(attn(pre_norm(x)))`` then ``x + post_ff_norm(mlp(pre_ff_norm(x)))``
with the ``(1 + weight)`` RMSNorm, a GeGLU MLP, queries scaled by ``query_pre_attn_scalar ** -0.5`` and
attention scores soft-capped (``cap * tanh(score / cap)``) when ``attn_logit_softcapping`` is set. The
final norm and the head follow; the logits are soft-capped by ``final_logit_softcapping``.

Soft-capped attention cannot run in SDPA; with ``attn_logit_softcapping`` set, ``"sdpa"`` and
``"eager"`` both compute it written out (the SDK's ``eager_attention``), and another registered
attention implementation is refused rather than silently dropping the cap.

Caches: a ``DynamicCache`` (the default) or a ``StaticCache`` (``cache_implementation="static"``) keeps every
position; the masks restrict local layers to their window, whether the prompt is longer than the
window or decoding runs past it. The compiled decode step of the Llama plugin is not offered here.
"""

from __future__ import annotations

from typing import Any, ClassVar

import attrs
import torch
from torch import nn

from microformers import PreTrainedModel
from microformers.errors import ConfigError, GenerationError
from microformers_sdk.attention import eager_attention, get_attention_function, sdpa_attention, soft_cap
from microformers_sdk.cache import Cache
from microformers_sdk.decoder_heads import DecoderForCausalLM, DecoderForSequenceClassification, keep_logits_positions
from microformers_sdk.inputs import DecoderInputs, prepare_decoder_inputs
from microformers_sdk.layers import GatedMLP, OffsetRMSNorm, ScaledEmbedding, apply_linear, get_activation
from microformers_sdk.losses import causal_lm_loss
from microformers_sdk.masks import AttentionMask, build_attention_masks
from microformers_sdk.outputs import BaseModelOutputWithPast, CausalLMOutputWithPast
from microformers_sdk.rotary import RotaryEmbedding, apply_rotary_pos_emb

from .configuration_gemma2 import FULL, Gemma2Config

__all__ = [
    "Gemma2Attention",
    "Gemma2Config",
    "Gemma2DecoderLayer",
    "Gemma2ForCausalLM",
    "Gemma2ForSequenceClassification",
    "Gemma2Model",
    "Gemma2PreTrainedModel",
]

Rotary = tuple[torch.Tensor, torch.Tensor]


class Gemma2Attention(nn.Module):
    """Grouped-query attention with rotary positions, ``query_pre_attn_scalar`` scaling and soft-capped scores."""

    def __init__(self, config: Gemma2Config, layer_idx: int) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.layer_type = config.layer_types[layer_idx]
        self.head_dim = config.head_dim
        self.num_heads = config.num_attention_heads
        self.num_key_value_heads = config.num_key_value_heads
        self.scaling = float(config.query_pre_attn_scalar) ** -0.5
        self.attention_dropout = float(config.attention_dropout or 0.0)
        self.sliding_window = config.layer_sliding_window(layer_idx)
        self.softcap = self.score_softcap(config)
        bias = bool(config.attention_bias)
        hidden = config.hidden_size
        self.q_proj = nn.Linear(hidden, self.num_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(hidden, self.num_key_value_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(hidden, self.num_key_value_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, hidden, bias=bias)

    @staticmethod
    def score_softcap(config: Gemma2Config) -> float | None:
        """The cap on attention scores (Gemma 2: ``attn_logit_softcapping``)."""
        cap = config.attn_logit_softcapping
        return None if cap is None else float(cap)

    def project(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Query, key and value heads ``(batch, heads, seq, head_dim)`` before rotary (Gemma 3 adds norms)."""
        batch, q_len, _ = hidden_states.shape
        query = apply_linear(self.q_proj, hidden_states).view(batch, q_len, -1, self.head_dim).transpose(1, 2)
        key = apply_linear(self.k_proj, hidden_states).view(batch, q_len, -1, self.head_dim).transpose(1, 2)
        value = apply_linear(self.v_proj, hidden_states).view(batch, q_len, -1, self.head_dim).transpose(1, 2)
        return query, key, value

    def forward(
        self,
        hidden_states: torch.Tensor,
        rotary: Rotary,
        attention_mask: torch.Tensor | None,
        is_causal: bool,
        past_key_values: Cache | None,
        attention_fn: Any,
        output_attentions: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        batch, q_len, _ = hidden_states.shape
        query, key, value = self.project(hidden_states)
        query, key = apply_rotary_pos_emb(query, key, *rotary)
        if past_key_values is not None:
            key, value = past_key_values.update(key, value, self.layer_idx)
        options: dict[str, Any] = {
            "scaling": self.scaling,
            "dropout": self.attention_dropout if self.training else 0.0,
            "is_causal": is_causal,
        }
        if self.softcap is not None:
            options["softcap"] = self.softcap
        weights = None
        if output_attentions:
            output, weights = eager_attention(query, key, value, attention_mask, return_weights=True, **options)
        else:
            output = attention_fn(query, key, value, attention_mask, **options)
        output = output.transpose(1, 2).reshape(batch, q_len, -1)
        return apply_linear(self.o_proj, output), weights


class Gemma2DecoderLayer(nn.Module):
    """``x + post_attention_norm(attn(input_norm(x)))``, then ``x + post_ff_norm(mlp(pre_ff_norm(x)))``."""

    attention_class: ClassVar[type[Gemma2Attention]] = Gemma2Attention

    def __init__(self, config: Gemma2Config, layer_idx: int) -> None:
        super().__init__()
        hidden, eps = config.hidden_size, config.rms_norm_eps
        self.self_attn = self.attention_class(config, layer_idx)
        self.mlp = GatedMLP(hidden, config.intermediate_size, config.hidden_activation, bias=False)
        self.input_layernorm = OffsetRMSNorm(hidden, eps=eps)
        self.post_attention_layernorm = OffsetRMSNorm(hidden, eps=eps)
        self.pre_feedforward_layernorm = OffsetRMSNorm(hidden, eps=eps)
        self.post_feedforward_layernorm = OffsetRMSNorm(hidden, eps=eps)

    def forward(
        self,
        hidden_states: torch.Tensor,
        rotary: Rotary,
        attention_mask: torch.Tensor | None,
        is_causal: bool,
        past_key_values: Cache | None,
        attention_fn: Any,
        output_attentions: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        attended, weights = self.self_attn(
            self.input_layernorm(hidden_states), rotary, attention_mask, is_causal, past_key_values, attention_fn,
            output_attentions,
        )  # fmt: skip
        hidden_states = hidden_states + self.post_attention_layernorm(attended)
        fed = self.mlp(self.pre_feedforward_layernorm(hidden_states))
        hidden_states = hidden_states + self.post_feedforward_layernorm(fed)
        return hidden_states, weights


class Gemma2PreTrainedModel(PreTrainedModel):
    config_class = Gemma2Config
    base_model_prefix = "model"
    _no_split_modules: ClassVar[list[str]] = ["Gemma2DecoderLayer"]
    supports_gradient_checkpointing = True
    _keys_to_ignore_on_load_unexpected: ClassVar[list[str]] = [r"rotary_emb\.\w*inv_freq"]

    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        if isinstance(module, OffsetRMSNorm):
            nn.init.zeros_(module.weight)  # the norm multiplies by (1 + weight)


@attrs.frozen
class LayerInputs:
    """What every layer of one forward pass shares: rotary tables by layer type, masks by window."""

    rotary: dict[str, Rotary]
    masks: dict[int | None, AttentionMask]
    attention_fn: Any


class Gemma2Model(Gemma2PreTrainedModel):
    """The decoder stack without a head; returns ``BaseModelOutputWithPast``."""

    layer_class: ClassVar[type[Gemma2DecoderLayer]] = Gemma2DecoderLayer

    def __init__(self, config: Gemma2Config) -> None:
        super().__init__(config)
        get_activation(config.hidden_activation, setting="hidden_activation")
        pad = config.pad_token_id
        padding_idx = pad if isinstance(pad, int) and 0 <= pad < config.vocab_size else None
        self.embed_tokens = ScaledEmbedding(
            config.vocab_size, config.hidden_size, padding_idx, embed_scale=config.hidden_size**0.5
        )
        self.layers = nn.ModuleList(self.layer_class(config, i) for i in range(config.num_hidden_layers))
        self.norm = OffsetRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.build_rotary(config)
        self.post_init()

    def build_rotary(self, config: Gemma2Config) -> None:
        """Gemma 2: one rotary embedding for every layer."""
        self.rotary_emb = RotaryEmbedding(config.rope_settings(FULL))

    def rotary_tables(self, position_ids: torch.Tensor, dtype: torch.dtype) -> dict[str, Rotary]:
        """``(cos, sin)`` for each layer type present."""
        tables = self.rotary_emb(position_ids, dtype=dtype)
        return dict.fromkeys(self.config.layer_types, tables)

    def get_input_embeddings(self) -> nn.Module:
        return self.embed_tokens

    def set_input_embeddings(self, value: nn.Module) -> None:
        if type(value) is nn.Embedding:  # e.g. resize_token_embeddings: keep the sqrt(hidden) scale
            scaled = ScaledEmbedding(
                value.num_embeddings, value.embedding_dim, value.padding_idx, embed_scale=self.embed_tokens.embed_scale,
                device="meta",
            )  # fmt: skip
            scaled.weight = value.weight
            value = scaled
        self.embed_tokens = value

    # A copy of LlamaModel.forward (microformers-llama), kept in sync by tests/integration/test_model_copies_in_sync.py
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> BaseModelOutputWithPast | tuple[Any, ...]:
        inputs, layer_inputs = self.prepare(
            input_ids=input_ids,
            inputs_embeds=inputs_embeds,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            use_cache=use_cache,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=return_dict,
        )
        hidden_states, all_hidden_states, all_attentions = self.decode(
            inputs.inputs_embeds, layer_inputs, inputs.cache, inputs.output_attentions, inputs.output_hidden_states
        )
        output = BaseModelOutputWithPast(
            last_hidden_state=hidden_states,
            past_key_values=inputs.cache if inputs.use_cache else None,
            hidden_states=all_hidden_states,
            attentions=all_attentions,
        )
        return output if inputs.return_dict else output.to_tuple()

    def prepare(self, *, attention_mask: torch.Tensor | None, **kwargs: Any) -> tuple[DecoderInputs, LayerInputs]:
        """Scaled embeddings, cache and position ids, rotary tables and one attention mask per window."""
        inputs = prepare_decoder_inputs(self, self.embed_tokens, attention_mask=attention_mask, **kwargs)
        embeds = inputs.inputs_embeds
        rotary = self.rotary_tables(inputs.position_ids, embeds.dtype)
        windows = [layer.self_attn.sliding_window for layer in self.layers]
        masks = build_attention_masks(
            attention_mask, embeds.shape[1], inputs.past_length, windows, device=embeds.device
        )
        return inputs, LayerInputs(rotary, masks, self.attention_function())

    def attention_function(self) -> Any:
        """The configured attention; one that cannot apply the layers' score soft-capping is refused."""
        function = get_attention_function(self.config)
        if function not in (sdpa_attention, eager_attention) and any(
            layer.self_attn.softcap is not None for layer in self.layers
        ):
            raise ConfigError(
                f"attn_implementation={self.config._attn_implementation!r} cannot soft-cap attention scores "
                f"(attn_logit_softcapping={self.config.attn_logit_softcapping}); use attn_implementation='eager' "
                "(or 'sdpa', which computes soft-capped attention written out)"
            )
        return function

    def decode(
        self,
        hidden_states: torch.Tensor,
        layer_inputs: LayerInputs,
        past_key_values: Cache | None,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...] | None, tuple[torch.Tensor, ...] | None]:
        """The decoder layers and the final norm; returns the hidden states and the optional per-layer outputs."""
        all_hidden_states: list[torch.Tensor] = []
        all_attentions: list[torch.Tensor] = []
        for layer in self.layers:
            if output_hidden_states:
                all_hidden_states.append(hidden_states)
            attention = layer.self_attn
            mask, is_causal = layer_inputs.masks[attention.sliding_window]
            hidden_states, weights = self._call_layer(
                layer, hidden_states, layer_inputs.rotary[attention.layer_type], mask, is_causal, past_key_values,
                layer_inputs.attention_fn, output_attentions,
            )  # fmt: skip
            if output_attentions:
                all_attentions.append(weights)
        hidden_states = self.norm(hidden_states)
        if output_hidden_states:
            all_hidden_states.append(hidden_states)
        return (
            hidden_states,
            tuple(all_hidden_states) if output_hidden_states else None,
            tuple(all_attentions) if output_attentions else None,
        )


class Gemma2ForCausalLM(DecoderForCausalLM, Gemma2PreTrainedModel):
    """Decoder plus a language-modelling head (tied to the embeddings by default), logits soft-capped.

    ``make_static_cache`` (from the SDK base) stores every position in every layer; local layers are
    restricted to their window by the mask.
    """

    base_model_class: ClassVar[type[Gemma2Model]] = Gemma2Model
    _tied_weights_keys: ClassVar[dict[str, str]] = {"lm_head.weight": "model.embed_tokens.weight"}

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        labels: torch.LongTensor | None = None,
        output_hidden_states: bool | None = None,
        output_attentions: bool | None = None,
        return_dict: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        **kwargs: Any,
    ) -> CausalLMOutputWithPast | tuple[Any, ...]:
        """``logits_to_keep=n`` computes logits for the last ``n`` positions only (0: all); a tensor picks positions.

        The parameters are ``LlamaForCausalLM.forward``'s, kept in sync by tests/integration/test_model_copies_in_sync.py.
        """
        inputs, layer_inputs = self.model.prepare(
            input_ids=input_ids,
            inputs_embeds=inputs_embeds,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            use_cache=use_cache,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=return_dict,
        )
        hidden_states, all_hidden_states, attentions = self.model.decode(
            inputs.inputs_embeds, layer_inputs, inputs.cache, inputs.output_attentions, inputs.output_hidden_states
        )
        logits = apply_linear(self.lm_head, keep_logits_positions(hidden_states, logits_to_keep))
        logits = soft_cap(logits, self.config.final_logit_softcapping)
        loss = causal_lm_loss(logits, labels, kwargs.get("num_items_in_batch")) if labels is not None else None
        output = CausalLMOutputWithPast(
            loss=loss,
            logits=logits,
            past_key_values=inputs.cache if inputs.use_cache else None,
            hidden_states=all_hidden_states,
            attentions=attentions,
        )
        return output if inputs.return_dict else output.to_tuple()

    @property
    def generation_config(self) -> Any:
        """The model's generation settings; Gemma 2 files' ``cache_implementation: "hybrid"`` means the default cache.

        Gemma 2 checkpoints were published with ``"hybrid"`` (the reference's former sliding-window
        cache) in ``config.json`` and ``generation_config.json``; the reference now decodes them with its
        dynamic cache, and so does this model.
        """
        config = PreTrainedModel.generation_config.fget(self)
        if config.cache_implementation == "hybrid":
            config.cache_implementation = None
        return config

    @generation_config.setter
    def generation_config(self, value: Any) -> None:
        PreTrainedModel.generation_config.fset(self, value)

    def compile_decode_step(self, **compile_options: Any) -> None:
        raise GenerationError(
            f"{type(self).__name__} has no compiled decode step (its local layers' sliding-window masks are built "
            "eagerly per step); drop compile_config and decode eagerly (cache_implementation='static' works)"
        )


class Gemma2ForSequenceClassification(DecoderForSequenceClassification, Gemma2PreTrainedModel):
    """Decoder plus a linear ``score`` head read at each row's last non-padding token."""

    base_model_class: ClassVar[type[Gemma2Model]] = Gemma2Model
