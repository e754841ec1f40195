"""What ``generate(..., return_dict_in_generate=True)`` returns, and ``compute_transition_scores`` over it."""

from __future__ import annotations

from typing import Any

import torch

from microformers.generation import compute_transition_scores as transition_scores
from microformers.outputs import ModelOutput


class GenerateDecoderOnlyOutput(ModelOutput):
    """``sequences`` ``(batch * num_return_sequences, length)`` (prompt included); ``scores`` / ``logits``:
    one ``(batch, vocab)`` tensor per generated token (processed / raw), when asked for."""

    sequences: Any
    scores: Any
    logits: Any
    attentions: Any
    hidden_states: Any
    past_key_values: Any


class GenerateBeamDecoderOnlyOutput(ModelOutput):
    """Beam search output: adds ``sequences_scores`` (length-penalised log-probability of each returned
    sequence) and ``beam_indices`` (which beam each generated token came from)."""

    sequences: Any
    sequences_scores: Any
    scores: Any
    logits: Any
    beam_indices: Any
    attentions: Any
    hidden_states: Any
    past_key_values: Any


class GenerateEncoderDecoderOutput(ModelOutput):
    """An encoder-decoder's output: ``sequences`` are decoder tokens (the start token first); the encoder's
    attentions / hidden states once, the decoder's and the cross-attentions one entry per generated token."""

    sequences: Any
    scores: Any
    logits: Any
    encoder_attentions: Any
    encoder_hidden_states: Any
    decoder_attentions: Any
    cross_attentions: Any
    decoder_hidden_states: Any
    past_key_values: Any


class GenerateBeamEncoderDecoderOutput(ModelOutput):
    """Beam search on an encoder-decoder model (see :class:`GenerateEncoderDecoderOutput`)."""

    sequences: Any
    sequences_scores: Any
    scores: Any
    logits: Any
    beam_indices: Any
    encoder_attentions: Any
    encoder_hidden_states: Any
    decoder_attentions: Any
    cross_attentions: Any
    decoder_hidden_states: Any
    past_key_values: Any


GenerateNonBeamOutput = GenerateDecoderOnlyOutput | GenerateEncoderDecoderOutput
GenerateBeamOutput = GenerateBeamDecoderOnlyOutput | GenerateBeamEncoderDecoderOutput
GenerateOutput = GenerateNonBeamOutput | GenerateBeamOutput


def compute_transition_scores(
    model: Any,
    sequences: torch.Tensor,
    scores: tuple[torch.Tensor, ...],
    beam_indices: torch.Tensor | None = None,
    normalize_logits: bool = False,
) -> torch.Tensor:
    """``model.compute_transition_scores`` as a function (``model`` is unused): the kernel's
    :func:`microformers.generation.compute_transition_scores`."""
    return transition_scores(sequences, scores, beam_indices, normalize_logits)
