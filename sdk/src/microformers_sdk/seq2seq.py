"""Building blocks for encoder-decoder models (T5, BART, Marian, Whisper).

* :class:`EncoderDecoderCache`: the decoder's self-attention cache (grows by one position per step)
  next to its cross-attention cache (the encoder's keys/values per layer, computed once per prompt
  by :meth:`EncoderDecoderCache.cross_attention_states` and reused by every later step).
* :func:`shift_tokens_right`: ``decoder_input_ids`` from ``labels`` (teacher forcing).
* :class:`Seq2SeqLMMixin`: what ``generate``, the trainer and the pipelines call on an
  encoder-decoder model besides ``forward`` (``get_encoder``, ``prepare_decoder_input_ids_from_labels``).
  It owns no forward: each model file writes its encoder, decoder and heads out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from microformers.errors import ConfigError, InputError

from .cache import Cache, DynamicCache, StaticCache
from .outputs import BaseModelOutput


class EncoderDecoderCache:
    """A decoder self-attention :class:`Cache` and a cross-attention :class:`Cache`, layer for layer.

    ``update``, ``get_seq_length``, ``crop`` and ``get_max_cache_shape`` act on the self-attention
    cache, so a decoder layer treats this object as its cache; batch operations (beam reordering,
    repeating, selecting rows) act on both. ``cache[i]`` is ``(self_keys, self_values, cross_keys,
    cross_values)``, the reference's legacy layout.
    """

    def __init__(self, self_attention_cache: Cache | None = None, cross_attention_cache: Cache | None = None) -> None:
        self.self_attention_cache = self_attention_cache if self_attention_cache is not None else DynamicCache()
        self.cross_attention_cache = cross_attention_cache if cross_attention_cache is not None else DynamicCache()
        self.is_updated: dict[int, bool] = {
            layer_idx: True for layer_idx in range(len(self.cross_attention_cache))
            if self.cross_attention_cache.get_seq_length(layer_idx) > 0
        }

    # -- the self-attention side (what a decoder layer calls) --------------------------------------
    def update(
        self, key: torch.Tensor, value: torch.Tensor, layer_idx: int, cache_kwargs: dict[str, Any] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return self.self_attention_cache.update(key, value, layer_idx, cache_kwargs)

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.self_attention_cache.get_seq_length(layer_idx)

    def get_max_cache_shape(self) -> int | None:
        return self.self_attention_cache.get_max_cache_shape()

    def crop(self, max_length: int) -> None:
        self.self_attention_cache.crop(max_length)

    # -- the cross-attention side -----------------------------------------------------------------
    def cross_attention_states(
        self, layer_idx: int, compute: Callable[[], tuple[torch.Tensor, torch.Tensor]]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The encoder keys/values of layer ``layer_idx``: ``compute()`` on the first call, the cached ones after."""
        if self.is_updated.get(layer_idx, False):
            return self.cross_attention_cache[layer_idx]
        keys, values = compute()
        self.is_updated[layer_idx] = True
        return self.cross_attention_cache.update(keys, values, layer_idx)

    # -- both ---------------------------------------------------------------------------------------
    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        self.self_attention_cache.reorder_cache(beam_idx)
        self.cross_attention_cache.reorder_cache(beam_idx)

    def batch_repeat_interleave(self, repeats: int) -> None:
        self.self_attention_cache.batch_repeat_interleave(repeats)
        self.cross_attention_cache.batch_repeat_interleave(repeats)

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self.self_attention_cache.batch_select_indices(indices)
        self.cross_attention_cache.batch_select_indices(indices)

    def reset(self) -> None:
        self.self_attention_cache.reset()
        self.cross_attention_cache.reset()
        self.is_updated.clear()

    @property
    def seen_tokens(self) -> int:
        return self.get_seq_length()

    def __len__(self) -> int:
        return len(self.self_attention_cache)

    def __getitem__(self, layer_idx: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        self_keys, self_values = self.self_attention_cache[layer_idx]
        if layer_idx < len(self.cross_attention_cache):
            cross_keys, cross_values = self.cross_attention_cache[layer_idx]
        else:
            cross_keys, cross_values = self_keys.new_empty(0), self_values.new_empty(0)
        return self_keys, self_values, cross_keys, cross_values

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]]:
        for layer_idx in range(len(self)):
            yield self[layer_idx]

    def to_legacy_cache(self) -> tuple[tuple[torch.Tensor, ...], ...]:
        """``((self_keys, self_values, cross_keys, cross_values), ...)`` per layer."""
        return tuple(self)

    @classmethod
    def from_legacy_cache(cls, past_key_values: Sequence[Sequence[torch.Tensor]] | None = None) -> EncoderDecoderCache:
        """Build a cache from per-layer ``(self_keys, self_values[, cross_keys, cross_values])`` tuples."""
        cache = cls()
        for layer_idx, states in enumerate(past_key_values or ()):
            if len(states) not in (2, 4):
                raise InputError(
                    f"past_key_values[{layer_idx}] holds {len(states)} tensors; an encoder-decoder cache layer is "
                    "(self_keys, self_values, cross_keys, cross_values)"
                )
            cache.self_attention_cache.update(states[0], states[1], layer_idx)
            if len(states) == 4:
                cache.cross_attention_cache.update(states[2], states[3], layer_idx)
                cache.is_updated[layer_idx] = True
        return cache


def as_encoder_decoder_cache(past_key_values: Any) -> EncoderDecoderCache | None:
    """``None`` or an :class:`EncoderDecoderCache`; a plain :class:`Cache` becomes its self-attention side."""
    if past_key_values is None or isinstance(past_key_values, EncoderDecoderCache):
        return past_key_values
    if isinstance(past_key_values, Cache):
        return EncoderDecoderCache(past_key_values, DynamicCache())
    if isinstance(past_key_values, (list, tuple)):
        return EncoderDecoderCache.from_legacy_cache(past_key_values)
    raise InputError(
        "past_key_values of an encoder-decoder model must be an EncoderDecoderCache, a Cache (the decoder's "
        f"self-attention) or per-layer tuples of tensors, got {type(past_key_values).__name__}"
    )


def shift_tokens_right(
    input_ids: torch.Tensor, pad_token_id: int | None, decoder_start_token_id: int | None
) -> torch.Tensor:
    """``input_ids`` moved one position right, ``decoder_start_token_id`` first, ``-100`` (ignored labels) as pad."""
    if decoder_start_token_id is None:
        raise ConfigError(
            "the model config has no decoder_start_token_id: set config.decoder_start_token_id (the token a "
            "decoder starts from) or pass decoder_input_ids"
        )
    if pad_token_id is None:
        raise ConfigError("the model config has no pad_token_id: set config.pad_token_id to shift labels right")
    shifted = input_ids.new_empty(input_ids.shape)
    shifted[..., 1:] = input_ids[..., :-1]
    shifted[..., 0] = decoder_start_token_id
    return shifted.masked_fill_(shifted == -100, pad_token_id)


def as_encoder_output(encoder_outputs: Any) -> BaseModelOutput:
    """``encoder_outputs`` as given to ``forward`` (a model output, or a tuple ``(last_hidden_state, ...)``)."""
    if isinstance(encoder_outputs, BaseModelOutput) or hasattr(encoder_outputs, "last_hidden_state"):
        return encoder_outputs
    if isinstance(encoder_outputs, (tuple, list)) and encoder_outputs:
        return BaseModelOutput(
            last_hidden_state=encoder_outputs[0],
            hidden_states=encoder_outputs[1] if len(encoder_outputs) > 1 else None,
            attentions=encoder_outputs[2] if len(encoder_outputs) > 2 else None,
        )
    raise InputError(
        "encoder_outputs must be the encoder's output (with last_hidden_state) or a tuple starting with the "
        f"last hidden state, got {type(encoder_outputs).__name__}"
    )


def check_decoder_inputs(decoder_input_ids: torch.Tensor | None, labels: torch.Tensor | None) -> None:
    """Refuse ``decoder_input_ids`` and ``labels`` whose lengths differ (the loss pairs them position by position)."""
    if decoder_input_ids is None or labels is None:
        return
    if decoder_input_ids.shape[-1] != labels.shape[-1] or decoder_input_ids.shape[0] != labels.shape[0]:
        raise InputError(
            f"decoder_input_ids has shape {tuple(decoder_input_ids.shape)} but labels has {tuple(labels.shape)}: "
            "they must match (or pass only labels and the decoder inputs are made by shifting them right)"
        )


class Seq2SeqLMMixin:
    """What ``generate``, the trainer and pipelines use on an encoder-decoder model, besides ``forward``.

    The model defines ``get_encoder()`` and ``get_decoder()`` (where its stacks live is its business);
    ``config`` carries ``pad_token_id`` and ``decoder_start_token_id``. List the mixin before the
    model's ``PreTrainedModel`` base so its ``make_static_cache`` is the one used.
    """

    config: Any

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        return shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)

    def make_static_cache(self, max_cache_len: int) -> EncoderDecoderCache:
        """``cache_implementation="static"``: the decoder's self-attention preallocated for ``max_cache_len``
        positions; the cross-attention states are written once per prompt, so they need no preallocation."""
        return EncoderDecoderCache(StaticCache(self.config, max_cache_len=max_cache_len), DynamicCache())
