"""``IncrementalDecoder``: runs a causal LM one step at a time for a decoding strategy.

It owns what every strategy would otherwise redo each step: the KV cache, the attention mask and
the position ids. The mask lives in a buffer that grows in chunks (never sized for ``max_length`` up
front), and each step passes a view of the columns filled so far; position ids advance by one; only
the newest token goes into the model when the cache is on. With no padding the mask is dropped
entirely, as the model then needs none. A model whose cached states go stale at some length (Phi-3's
LongRoPE switches factor sets past ``original_max_position_embeddings``) says so through
``cache_needs_recompute(past_length, total_length)``; that step then runs the whole sequence into a
fresh cache, as the reference's ``prepare_inputs_for_generation`` override does.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from microformers import GenerationError

# Columns added to a growing buffer at a time (and at least as many as it already has).
GROWTH = 256


def grow(buffer: torch.Tensor, needed: int, limit: int, fill: int | float = 0, dim: int = -1) -> torch.Tensor:
    """``buffer`` with room for at least ``needed`` entries along ``dim`` (at most ``limit``), new ones ``fill``."""
    size = buffer.shape[dim]
    if needed <= size:
        return buffer
    new_size = min(max(needed, size + max(GROWTH, size)), max(limit, needed))
    shape = list(buffer.shape)
    shape[dim] = new_size - size
    return torch.cat((buffer, buffer.new_full(shape, fill)), dim=dim)


class IncrementalDecoder:
    """Feeds a model ``(batch, length)`` sequences and returns next-token logits ``(batch, vocab)`` in fp32.

    ``model_kwargs`` is what ``generate`` hands a strategy: ``attention_mask`` (``None`` when there is
    no padding), ``use_cache``, optionally ``past_key_values``; anything else is passed to every
    forward call. With ``output_attentions`` / ``output_hidden_states`` the model returns them and
    :attr:`last_outputs` holds the latest forward's output.
    """

    def __init__(
        self,
        model: Any,
        model_kwargs: dict[str, Any],
        max_length: int,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
    ) -> None:
        kwargs = dict(model_kwargs)
        self.model = model
        self.max_length = int(max_length)
        self.cache = kwargs.pop("past_key_values", None)
        self.use_cache = bool(kwargs.pop("use_cache", True))
        self._prompt_mask = kwargs.pop("attention_mask", None)
        kwargs.pop("position_ids", None)
        if _accepts(model, "logits_to_keep") and "logits_to_keep" not in kwargs:
            kwargs["logits_to_keep"] = 1  # only the last position's logits are ever used
        if output_attentions:
            kwargs["output_attentions"] = True
        if output_hidden_states:
            kwargs["output_hidden_states"] = True
        self.forward_kwargs = kwargs
        self.last_outputs: Any = None
        self._mask: torch.Tensor | None = None
        self._positions: torch.Tensor | None = None
        self._next_position: torch.Tensor | None = None
        self.length = 0

    @property
    def attention_mask(self) -> torch.Tensor | None:
        """The mask of the sequences so far (``None`` when nothing is padded)."""
        return None if self._mask is None else self._mask[:, : self.length]

    def prefill(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Run the prompt (the part not already in a given cache); return the logits after it."""
        batch, length = input_ids.shape
        if length > self.max_length:
            raise GenerationError(f"the prompt has {length} tokens, more than max_length={self.max_length}")
        mask = self._prompt_mask
        if mask is not None:
            capacity = min(self.max_length, length + GROWTH)
            self._mask = torch.ones((batch, capacity), dtype=mask.dtype, device=input_ids.device)
            self._mask[:, :length] = mask
            positions = mask.long().cumsum(-1) - 1
            positions.masked_fill_(mask == 0, 1)
        else:
            positions = torch.arange(length, device=input_ids.device).unsqueeze(0).expand(batch, -1)
        self._positions = positions
        self._next_position = positions[:, -1:] + 1
        self.length = length
        past = self.cache.get_seq_length() if (self.cache is not None and self.use_cache) else 0
        new_ids = input_ids[:, past:] if past else input_ids
        return self._forward(new_ids, positions[:, past:] if past else positions)

    def step(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Run the newest token of ``input_ids`` (the full sequences, one longer than before); return its logits."""
        self.length = input_ids.shape[1]
        if self.length > self.max_length:
            raise GenerationError(f"sequences reached {self.length} tokens, past max_length={self.max_length}")
        if self._mask is not None:
            self._mask = grow(self._mask, self.length, self.max_length, fill=1)
        position = self._next_position
        self._next_position = position + 1
        if self.use_cache and self._must_recompute():
            self.cache = None
            return self._forward(input_ids, self._all_positions(input_ids))
        if self.use_cache:
            return self._forward(input_ids[:, -1:], position)
        self._positions = torch.cat((self._positions, position), dim=-1)
        return self._forward(input_ids, self._positions)

    def _must_recompute(self) -> bool:
        if self.cache is None:
            return False
        return bool(self.model.cache_needs_recompute(self.cache.get_seq_length(), self.length))

    def _all_positions(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Position ids of every token so far (padding counted as in :meth:`prefill`)."""
        mask = self.attention_mask
        if mask is None:
            return torch.arange(self.length, device=input_ids.device).unsqueeze(0).expand(input_ids.shape[0], -1)
        return (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 1)

    def reorder(self, row_index: torch.Tensor) -> None:
        """Reorder batch rows (beam search): row ``i`` continues old row ``row_index[i]``."""
        if self.cache is not None and self.use_cache:
            reorder = getattr(self.model, "reorder_cache", None)  # a model that knows better (DecoderView)
            if callable(reorder):
                reorder(self.cache, row_index)
            else:
                self.cache.reorder_cache(row_index)
        if self._mask is not None:
            self._mask = self._mask.index_select(0, row_index)
        if self._next_position is not None:
            self._next_position = self._next_position.index_select(0, row_index)
        if not self.use_cache and self._positions is not None:
            self._positions = self._positions.index_select(0, row_index)

    def _forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=self.attention_mask,
            position_ids=position_ids,
            past_key_values=self.cache if self.use_cache else None,
            use_cache=self.use_cache,
            return_dict=True,
            **self.forward_kwargs,
        )
        logits = getattr(outputs, "logits", None)
        if logits is None or logits.dim() != 3:  # a base encoder, or a classifier's [batch, labels] logits
            raise GenerationError(
                f"{type(self.model).__name__} cannot generate: its forward returns no next-token logits (no "
                "language-modelling head). Load the checkpoint with AutoModelForCausalLM (decoders) or "
                "AutoModelForSeq2SeqLM (encoder-decoders); for an encoder such as BERT use pipeline('fill-mask')."
            )
        if self.use_cache:
            self.cache = outputs.past_key_values
        if "output_attentions" in self.forward_kwargs or "output_hidden_states" in self.forward_kwargs:
            self.last_outputs = outputs
        # A copy: processors and strategies may keep or change it, and it must not pin the prefill logits.
        return logits[:, -1, :].to(dtype=torch.float32, copy=True)


def _accepts(model: Any, name: str) -> bool:
    try:
        return name in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False
