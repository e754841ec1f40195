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
``torch.compile`` of the same ``decode`` + head the eager forward runs (as gpt-fast does).
"""

from __future__ import annotations

from typing import Any, ClassVar

import attrs
import torch
from torch import nn

from microformers import PreTrainedModel
from microformers.errors import InputError
from microformers_sdk.attention import eager_attention, get_attention_function
from microformers_sdk.cache import Cache
from microformers_sdk.decoder_heads import DecoderForCausalLM, DecoderForSequenceClassification, keep_logits_positions
from microformers_sdk.inputs import DecoderInputs, prepare_decoder_inputs
from microformers_sdk.layers import GatedMLP, RMSNorm, apply_linear, apply_linears
from microformers_sdk.losses import causal_lm_loss
from microformers_sdk.masks import build_attention_mask
from microformers_sdk.outputs import BaseModelOutputWithPast, CausalLMOutputWithPast
from microformers_sdk.packed import refuse_packed
from microformers_sdk.rotary import RotaryEmbedding, apply_rotary_pos_emb, rope_settings_from_config
from microformers_sdk.static_steps import (
    DecoderLayerParts,
    DecoderStepShape,
    NativeDecoderStep,
    native_decoder_step,
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
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...] | None, tuple[torch.Tensor, ...] | None]:
        """The decoder layers and the final norm; returns the hidden states and the optional per-layer outputs."""
        rotary, cache_position = layer_inputs.rotary, layer_inputs.cache_position
        all_hidden_states: list[torch.Tensor] = []
        all_attentions: list[torch.Tensor] = []
        for layer in self.layers:
            if output_hidden_states:
                all_hidden_states.append(hidden_states)
            mask, is_causal = layer_inputs.masks[layer.self_attn.sliding_window]
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


@attrs.frozen
class LayerInputs:
    """What every layer of one forward pass shares: rotary ``(cos, sin)``, masks by sliding window, and
    ``cache_position`` (a one-element tensor) on a static step."""

    rotary: tuple[torch.Tensor, torch.Tensor]
    masks: dict[int | None, tuple[torch.Tensor | None, bool]]
    cache_position: torch.Tensor | None
    attention_fn: Any

    def advance(self, cache: Cache | None, count: int) -> None:
        """A static step wrote into the storage directly: count the new positions as filled."""
        if self.cache_position is not None:
            cache.advance(count)


def _static_layer_step(
    layer: LlamaDecoderLayer,
    hidden_states: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    visible: torch.Tensor,
    key_storage: torch.Tensor,
    value_storage: torch.Tensor,
    cache_position: torch.Tensor,
) -> torch.Tensor:
    """What one decoder layer computes on a static step, its cache storage passed in.

    Every layer has the same shapes and reads nothing layer-specific but its parameters, so regional
    compilation (``compile_decode_step(regional=True)``) compiles this function once for all layers.
    """
    attention = layer.self_attn
    batch = hidden_states.shape[0]
    query, key, value = attention.project(layer.input_layernorm(hidden_states))
    query, key = apply_rotary_pos_emb(query, key, cos, sin)
    key_storage.index_copy_(2, cache_position, key)
    value_storage.index_copy_(2, cache_position, value)
    attended = one_query_attention(query, key_storage, value_storage, visible, attention.scaling)
    attended = attended.transpose(1, 2).reshape(batch, 1, -1)
    hidden_states = hidden_states + apply_linear(attention.o_proj, attended)
    return hidden_states + layer.mlp(layer.post_attention_layernorm(hidden_states))


class _StaticStepRunner:
    """A static step whose decoder layers run another way (:meth:`layers`), then the eager final norm and head.

    :meth:`layers` returning None runs the ordinary eager function instead.
    """

    # True where :meth:`layers` returns the logits (the final norm and head included) instead of hidden states
    includes_head = False

    def __init__(self, model: LlamaForCausalLM) -> None:
        self.model = model

    def layers(self, inputs_embeds: torch.Tensor, layer_inputs: LayerInputs, cache: Cache) -> torch.Tensor | None:
        raise NotImplementedError

    def __call__(
        self,
        inputs_embeds: torch.Tensor,
        layer_inputs: LayerInputs,
        past_key_values: Cache,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
        logits_to_keep: int | torch.Tensor = 0,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...] | None, tuple[torch.Tensor, ...] | None]:
        hidden_states = self.layers(inputs_embeds, layer_inputs, past_key_values)
        if hidden_states is None:
            return self.model.logits(
                inputs_embeds, layer_inputs, past_key_values, output_attentions, output_hidden_states, logits_to_keep
            )
        if self.includes_head:
            return hidden_states, None, None
        hidden_states = self.model.model.norm(hidden_states)  # one position: logits_to_keep changes nothing
        return apply_linear(self.model.lm_head, hidden_states), None, None


class _RegionalDecodeStep(_StaticStepRunner):
    """The static step with one compiled layer function shared by every layer (eager head)."""

    def __init__(self, model: LlamaForCausalLM, options: dict[str, Any]) -> None:
        super().__init__(model)
        self.layer_step = torch.compile(_static_layer_step, **options)

    def layers(self, inputs_embeds: torch.Tensor, layer_inputs: LayerInputs, cache: Cache) -> torch.Tensor:
        cos, sin = layer_inputs.rotary
        hidden_states = inputs_embeds
        for index, layer in enumerate(self.model.model.layers):
            visible = layer_inputs.masks[layer.self_attn.sliding_window][0]
            key_storage, value_storage = cache.layer_storage(index)
            hidden_states = self.layer_step(
                layer, hidden_states, cos, sin, visible, key_storage, value_storage, layer_inputs.cache_position
            )
        return hidden_states


class _NativeDecodeStep(_StaticStepRunner):
    """The static step through a native implementation of all decoder layers, and of the final norm and
    head where the implementation covers them too (otherwise those run eagerly)."""

    def __init__(self, model: LlamaForCausalLM, layers_step: NativeDecoderStep, includes_head: bool) -> None:
        super().__init__(model)
        self.layers_step = layers_step
        self.includes_head = includes_head

    @classmethod
    def build(cls, model: LlamaForCausalLM) -> _NativeDecodeStep | None:
        """None unless every layer is the plain Llama layer with a SiLU-gated MLP and its linear layers' type
        offers a native step (quantized layers do)."""
        config, layers = model.config, model.model.layers
        if config.hidden_act != "silu" or not layers:
            return None
        parts = []
        for layer in layers:
            attention, mlp = layer.self_attn, layer.mlp
            if (
                type(layer).forward is not LlamaDecoderLayer.forward
                or type(attention).forward is not LlamaAttention.forward
                or type(attention).project is not LlamaAttention.project
                or type(mlp) is not GatedMLP
            ):
                return None
            parts.append(
                DecoderLayerParts(
                    layer.input_layernorm, attention.q_proj, attention.k_proj, attention.v_proj, attention.o_proj,
                    layer.post_attention_layernorm, mlp.gate_proj, mlp.up_proj, mlp.down_proj,
                )
            )  # fmt: skip
        first = layers[0].self_attn
        shape = DecoderStepShape(first.num_heads, first.num_key_value_heads, first.head_dim, first.scaling)
        step = native_decoder_step(parts, shape, model.model.norm, model.lm_head)
        if step is not None:
            return cls(model, step, includes_head=True)
        step = native_decoder_step(parts, shape)
        return None if step is None else cls(model, step, includes_head=False)

    def layers(self, inputs_embeds: torch.Tensor, layer_inputs: LayerInputs, cache: Cache) -> torch.Tensor | None:
        cos, sin = layer_inputs.rotary
        layers = self.model.model.layers
        storages = [cache.layer_storage(index) for index in range(len(layers))]
        if (
            cos.shape[-1] != layers[0].self_attn.head_dim  # partial rotary
            or inputs_embeds.dtype != torch.float32
            or storages[0][0].dtype != torch.float32
        ):
            return None
        visible = next(iter(layer_inputs.masks.values()))[0]
        return self.layers_step(inputs_embeds, cos, sin, visible, storages, int(layer_inputs.cache_position[0]))


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
        if compiled is not None and layer_inputs.cache_position is not None and labels is None and not any(flags):
            run = compiled  # the same function, compiled: one graph per batch size and cache length
        embeds = inputs.inputs_embeds
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
        hidden_states, all_hidden_states, attentions = self.model.decode(
            inputs_embeds, layer_inputs, past_key_values, output_attentions, output_hidden_states
        )
        logits = apply_linear(self.lm_head, keep_logits_positions(hidden_states, logits_to_keep))
        return logits, all_hidden_states, attentions

    # -- opt-in compiled decoding ------------------------------------------------------------------
    def compile_decode_step(self, regional: bool = False, native: bool | None = None, **compile_options: Any) -> None:
        """Run static steps (one token per row into a prefilled ``StaticCache``) through ``torch.compile``,
        or through a native step where the layers offer one.

        ``native``: with the default (None) and neither ``regional`` nor options, layers whose linear
        type provides a native step for the whole decoder (quantized layers: ``microformers-quant``)
        use it instead of ``torch.compile``: no compilation, the same kernels, one call per token for
        all layers. ``native=True`` requires it (an error where there is none), ``native=False``
        always compiles.

        The compiled function is :meth:`logits`, the decoder and head every forward runs; the inputs
        (embedding, rotary, mask over the cache's capacity) are prepared eagerly and the prompt itself
        runs eagerly. The first step of each shape (batch size, cache length, with or without padding)
        pays the compilation. Options go to ``torch.compile`` (default ``dynamic=False, fullgraph=True``;
        ``mode="max-autotune-no-cudagraphs"`` on CPU, never ``"reduce-overhead"``, which needs CUDA
        graphs). Call :meth:`uncompile_decode_step` to go back.

        ``regional=True`` compiles one decoder layer's static step instead, shared by every layer
        (the head stays eager): compilation takes about a tenth of the whole graph's, each step runs
        slower than the whole graph's but faster than eager (numbers in docs/performance.md).
        """
        refuse_packed(self, "compile_decode_step")
        if native is True and (regional or compile_options):
            raise InputError("compile_decode_step(native=True) compiles nothing: drop regional and the compile options")
        if native is not False and not regional and not compile_options:
            native_step = _NativeDecodeStep.build(self)
            if native_step is not None:
                object.__setattr__(self, "_compiled_decode_step", native_step)
                object.__setattr__(self, "_compiled_decode_options", {"native": True})
                return
            if native:
                raise InputError(
                    "compile_decode_step(native=True): these layers have no native decode step (it needs every "
                    "projection quantized by microformers-quant, plain RMSNorms and a SiLU MLP); use native=False"
                )
        options: dict[str, Any] = {"dynamic": False, "fullgraph": True, **compile_options}
        for layer in self.model.layers if regional else ():
            if type(layer).forward is not LlamaDecoderLayer.forward or (
                type(layer.self_attn).forward is not LlamaAttention.forward
            ):
                raise InputError(
                    f"compile_decode_step(regional=True) runs the Llama layer's static step, but "
                    f"{type(layer).__name__} overrides forward; call compile_decode_step() without regional"
                )
        if self.__dict__.get("_compiled_decode_options") == {**options, "regional": regional}:
            return  # already compiled with these options: keep the cached graphs
        if regional:
            step: Any = _RegionalDecodeStep(self, options)
        else:
            step = torch.compile(self.logits, **options)
        object.__setattr__(self, "_compiled_decode_step", step)
        object.__setattr__(self, "_compiled_decode_options", {**options, "regional": regional})

    def uncompile_decode_step(self) -> None:
        """Undo :meth:`compile_decode_step`: every step runs eagerly again."""
        self.__dict__.pop("_compiled_decode_step", None)
        self.__dict__.pop("_compiled_decode_options", None)


class LlamaForSequenceClassification(DecoderForSequenceClassification, LlamaPreTrainedModel):
    """Decoder plus a linear ``score`` head read at each row's last non-padding token."""

    base_model_class: ClassVar[type[LlamaModel]] = LlamaModel
