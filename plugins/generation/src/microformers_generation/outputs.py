"""What ``generate(..., return_dict_in_generate=True)`` returns."""

from __future__ import annotations

from typing import Any

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
