"""Phi-3 decoder (``model_type: phi3``): the Llama decoder of ``microformers-llama`` with fused projections and LongRoPE.

Parameter names equal the checkpoint tensor names of the reference implementation
(``model.embed_tokens.weight``, ``model.layers.{i}.input_layernorm.weight``,
``model.layers.{i}.self_attn.qkv_proj.weight``, ``model.layers.{i}.self_attn.o_proj.weight``,
``model.layers.{i}.post_attention_layernorm.weight``, ``model.layers.{i}.mlp.gate_up_proj.weight``,
``model.layers.{i}.mlp.down_proj.weight``, ``model.norm.weight``, ``lm_head.weight``, ``score.weight``
/ ``score.bias``), so files load and save without renaming.

The classes below derive from Llama's and override what differs: one ``qkv_proj`` matrix holds the
query rows, then the key rows, then the value rows (``Phi3Attention.project`` splits it; the rest of
attention, caches and static steps are Llama's); one ``gate_up_proj`` holds the gate rows, then the up
rows (``FusedGatedMLP``); residual dropout (``resid_pdrop``) applies in training (``Phi3DecoderLayer``);
``partial_rotary_factor`` rotates only the first channels of each head; and LongRoPE scaling
(:mod:`microformers_sdk.rotary`) picks the short or the long factor set per forward pass from its
longest position. A KV cache holding keys rotated with the short set is stale once a sequence grows
past ``original_max_position_embeddings``: :meth:`Phi3ForCausalLM.cache_needs_recompute` tells
``generate`` to run the whole sequence again at that step, as the reference does.

One forward pass is Llama's (``LlamaModel.prepare`` / ``decode``, ``LlamaForCausalLM.logits``): embed,
rotary ``cos``/``sin`` once, the mask, the decoder layers and the final RMSNorm, then the head. A token
fed into a prefilled ``StaticCache`` is a static step, which Llama's ``compile_decode_step()`` runs
through ``torch.compile``, whole or one layer at a time (``regional=True``); the fused projections have
no native step (``LlamaForCausalLM.decode_step_layout`` describes only Llama's own layers for one).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from microformers_llama import (
    LlamaAttention,
    LlamaForCausalLM,
    LlamaForSequenceClassification,
    LlamaModel,
    LlamaPreTrainedModel,
)
from microformers_sdk.cache import Cache
from microformers_sdk.layers import FusedGatedMLP, RMSNorm, apply_linear
from microformers_sdk.losses import token_cross_entropy
from microformers_sdk.outputs import TokenClassifierOutput

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


class Phi3Attention(LlamaAttention):
    """Llama's grouped-query self-attention with one fused ``qkv_proj`` (query rows, then key, then value)."""

    def __init__(self, config: Phi3Config, layer_idx: int) -> None:
        nn.Module.__init__(self)  # not LlamaAttention.__init__: it builds separate q/k/v_proj
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

    def project(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Query, key and value heads ``(batch, heads, seq, head_dim)`` split from the fused projection."""
        batch, q_len, _ = hidden_states.shape
        qkv = apply_linear(self.qkv_proj, hidden_states)
        query, key, value = (
            part.view(batch, q_len, -1, self.head_dim).transpose(1, 2) for part in qkv.split(self.split_sizes, dim=-1)
        )
        return query, key, value


class Phi3DecoderLayer(nn.Module):
    """Pre-norm block: ``x + dropout(attn(norm(x)))`` then ``x + dropout(mlp(norm(x)))``.

    ``forward`` is ``LlamaDecoderLayer.forward`` plus the residual dropout, kept in sync with it by
    tests/integration/test_model_copies_in_sync.py.
    """

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


class Phi3PreTrainedModel(LlamaPreTrainedModel):
    config_class = Phi3Config
    _no_split_modules: ClassVar[list[str]] = ["Phi3DecoderLayer"]


class Phi3Model(LlamaModel, Phi3PreTrainedModel):
    """The decoder stack without a head (Llama's, over Phi-3 layers); returns ``BaseModelOutputWithPast``."""

    layer_class: ClassVar[type[nn.Module]] = Phi3DecoderLayer


class Phi3ForCausalLM(LlamaForCausalLM, Phi3PreTrainedModel):
    """Decoder plus a language-modelling head (``lm_head``, tied to the embeddings when configured)."""

    base_model_class: ClassVar[type[nn.Module]] = Phi3Model

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


class Phi3ForSequenceClassification(LlamaForSequenceClassification, Phi3PreTrainedModel):
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
