"""What ``generate(..., return_dict_in_generate=True)`` returns, and ``compute_transition_scores`` over it."""

from __future__ import annotations

from typing import Any

import torch

from microformers import GenerationError
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


GenerateNonBeamOutput = GenerateDecoderOnlyOutput
GenerateBeamOutput = GenerateBeamDecoderOnlyOutput
GenerateOutput = GenerateDecoderOnlyOutput | GenerateBeamDecoderOnlyOutput


def compute_transition_scores(
    model: Any,
    sequences: torch.Tensor,
    scores: tuple[torch.Tensor, ...],
    beam_indices: torch.Tensor | None = None,
    normalize_logits: bool = False,
) -> torch.Tensor:
    """``model.compute_transition_scores``: the score of each generated token, ``(rows, generated)``.

    ``beam_indices`` (beam search) says which row of ``scores`` each token came from (``-1``: past the
    end, scored 0); ``normalize_logits`` log-softmaxes each step first.
    """
    if not scores:
        raise GenerationError("compute_transition_scores needs the per-step scores (output_scores=True)")
    steps = torch.stack(tuple(scores), dim=1)
    if normalize_logits:
        steps = steps.log_softmax(dim=-1)
    if beam_indices is None:
        beam_indices = torch.arange(steps.shape[0], device=steps.device)[:, None].expand(-1, steps.shape[1])
    valid = beam_indices >= 0
    length = int(valid.sum(dim=-1).max())
    valid = valid[:, :length]
    rows = beam_indices[:, :length].clamp(min=0).to(steps.device)
    positions = torch.arange(length, device=steps.device)[None].expand_as(rows)
    tokens = sequences[:, sequences.shape[-1] - length :].to(steps.device)
    return steps[rows, positions, tokens].masked_fill(~valid.to(steps.device), 0.0)
