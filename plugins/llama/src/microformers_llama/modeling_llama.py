"""Llama-family decoder (Llama, and through small subclasses Mistral and Qwen2).

Parameter names equal the checkpoint tensor names of the reference implementation
(``model.embed_tokens.weight``, ``model.layers.{i}.self_attn.q_proj.weight``, ``model.layers.{i}.mlp.gate_proj.weight``,
``model.norm.weight``, ``lm_head.weight``, ``score.weight``), so files load and save without renaming.

One forward pass: embed, compute the rotary ``cos``/``sin`` once from the position ids, build one
attention mask per distinct sliding window (``LlamaModel.prepare``), run the decoder layers (pre-norm
attention and SwiGLU MLP with residuals) and the final RMSNorm (``LlamaModel.decode``), then the head.

A token fed into a prefilled ``StaticCache`` is a *static step*: attention writes its key/value into
the preallocated storage at ``cache_position`` and attends over the whole capacity, the positions not
written yet masked out. Every step then has the same shapes, so ``compile_decode_step()`` is simply
``torch.compile`` of the same ``decode`` + head the eager forward runs (as gpt-fast does). Its other
forms (one compiled layer step shared by every layer, a native step for quantized layers) are the
SDK's runners (:mod:`microformers_sdk.decode_steps`), which run these layers' own forward or read
the decoder as ``LlamaForCausalLM.decode_step_layout`` describes it.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn

from microformers import PreTrainedModel
from microformers_sdk.attention import eager_attention, get_attention_function
from microformers_sdk.cache import Cache
from microformers_sdk.decode_steps import (
    DecodeStepLayout,
    LayerInputs,
    compile_decode_step,
    uncompile_decode_step,
)
from microformers_sdk.decoder_heads import DecoderForCausalLM, DecoderForSequenceClassification, keep_logits_positions
from microformers_sdk.inputs import DecoderInputs, prepare_decoder_inputs
from microformers_sdk.layers import GatedMLP, RMSNorm, apply_linear, apply_linears, get_activation
from microformers_sdk.losses import causal_lm_loss
from microformers_sdk.masks import build_attention_mask
from microformers_sdk.outputs import BaseModelOutputWithPast, CausalLMOutputWithPast
from microformers_sdk.rotary import RotaryEmbedding, apply_rotary, apply_rotary_pos_emb, rope_settings_from_config
from microformers_sdk.static_steps import (
    DecoderLayerParts,
    DecoderStepShape,
    one_query_attention,
    static_step_position,
    visible_storage,
)

from .configuration_llama import LlamaConfig

__all__ = [
    "LlamaAttention",
    "LlamaConfig",
    "LlamaDecoderLayer",
    "LlamaForCausalLM",
    "LlamaForSequenceClassification",
    "LlamaModel",
    "LlamaPreTrainedModel",
]


class LlamaAttention(nn.Module):
    """Grouped-query self-attention with rotary positions; the kernel is chosen by ``attn_implementation``."""

    def __init__(self, config: LlamaConfig, layer_idx: int) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.head_dim = config.head_dim
        self.num_heads = config.num_attention_heads
        self.num_key_value_heads = config.num_key_value_heads
        self.scaling = self.head_dim**-0.5
        self.attention_dropout = float(config.attention_dropout or 0.0)
        self.sliding_window = config.layer_sliding_window(layer_idx)
        qkv_bias, output_bias = config.layer_attention_bias()
        hidden = config.hidden_size
        self.q_proj = nn.Linear(hidden, self.num_heads * self.head_dim, bias=qkv_bias)
        self.k_proj = nn.Linear(hidden, self.num_key_value_heads * self.head_dim, bias=qkv_bias)
        self.v_proj = nn.Linear(hidden, self.num_key_value_heads * self.head_dim, bias=qkv_bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, hidden, bias=output_bias)

    def forward(
        self,
        hidden_states: torch.Tensor,
        rotary: tuple[torch.Tensor, torch.Tensor],
        attention_mask: torch.Tensor | None,
        is_causal: bool,
        past_key_values: Cache | None,
        attention_fn: Any,
        output_attentions: bool = False,
        cache_position: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        batch, q_len, _ = hidden_states.shape
        query, key, value = self.project(hidden_states)
        query, key = apply_rotary_pos_emb(query, key, *rotary)
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
                query, key, value, attention_mask, scaling=self.scaling, dropout=dropout, is_causal=is_causal,
                return_weights=True,
            )  # fmt: skip
        elif cache_position is not None and q_len == 1:
            output = one_query_attention(query, key, value, attention_mask, self.scaling)
        else:
            output = attention_fn(
                query, key, value, attention_mask, scaling=self.scaling, dropout=dropout, is_causal=is_causal
            )
        output = output.transpose(1, 2).reshape(batch, q_len, -1)
        return apply_linear(self.o_proj, output), weights

    def project(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Query, key and value heads ``(batch, heads, seq, head_dim)`` before rotary (variants add per-head norms)."""
        batch, q_len, _ = hidden_states.shape
        query, key, value = (
            projected.view(batch, q_len, -1, self.head_dim).transpose(1, 2)
            for projected in apply_linears((self.q_proj, self.k_proj, self.v_proj), hidden_states)
        )
        return query, key, value


class LlamaDecoderLayer(nn.Module):
    """Pre-norm block: ``x + attn(norm(x))`` then ``x + mlp(norm(x))``.

    ``Phi3DecoderLayer.forward`` (microformers-phi3) copies this forward with residual dropout added; it is
    kept in sync with this one by tests/integration/test_model_copies_in_sync.py.
    """

    attention_class: ClassVar[type[LlamaAttention]] = LlamaAttention

    def __init__(self, config: LlamaConfig, layer_idx: int) -> None:
        super().__init__()
        self.self_attn = self.attention_class(config, layer_idx)
        self.mlp = GatedMLP(config.hidden_size, config.intermediate_size, config.hidden_act, bias=config.mlp_bias)
        self.input_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(
        self,
        hidden_states: torch.Tensor,
        rotary: tuple[torch.Tensor, torch.Tensor],
        attention_mask: torch.Tensor | None,
        is_causal: bool,
        past_key_values: Cache | None,
        attention_fn: Any,
        output_attentions: bool = False,
        cache_position: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        attended, weights = self.self_attn(
            self.input_layernorm(hidden_states),
            rotary,
            attention_mask,
            is_causal,
            past_key_values,
            attention_fn,
            output_attentions,
            cache_position,
        )
        hidden_states = hidden_states + attended
        hidden_states = hidden_states + self.mlp(self.post_attention_layernorm(hidden_states))
        return hidden_states, weights

    def step_parts(self) -> DecoderLayerParts | None:
        """This layer as a native decode step reads it, in the order :meth:`forward` runs it (input norm,
        q/k/v and output projections, post-attention norm, SiLU-gated MLP); None where a subclass or
        module computes something else."""
        attention, mlp = self.self_attn, self.mlp
        if (
            type(self).forward is not LlamaDecoderLayer.forward
            or type(attention).forward is not LlamaAttention.forward
            or type(attention).project is not LlamaAttention.project
            or type(mlp) is not GatedMLP
            or mlp.act_fn is not get_activation("silu")
        ):
            return None
        return DecoderLayerParts(
            self.input_layernorm, attention.q_proj, attention.k_proj, attention.v_proj, attention.o_proj,
            self.post_attention_layernorm, mlp.gate_proj, mlp.up_proj, mlp.down_proj,
        )  # fmt: skip


class LlamaPreTrainedModel(PreTrainedModel):
    config_class = LlamaConfig
    base_model_prefix = "model"
    _no_split_modules: ClassVar[list[str]] = ["LlamaDecoderLayer"]
    supports_gradient_checkpointing = True
    # Llama-family checkpoints written by older exporters carry the rotary tables; they are recomputed.
    _keys_to_ignore_on_load_unexpected: ClassVar[list[str]] = [r"rotary_emb\.inv_freq"]


class LlamaModel(LlamaPreTrainedModel):
    """The decoder stack without a head; returns ``BaseModelOutputWithPast``."""

    layer_class: ClassVar[type[LlamaDecoderLayer]] = LlamaDecoderLayer

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__(config)
        pad = config.pad_token_id
        padding_idx = pad if isinstance(pad, int) and 0 <= pad < config.vocab_size else None
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx)
        self.layers = nn.ModuleList(self.layer_class(config, i) for i in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.rotary_emb = RotaryEmbedding(rope_settings_from_config(config, head_dim=config.head_dim))
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.embed_tokens

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.embed_tokens = value

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
        layer_inputs.advance(inputs.cache, inputs.inputs_embeds.shape[1])
        output = BaseModelOutputWithPast(
            last_hidden_state=hidden_states,
            past_key_values=inputs.cache if inputs.use_cache else None,
            hidden_states=all_hidden_states,
            attentions=all_attentions,
        )
        return output if inputs.return_dict else output.to_tuple()

    def prepare(self, *, attention_mask: torch.Tensor | None, **kwargs: Any) -> tuple[DecoderInputs, LayerInputs]:
        """Embeddings, cache and position ids (``prepare_decoder_inputs``), rotary tables and attention masks."""
        inputs = prepare_decoder_inputs(self, self.embed_tokens, attention_mask=attention_mask, **kwargs)
        embeds, cache = inputs.inputs_embeds, inputs.cache
        rotary = self.rotary_emb(inputs.position_ids, dtype=embeds.dtype)
        windows = {layer.self_attn.sliding_window for layer in self.layers}
        cache_position = static_step_position(cache, embeds, windows, len(self.layers))
        if cache_position is not None:
            visible = visible_storage(cache.max_cache_len, inputs.past_length, attention_mask, embeds)
            masks = dict.fromkeys(windows, (visible, False))
        else:
            masks = {
                window: build_attention_mask(
                    attention_mask, embeds.shape[1], inputs.past_length, sliding_window=window, device=embeds.device
                )
                for window in windows
            }
        return inputs, LayerInputs(rotary, masks, cache_position, get_attention_function(self.config))

    def decode(
        self,
        hidden_states: torch.Tensor,
        layer_inputs: LayerInputs,
        past_key_values: Cache | None,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
        keep_last: int = 0,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...] | None, tuple[torch.Tensor, ...] | None]:
        """The decoder layers and the final norm; returns the hidden states and the optional per-layer outputs.

        ``keep_last=n > 0`` says only the last ``n`` positions of the result are wanted (a head with
        ``logits_to_keep=n``): the last layer then computes keys and values for every position (the cache
        needs them) but its attention output, residual and MLP for those ``n`` only, and the hidden
        states returned have ``n`` positions. Where that cannot apply (per-layer outputs asked for,
        training, a layer that is not Llama's own computation, hooks) every position is computed.
        """
        rotary, cache_position = layer_inputs.rotary, layer_inputs.cache_position
        all_hidden_states: list[torch.Tensor] = []
        all_attentions: list[torch.Tensor] = []
        last = len(self.layers) - 1
        for index, layer in enumerate(self.layers):
            if output_hidden_states:
                all_hidden_states.append(hidden_states)
            mask, is_causal = layer_inputs.masks[layer.self_attn.sliding_window]
            if (
                index == last
                and 0 < keep_last < hidden_states.shape[1]
                and cache_position is None
                and not (output_attentions or output_hidden_states or self.training)
                and _computes_last_positions_only(layer)
            ):
                hidden_states = _last_positions_layer(
                    layer, hidden_states, rotary, mask, is_causal, past_key_values, layer_inputs.attention_fn,
                    keep_last,
                )  # fmt: skip
                continue
            hidden_states, weights = self._call_layer(
                layer, hidden_states, rotary, mask, is_causal, past_key_values, layer_inputs.attention_fn, output_attentions,
                cache_position,
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


def _computes_last_positions_only(layer: nn.Module) -> bool:
    """Whether ``layer`` is Llama's own layer computation (variants may override ``project``), with no hooks
    that calling its parts directly would skip."""
    attention = getattr(layer, "self_attn", None)
    return (
        type(layer).forward is LlamaDecoderLayer.forward
        and isinstance(attention, LlamaAttention)
        and type(attention).forward is LlamaAttention.forward
        and not any(module._forward_hooks or module._forward_pre_hooks for module in (layer, attention))
        and not (nn.modules.module._global_forward_hooks or nn.modules.module._global_forward_pre_hooks)
    )


def _last_positions_layer(
    layer: LlamaDecoderLayer,
    hidden_states: torch.Tensor,
    rotary: tuple[torch.Tensor, torch.Tensor],
    attention_mask: torch.Tensor | None,
    is_causal: bool,
    past_key_values: Cache | None,
    attention_fn: Any,
    keep: int,
) -> torch.Tensor:
    """``layer(...)`` (eager, no cache position) restricted to the last ``keep`` positions of its output: keys and
    values for every position go to the cache, the rest is computed for the kept queries only."""
    attention = layer.self_attn
    batch = hidden_states.shape[0]
    query, key, value = attention.project(layer.input_layernorm(hidden_states))
    cos, sin = rotary
    query = apply_rotary(query[:, :, -keep:], cos[:, -keep:], sin[:, -keep:])
    key = apply_rotary(key, cos, sin)
    if past_key_values is not None:
        key, value = past_key_values.update(key, value, attention.layer_idx)
    if attention_mask is not None:
        attention_mask = attention_mask[..., -keep:, :]
    elif is_causal and keep > 1:  # the kept queries are the last ones: causality aligned to the end of the keys
        kv_length = key.shape[2]
        attention_mask = torch.ones(keep, kv_length, dtype=torch.bool, device=key.device).tril(kv_length - keep)
    output = attention_fn(query, key, value, attention_mask, scaling=attention.scaling, dropout=0.0, is_causal=False)
    output = output.transpose(1, 2).reshape(batch, keep, -1)
    hidden_states = hidden_states[:, -keep:] + apply_linear(attention.o_proj, output)
    return hidden_states + layer.mlp(layer.post_attention_layernorm(hidden_states))


class LlamaForCausalLM(DecoderForCausalLM, LlamaPreTrainedModel):
    """Decoder plus a language-modelling head (``lm_head``, tied to the embeddings when configured)."""

    base_model_class: ClassVar[type[LlamaModel]] = LlamaModel
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
        """``logits_to_keep=n`` computes logits for the last ``n`` positions only (0: all); a tensor picks positions."""
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
        flags = (inputs.output_attentions, inputs.output_hidden_states)
        run = self.logits
        compiled = self.__dict__.get("_compiled_decode_step")
        embeds = inputs.inputs_embeds
        prompt = None
        if compiled is not None and labels is None and not any(flags):
            if layer_inputs.cache_position is not None:
                run = compiled  # the same function, compiled: one graph per batch size and cache length
            elif isinstance(logits_to_keep, int) and logits_to_keep == 1 and hasattr(compiled, "prompt"):
                # a native step also takes a prompt whose last logits are all that is wanted (generate's)
                windows = tuple(layer_inputs.masks)
                prompt = compiled.prompt(
                    embeds, layer_inputs.rotary, inputs.cache, inputs.past_length, attention_mask, windows
                )
        if prompt is not None:
            logits, hidden_states, attentions = prompt, None, None
        else:
            logits, hidden_states, attentions = run(embeds, layer_inputs, inputs.cache, *flags, logits_to_keep)
            layer_inputs.advance(inputs.cache, inputs.inputs_embeds.shape[1])
        loss = causal_lm_loss(logits, labels, kwargs.get("num_items_in_batch")) if labels is not None else None
        output = CausalLMOutputWithPast(
            loss=loss,
            logits=logits,
            past_key_values=inputs.cache if inputs.use_cache else None,
            hidden_states=hidden_states,
            attentions=attentions,
        )
        return output if inputs.return_dict else output.to_tuple()

    def logits(
        self,
        inputs_embeds: torch.Tensor,
        layer_inputs: LayerInputs,
        past_key_values: Cache | None,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
        logits_to_keep: int | torch.Tensor = 0,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...] | None, tuple[torch.Tensor, ...] | None]:
        """The decoder and the head: what ``forward`` runs after preparing its inputs, and what is compiled."""
        keep_last = logits_to_keep if isinstance(logits_to_keep, int) and logits_to_keep > 0 else 0
        hidden_states, all_hidden_states, attentions = self.model.decode(
            inputs_embeds, layer_inputs, past_key_values, output_attentions, output_hidden_states, keep_last
        )
        logits = apply_linear(self.lm_head, keep_logits_positions(hidden_states, logits_to_keep))
        return logits, all_hidden_states, attentions

    # -- the static decode step (the SDK's runner: compiled whole, per layer, or native) ----------
    def decode_step_layout(self) -> DecodeStepLayout:
        """The decoder as a static step runs it: every layer in order (each described for a native step
        where it is Llama's own computation), then the final norm and the head."""
        config, layers = self.config, self.model.layers
        shape = DecoderStepShape(
            config.num_attention_heads, config.num_key_value_heads, config.head_dim, config.head_dim**-0.5
        )
        parts = [layer.step_parts() if isinstance(layer, LlamaDecoderLayer) else None for layer in layers]
        return DecodeStepLayout(layers, self.model.norm, self.lm_head, shape, parts)

    def compile_decode_step(self, regional: bool = False, native: bool | None = None, **compile_options: Any) -> None:
        """Run static steps (one token per row into a prefilled ``StaticCache``) through ``torch.compile``
        (of :meth:`logits`, or with ``regional=True`` of one layer's static step shared by every layer),
        or through a native step where the layers offer one (``native``: None where available, True
        required, False never); see :func:`microformers_sdk.decode_steps.compile_decode_step`. Options go
        to ``torch.compile``. Call :meth:`uncompile_decode_step` to go back.
        """
        compile_decode_step(self, regional=regional, native=native, **compile_options)

    def uncompile_decode_step(self) -> None:
        """Undo :meth:`compile_decode_step`: every step runs eagerly again."""
        uncompile_decode_step(self)


class LlamaForSequenceClassification(DecoderForSequenceClassification, LlamaPreTrainedModel):
    """Decoder plus a linear ``score`` head read at each row's last non-padding token."""

    base_model_class: ClassVar[type[LlamaModel]] = LlamaModel
