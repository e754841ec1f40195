"""Phi-3 decoder (``model_type: phi3``): Llama's design with fused projections and LongRoPE.

Parameter names equal the checkpoint tensor names of the reference implementation
(``model.embed_tokens.weight``, ``model.layers.{i}.input_layernorm.weight``,
``model.layers.{i}.self_attn.qkv_proj.weight``, ``model.layers.{i}.self_attn.o_proj.weight``,
``model.layers.{i}.post_attention_layernorm.weight``, ``model.layers.{i}.mlp.gate_up_proj.weight``,
``model.layers.{i}.mlp.down_proj.weight``, ``model.norm.weight``, ``lm_head.weight``, ``score.weight``
/ ``score.bias``), so files load and save without renaming.

What differs from Llama: one ``qkv_proj`` matrix holds the query rows, then the key rows, then the
value rows; one ``gate_up_proj`` holds the gate rows, then the up rows; residual dropout
(``resid_pdrop``) applies in training; ``partial_rotary_factor`` rotates only the first channels of
each head; and LongRoPE scaling (:mod:`microformers_sdk.rotary`) picks the short or the long factor
set per forward pass from its longest position. A KV cache holding keys rotated with the short set
is stale once a sequence grows past ``original_max_position_embeddings``: :meth:`Phi3ForCausalLM.cache_needs_recompute`
tells ``generate`` to run the whole sequence again at that step, as the reference does.

One forward pass: embed, compute the rotary ``cos``/``sin`` once from the position ids and the
attention mask (``Phi3Model.prepare``), run the decoder layers and the final RMSNorm
(``Phi3Model.decode``), then the head. A token fed into a prefilled ``StaticCache`` is a static step
(:mod:`microformers_sdk.static_steps`), which ``compile_decode_step()`` runs through ``torch.compile``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import attrs
import torch
import torch.nn.functional as F
from torch import nn

from microformers import PreTrainedModel
from microformers.errors import InputError
from microformers_sdk.attention import eager_attention, get_attention_function
from microformers_sdk.cache import Cache
from microformers_sdk.decoder_heads import DecoderForCausalLM, DecoderForSequenceClassification, keep_logits_positions
from microformers_sdk.inputs import DecoderInputs, prepare_decoder_inputs
from microformers_sdk.layers import FusedGatedMLP, RMSNorm, apply_linear
from microformers_sdk.losses import causal_lm_loss, token_cross_entropy
from microformers_sdk.masks import build_attention_mask
from microformers_sdk.outputs import (
    BaseModelOutputWithPast,
    CausalLMOutputWithPast,
    TokenClassifierOutput,
)
from microformers_sdk.packed import refuse_packed
from microformers_sdk.rotary import RotaryEmbedding, apply_rotary_pos_emb, rope_settings_from_config
from microformers_sdk.static_steps import one_query_attention, static_step_position, visible_storage

from .configuration_phi3 import Phi3Config

__all__ = [
    "Phi3Attention",
    "Phi3Config",
    "Phi3DecoderLayer",
    "Phi3ForCausalLM",
    "Phi3ForSequenceClassification",
    "Phi3ForTokenClassification",
    "Phi3Model",
    "Phi3PreTrainedModel",
]


class Phi3Attention(nn.Module):
    """Grouped-query self-attention with a fused ``qkv_proj``; the kernel is chosen by ``attn_implementation``."""

    def __init__(self, config: Phi3Config, layer_idx: int) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.head_dim = config.head_dim
        self.num_heads = config.num_attention_heads
        self.num_key_value_heads = config.num_key_value_heads
        self.scaling = self.head_dim**-0.5
        self.attention_dropout = float(config.attention_dropout or 0.0)
        self.sliding_window = config.sliding_window
        query_size = self.num_heads * self.head_dim
        kv_size = self.num_key_value_heads * self.head_dim
        self.split_sizes = (query_size, kv_size, kv_size)
        self.qkv_proj = nn.Linear(config.hidden_size, query_size + 2 * kv_size, bias=False)
        self.o_proj = nn.Linear(query_size, config.hidden_size, bias=False)

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
        qkv = apply_linear(self.qkv_proj, hidden_states)
        query, key, value = (
            part.view(batch, q_len, -1, self.head_dim).transpose(1, 2) for part in qkv.split(self.split_sizes, dim=-1)
        )
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


class Phi3DecoderLayer(nn.Module):
    """Pre-norm block: ``x + dropout(attn(norm(x)))`` then ``x + dropout(mlp(norm(x)))``."""

    def __init__(self, config: Phi3Config, layer_idx: int) -> None:
        super().__init__()
        self.self_attn = Phi3Attention(config, layer_idx)
        self.mlp = FusedGatedMLP(config.hidden_size, config.intermediate_size, config.hidden_act)
        self.input_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.resid_pdrop = float(config.resid_pdrop or 0.0)

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
        hidden_states = hidden_states + self._dropout(attended)
        hidden_states = hidden_states + self._dropout(self.mlp(self.post_attention_layernorm(hidden_states)))
        return hidden_states, weights

    def _dropout(self, x: torch.Tensor) -> torch.Tensor:
        return F.dropout(x, self.resid_pdrop, training=True) if self.training and self.resid_pdrop > 0 else x


class Phi3PreTrainedModel(PreTrainedModel):
    config_class = Phi3Config
    base_model_prefix = "model"
    _no_split_modules: ClassVar[list[str]] = ["Phi3DecoderLayer"]
    supports_gradient_checkpointing = True
    _keys_to_ignore_on_load_unexpected: ClassVar[list[str]] = [r"rotary_emb\.inv_freq"]


@attrs.frozen
class LayerInputs:
    """What every layer of one forward pass shares: rotary ``(cos, sin)``, the mask and whether attention
    must apply causality itself, ``cache_position`` on a static step, and the attention function."""

    rotary: tuple[torch.Tensor, torch.Tensor]
    mask: tuple[torch.Tensor | None, bool]
    cache_position: torch.Tensor | None
    attention_fn: Any

    def advance(self, cache: Cache | None, count: int) -> None:
        """A static step wrote into the storage directly: count the new positions as filled."""
        if self.cache_position is not None:
            cache.advance(count)


class Phi3Model(Phi3PreTrainedModel):
    """The decoder stack without a head; returns ``BaseModelOutputWithPast``."""

    def __init__(self, config: Phi3Config) -> None:
        super().__init__(config)
        pad = config.pad_token_id
        padding_idx = pad if isinstance(pad, int) and 0 <= pad < config.vocab_size else None
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx)
        self.layers = nn.ModuleList(Phi3DecoderLayer(config, i) for i in range(config.num_hidden_layers))
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
        """Embeddings, cache and position ids (``prepare_decoder_inputs``), the rotary tables and the mask."""
        inputs = prepare_decoder_inputs(self, self.embed_tokens, attention_mask=attention_mask, **kwargs)
        embeds, cache = inputs.inputs_embeds, inputs.cache
        rotary = self.rotary_emb(inputs.position_ids, dtype=embeds.dtype)
        window = self.config.sliding_window
        cache_position = static_step_position(cache, embeds, (window,), len(self.layers))
        if cache_position is not None:
            mask = (visible_storage(cache.max_cache_len, inputs.past_length, attention_mask, embeds), False)
        else:
            mask = build_attention_mask(
                attention_mask, embeds.shape[1], inputs.past_length, sliding_window=window, device=embeds.device
            )
        return inputs, LayerInputs(rotary, mask, cache_position, get_attention_function(self.config))

    def decode(
        self,
        hidden_states: torch.Tensor,
        layer_inputs: LayerInputs,
        past_key_values: Cache | None,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...] | None, tuple[torch.Tensor, ...] | None]:
        """The decoder layers and the final norm; returns the hidden states and the optional per-layer outputs."""
        mask, is_causal = layer_inputs.mask
        all_hidden_states: list[torch.Tensor] = []
        all_attentions: list[torch.Tensor] = []
        for layer in self.layers:
            if output_hidden_states:
                all_hidden_states.append(hidden_states)
            hidden_states, weights = self._call_layer(
                layer, hidden_states, layer_inputs.rotary, mask, is_causal, past_key_values, layer_inputs.attention_fn,
                output_attentions, layer_inputs.cache_position,
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


class Phi3ForCausalLM(DecoderForCausalLM, Phi3PreTrainedModel):
    """Decoder plus a language-modelling head (``lm_head``, tied to the embeddings when configured)."""

    base_model_class: ClassVar[type[nn.Module]] = Phi3Model
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
        logits, hidden_states, attentions = run(
            inputs.inputs_embeds, layer_inputs, inputs.cache, *flags, logits_to_keep
        )
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

    # -- generation ----------------------------------------------------------------------------------
    def cache_needs_recompute(self, past_length: int, total_length: int) -> bool:
        """Whether ``generate`` must drop the cache and run all ``total_length`` positions again.

        With LongRoPE the cached keys were rotated with the short factors; once the sequence passes
        ``original_max_position_embeddings`` every position is recomputed with the long ones (once:
        afterwards the cache is longer than that). The reference does the same.
        """
        original = self.config.original_max_position_embeddings
        longrope = self.model.rotary_emb.settings.rope_type == "longrope"
        return longrope and total_length > original and past_length <= original

    # -- opt-in compiled decoding ------------------------------------------------------------------
    def compile_decode_step(self, native: bool | None = None, **compile_options: Any) -> None:
        """Run static steps (one token per row into a prefilled ``StaticCache``) through ``torch.compile``.

        The compiled function is :meth:`logits`; inputs are prepared eagerly and prompts run eagerly.
        Options go to ``torch.compile`` (default ``dynamic=False, fullgraph=True``). Call
        :meth:`uncompile_decode_step` to go back. There is no native step for Phi-3 (``native=True``
        is refused).
        """
        if native:
            raise InputError(f"{type(self).__name__} has no native decode step; use compile_decode_step()")
        options: dict[str, Any] = {"dynamic": False, "fullgraph": True, **compile_options}
        refuse_packed(self, "compile_decode_step")
        if self.__dict__.get("_compiled_decode_options") == options:
            return
        object.__setattr__(self, "_compiled_decode_step", torch.compile(self.logits, **options))
        object.__setattr__(self, "_compiled_decode_options", options)

    def uncompile_decode_step(self) -> None:
        """Undo :meth:`compile_decode_step`: every step runs eagerly again."""
        self.__dict__.pop("_compiled_decode_step", None)
        self.__dict__.pop("_compiled_decode_options", None)


class Phi3ForSequenceClassification(DecoderForSequenceClassification, Phi3PreTrainedModel):
    """Decoder plus a linear ``score`` head read at each row's last non-padding token."""

    base_model_class: ClassVar[type[nn.Module]] = Phi3Model


class Phi3ForTokenClassification(Phi3PreTrainedModel):
    """Decoder plus dropout and a linear ``score`` head on every token (the reference's generic token classifier)."""

    def __init__(self, config: Phi3Config) -> None:
        super().__init__(config)
        self.num_labels = config.num_labels
        self.model = Phi3Model(config)
        dropout = getattr(config, "classifier_dropout", None)
        if dropout is None:
            dropout = getattr(config, "hidden_dropout", None)
        self.dropout = nn.Dropout(0.1 if dropout is None else dropout)
        bias = getattr(config, "token_classification_bias", True)
        self.score = nn.Linear(config.hidden_size, config.num_labels, bias=bias)
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.model.embed_tokens

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> TokenClassifierOutput | tuple[Any, ...]:
        return_dict = self.config.return_dict if return_dict is None else return_dict
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
        )
        logits = self.score(self.dropout(outputs.last_hidden_state))
        loss = token_cross_entropy(logits, labels) if labels is not None else None
        output = TokenClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )
        return output if return_dict else output.to_tuple()
