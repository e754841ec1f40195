"""The start of a decoder's forward pass, shared by decoder models: validated inputs, embeddings,
the KV cache and position ids, and the output flags resolved against the config.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import torch

from microformers.errors import InputError

from .cache import Cache, DynamicCache, as_cache
from .masks import position_ids_from_attention_mask


@attrs.define  # not frozen: torch.compile cannot trace a frozen class's __init__ (object.__setattr__)
class DecoderInputs:
    inputs_embeds: torch.Tensor
    cache: Cache | None
    past_length: int
    position_ids: torch.Tensor
    use_cache: bool
    output_attentions: bool
    output_hidden_states: bool
    return_dict: bool


def prepare_decoder_inputs(
    model: Any,
    embed: Callable[[torch.Tensor], torch.Tensor],
    *,
    input_ids: torch.Tensor | None,
    inputs_embeds: torch.Tensor | None,
    attention_mask: torch.Tensor | None,
    position_ids: torch.Tensor | None,
    past_key_values: Any,
    use_cache: bool | None,
    output_attentions: bool | None,
    output_hidden_states: bool | None,
    return_dict: bool | None,
) -> DecoderInputs:
    """Embed ``input_ids`` (or take ``inputs_embeds``), set up the cache and derive position ids.

    ``None`` flags take the config's value; a missing cache becomes a :class:`DynamicCache` when
    ``use_cache``; position ids come from the attention mask (left padding) offset by the cache length.
    """
    config = model.config
    if (input_ids is None) == (inputs_embeds is None):
        raise InputError(f"{type(model).__name__}.forward needs exactly one of input_ids or inputs_embeds")
    use_cache = getattr(config, "use_cache", True) if use_cache is None else use_cache
    if inputs_embeds is None:
        inputs_embeds = embed(input_ids)
    cache = as_cache(past_key_values)
    if use_cache and cache is None:
        cache = DynamicCache()
    past_length = cache.get_seq_length() if cache is not None else 0
    if position_ids is None:
        position_ids = position_ids_from_attention_mask(
            attention_mask, past_length, inputs_embeds.shape[1], device=inputs_embeds.device
        )
    return DecoderInputs(
        inputs_embeds=inputs_embeds,
        cache=cache,
        past_length=past_length,
        position_ids=position_ids,
        use_cache=bool(use_cache),
        output_attentions=config.output_attentions if output_attentions is None else output_attentions,
        output_hidden_states=config.output_hidden_states if output_hidden_states is None else output_hidden_states,
        return_dict=config.return_dict if return_dict is None else return_dict,
    )
