"""GPT-2: decoder stack, language-model head and sequence-classification head.

Parameter names and layouts equal the checkpoint tensors of the original release and of the
reference implementation (``transformer.wte.weight``, ``transformer.wpe.weight``,
``transformer.h.{i}.attn.c_attn.weight``, ``transformer.h.{i}.mlp.c_fc.weight``, ``transformer.ln_f.weight``,
``lm_head.weight``, ``score.weight``); files without the ``transformer.`` prefix (the original
``gpt2`` upload) load as well. The projections are :class:`Conv1D` layers, whose weights are stored
``(in_features, out_features)``, the transpose of ``nn.Linear``, exactly as in those files, so they
load without any conversion. The causal-mask buffers old files carry (``attn.bias``,
``attn.masked_bias``) are ignored.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from torch import nn

from microformers import PreTrainedModel
from microformers.errors import ConfigError, InputError
from microformers_sdk.attention import eager_attention, get_attention_function
from microformers_sdk.cache import Cache
from microformers_sdk.decoder_heads import keep_logits_positions
from microformers_sdk.inputs import prepare_decoder_inputs
from microformers_sdk.layers import get_activation
from microformers_sdk.losses import causal_lm_loss, sequence_classification_loss
from microformers_sdk.masks import build_attention_mask, capturing_graph, last_token_indices
from microformers_sdk.outputs import (
    BaseModelOutputWithPastAndCrossAttentions,
    CausalLMOutputWithCrossAttentions,
    SequenceClassifierOutputWithPast,
)

from .configuration_gpt2 import GPT2Config

__all__ = [
    "Conv1D",
    "GPT2Config",
    "GPT2ForSequenceClassification",
    "GPT2InputError",
    "GPT2LMHeadModel",
    "GPT2Model",
    "GPT2PreTrainedModel",
]


class GPT2InputError(InputError):
    """The arguments of a forward call do not fit the model (missing inputs, too long, bad cache)."""


class Conv1D(nn.Module):
    """A linear layer whose weight is stored ``(in_features, out_features)``: ``x @ weight + bias``.

    That is the layout of GPT-2 checkpoints (a relic of the original TensorFlow 1x1 convolutions).
    """

    def __init__(self, out_features: int, in_features: int) -> None:
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.weight = nn.Parameter(torch.empty(in_features, out_features))
        self.bias = nn.Parameter(torch.zeros(out_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = torch.addmm(self.bias, x.reshape(-1, self.in_features), self.weight)
        return flat.view(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}"


class GPT2Attention(nn.Module):
    """Multi-head causal self-attention with a fused ``c_attn`` query/key/value projection."""

    def __init__(self, config: GPT2Config, layer_idx: int) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.embed_dim = config.n_embd
        self.num_heads = config.n_head
        self.head_dim = self.embed_dim // self.num_heads
        self.scaling = self.head_dim**-0.5 if config.scale_attn_weights else 1.0
        if config.scale_attn_by_inverse_layer_idx:
            self.scaling /= float(layer_idx + 1)
        self.upcast = bool(config.reorder_and_upcast_attn)
        self.attention_dropout = float(config.attn_pdrop or 0.0)
        self.c_attn = Conv1D(3 * self.embed_dim, self.embed_dim)
        self.c_proj = Conv1D(self.embed_dim, self.embed_dim)
        self.resid_dropout = nn.Dropout(config.resid_pdrop)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        is_causal: bool,
        past_key_values: Cache | None,
        attention_fn: Any,
        output_attentions: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        batch, length, _ = hidden_states.shape
        query, key, value = (
            part.view(batch, length, self.num_heads, self.head_dim).transpose(1, 2)
            for part in self.c_attn(hidden_states).split(self.embed_dim, dim=2)
        )
        if past_key_values is not None:
            key, value = past_key_values.update(key, value, self.layer_idx)
        dropout = self.attention_dropout if self.training else 0.0
        weights = None
        if output_attentions or self.upcast:
            # reorder_and_upcast_attn: scores and softmax in float32 (matters only below float32).
            dtype = query.dtype
            cast = (lambda t: t.float()) if self.upcast else (lambda t: t)
            output, weights = eager_attention(
                cast(query), cast(key), cast(value), attention_mask, scaling=self.scaling, dropout=dropout,
                is_causal=is_causal, return_weights=True,
            )  # fmt: skip
            output = output.to(dtype)
            weights = weights.to(dtype)
        else:
            output = attention_fn(
                query, key, value, attention_mask, scaling=self.scaling, dropout=dropout, is_causal=is_causal
            )
        output = output.transpose(1, 2).reshape(batch, length, self.embed_dim)
        return self.resid_dropout(self.c_proj(output)), weights


class GPT2MLP(nn.Module):
    def __init__(self, intermediate_size: int, config: GPT2Config) -> None:
        super().__init__()
        self.c_fc = Conv1D(intermediate_size, config.n_embd)
        self.c_proj = Conv1D(config.n_embd, intermediate_size)
        self.act = get_activation(config.activation_function, setting="activation_function")
        self.dropout = nn.Dropout(config.resid_pdrop)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(self.act(self.c_fc(hidden_states))))


class GPT2Block(nn.Module):
    """Pre-norm block: ``x + attn(ln_1(x))`` then ``x + mlp(ln_2(x))``."""

    def __init__(self, config: GPT2Config, layer_idx: int) -> None:
        super().__init__()
        inner = config.n_inner if config.n_inner is not None else 4 * config.n_embd
        self.ln_1 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.attn = GPT2Attention(config, layer_idx)
        self.ln_2 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.mlp = GPT2MLP(inner, config)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        is_causal: bool,
        past_key_values: Cache | None,
        attention_fn: Any,
        output_attentions: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        attended, weights = self.attn(
            self.ln_1(hidden_states), attention_mask, is_causal, past_key_values, attention_fn, output_attentions
        )
        hidden_states = hidden_states + attended
        return hidden_states + self.mlp(self.ln_2(hidden_states)), weights


class GPT2PreTrainedModel(PreTrainedModel):
    config_class = GPT2Config
    base_model_prefix = "transformer"
    _no_split_modules: ClassVar[list[str]] = ["GPT2Block"]
    supports_gradient_checkpointing = True
    # The causal-mask buffers saved by older exporters are rebuilt, never loaded.
    _keys_to_ignore_on_load_unexpected: ClassVar[list[str]] = [r"attn\.bias$", r"attn\.masked_bias$"]

    def __init__(self, config: GPT2Config, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        if getattr(config, "add_cross_attention", False):
            raise ConfigError(
                "add_cross_attention=True in the GPT-2 config asks for cross-attention layers (encoder-decoder use), "
                "which microformers-gpt2 does not provide; set it to false"
            )

    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        std = self.config.initializer_range
        if isinstance(module, Conv1D):
            nn.init.normal_(module.weight, mean=0.0, std=std)
            nn.init.zeros_(module.bias)
        # GPT-2 scales the residual projections by 1/sqrt(2 * n_layer) at initialisation.
        if isinstance(module, (GPT2Attention, GPT2MLP)):
            nn.init.normal_(module.c_proj.weight, mean=0.0, std=std / math.sqrt(2 * self.config.n_layer))


class GPT2Model(GPT2PreTrainedModel):
    """The decoder stack without a head; returns ``BaseModelOutputWithPastAndCrossAttentions``.

    ``hidden_states`` holds the embedding output and every block's output, the last one after ``ln_f``.
    """

    def __init__(self, config: GPT2Config) -> None:
        super().__init__(config)
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.n_positions, config.n_embd)
        self.drop = nn.Dropout(config.embd_pdrop)
        self.h = nn.ModuleList(GPT2Block(config, i) for i in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.wte

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.wte = value

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        token_type_ids: torch.LongTensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> BaseModelOutputWithPastAndCrossAttentions | tuple[Any, ...]:
        # The parameters are LlamaModel.forward's plus token_type_ids (as are GPT2LMHeadModel.forward's of
        # LlamaForCausalLM.forward); kept in sync by tests/integration/test_model_copies_in_sync.py.
        config = self.config
        inputs = prepare_decoder_inputs(
            self,
            self.wte,
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
        inputs_embeds, past_key_values, past_length = inputs.inputs_embeds, inputs.cache, inputs.past_length
        output_attentions, output_hidden_states = inputs.output_attentions, inputs.output_hidden_states
        length = inputs_embeds.shape[1]
        position_ids = inputs.position_ids
        if not capturing_graph() and bool((position_ids >= config.n_positions).any()):  # no data branch
            raise GPT2InputError(
                f"GPT-2 has {config.n_positions} positions (n_positions) but this call reaches position "
                f"{int(position_ids.max())}; shorten the input or the generation (max_new_tokens)"
            )
        hidden_states = inputs_embeds + self.wpe(position_ids)
        if token_type_ids is not None:
            hidden_states = hidden_states + self.wte(token_type_ids)
        hidden_states = self.drop(hidden_states)
        mask, is_causal = build_attention_mask(attention_mask, length, past_length, device=inputs_embeds.device)
        attention_fn = get_attention_function(config)

        all_hidden_states: list[torch.Tensor] = []
        all_attentions: list[torch.Tensor] = []
        for block in self.h:
            if output_hidden_states:
                all_hidden_states.append(hidden_states)
            hidden_states, weights = self._call_layer(
                block, hidden_states, mask, is_causal, past_key_values, attention_fn, output_attentions
            )
            if output_attentions:
                all_attentions.append(weights)
        hidden_states = self.ln_f(hidden_states)
        if output_hidden_states:
            all_hidden_states.append(hidden_states)
        output = BaseModelOutputWithPastAndCrossAttentions(
            last_hidden_state=hidden_states,
            past_key_values=past_key_values if inputs.use_cache else None,
            hidden_states=tuple(all_hidden_states) if output_hidden_states else None,
            attentions=tuple(all_attentions) if output_attentions else None,
        )
        return output if inputs.return_dict else output.to_tuple()


class _GPT2Head(GPT2PreTrainedModel):
    def get_input_embeddings(self) -> nn.Module:
        return self.transformer.wte

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.transformer.wte = value

    def _decode(self, **kwargs: Any) -> BaseModelOutputWithPastAndCrossAttentions:
        return self.transformer(**kwargs, return_dict=True)


class GPT2LMHeadModel(_GPT2Head):
    """Decoder plus the language-model head (``lm_head``, tied to ``wte`` unless ``tie_word_embeddings=False``)."""

    _tied_weights_keys: ClassVar[dict[str, str]] = {"lm_head.weight": "transformer.wte.weight"}

    def __init__(self, config: GPT2Config) -> None:
        super().__init__(config)
        self.transformer = GPT2Model(config)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.post_init()

    def get_output_embeddings(self) -> nn.Module:
        return self.lm_head

    def set_output_embeddings(self, value: nn.Module) -> None:
        self.lm_head = value

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
        token_type_ids: torch.LongTensor | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        **kwargs: Any,
    ) -> CausalLMOutputWithCrossAttentions | tuple[Any, ...]:
        """``logits_to_keep=n`` computes logits for the last ``n`` positions only (0: all); a tensor picks positions."""
        return_dict = self.config.return_dict if return_dict is None else return_dict
        outputs = self._decode(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            token_type_ids=token_type_ids,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
        )
        logits = self.lm_head(keep_logits_positions(outputs.last_hidden_state, logits_to_keep))
        loss = causal_lm_loss(logits, labels, kwargs.get("num_items_in_batch")) if labels is not None else None
        output = CausalLMOutputWithCrossAttentions(
            loss=loss,
            logits=logits,
            past_key_values=outputs.past_key_values,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )
        return output if return_dict else output.to_tuple()


class GPT2ForSequenceClassification(_GPT2Head):
    """Decoder plus a linear ``score`` head read at each row's last non-padding token."""

    def __init__(self, config: GPT2Config) -> None:
        super().__init__(config)
        self.num_labels = config.num_labels
        self.transformer = GPT2Model(config)
        self.score = nn.Linear(config.n_embd, config.num_labels, bias=False)
        self.post_init()

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
        token_type_ids: torch.LongTensor | None = None,
        **kwargs: Any,
    ) -> SequenceClassifierOutputWithPast | tuple[Any, ...]:
        return_dict = self.config.return_dict if return_dict is None else return_dict
        outputs = self._decode(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            token_type_ids=token_type_ids,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
        )
        logits = self.score(outputs.last_hidden_state)
        batch = logits.shape[0]
        pad = self.config.pad_token_id
        if pad is None and batch != 1:
            raise GPT2InputError(
                f"{type(self).__name__} needs config.pad_token_id to find the last token of each row in a batch of "
                f"{batch}; set model.config.pad_token_id (e.g. to the tokenizer's eos_token_id)"
            )
        last = last_token_indices(input_ids, pad, batch, logits.shape[1], logits.device)
        pooled = logits[torch.arange(batch, device=logits.device), last]
        loss = sequence_classification_loss(pooled, labels, self.config) if labels is not None else None
        output = SequenceClassifierOutputWithPast(
            loss=loss,
            logits=pooled,
            past_key_values=outputs.past_key_values,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )
        return output if return_dict else output.to_tuple()
