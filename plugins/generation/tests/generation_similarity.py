"""Comparing two generations made along different code paths (this library and the reference, the cache and none,
assisted and plain decoding): the same tokens up to a near tie, the same scores while the tokens agree.

Both sides compute the same logits with different kernels or matrix shapes, so the logits differ in the last bits
and a near tie between two tokens may go either way (see ``microformers_sdk.testing.numeric``).
"""

from __future__ import annotations

from typing import Any

import torch

from microformers_sdk.testing import assert_close, assert_similar_generation


def common_steps(ours: torch.Tensor, theirs: torch.Tensor, prompt_length: int) -> int:
    """How many generated steps every row of the two sequence tensors shares."""
    if ours.shape == theirs.shape and torch.equal(ours, theirs):
        return ours.shape[1] - prompt_length
    length = min(ours.shape[1], theirs.shape[1])
    if ours.shape[0] != theirs.shape[0]:
        return 0
    differs = (ours[:, :length] != theirs[:, :length]).any(dim=0).nonzero()
    first = int(differs[0]) if len(differs) else length
    return max(first - prompt_length, 0)


def beam_row_scores(out: Any, scores: Any = None) -> list[torch.Tensor]:
    """Per step, the scores (``out.scores`` unless given, e.g. ``out.logits``) each returned beam search sequence
    chose its token from: the row ``beam_indices`` names."""
    rows = out.beam_indices
    steps = []
    for step, step_scores in enumerate(out.scores if scores is None else scores):
        index = rows[:, step].clamp(min=0) if step < rows.shape[1] else torch.zeros(rows.shape[0], dtype=torch.long)
        steps.append(step_scores[index])
    return steps


def assert_same_generation(
    ours: Any,
    theirs: Any,
    *,
    prompt_length: int,
    pad_token_id: int | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    beams: bool = False,
) -> bool:
    """Two ``return_dict_in_generate=True, output_scores=True`` outputs: the same tokens up to a near tie of
    ``ours.scores`` (beam search: the scores of the beam each sequence came from). Where no row differs: as many
    steps and, for beam search, the same beams and sequence scores (within ``rtol``/``atol``). Without beams, the
    scores of every step before the first difference agree within ``rtol``/``atol`` (beam search: the beams not
    returned may have split at a tie of their own, so their scores are the caller's to compare). Returns whether
    the sequences were identical."""
    scores = beam_row_scores(ours) if beams else ours.scores
    assert_similar_generation(
        ours.sequences, theirs.sequences, scores, prompt_length=prompt_length, pad_token_id=pad_token_id
    )
    if not beams:
        common = common_steps(ours.sequences, theirs.sequences, prompt_length)
        for step, (mine, other) in enumerate(zip(ours.scores, theirs.scores)):
            if step >= common:
                break
            assert_close(mine, other, rtol=rtol, atol=atol, msg=f"scores of step {step}")
    identical = ours.sequences.shape == theirs.sequences.shape and torch.equal(ours.sequences, theirs.sequences)
    if identical:
        assert len(ours.scores) == len(theirs.scores)
        if beams:
            assert torch.equal(ours.beam_indices, theirs.beam_indices)  # integers: which beam, exactly
            assert_close(ours.sequences_scores, theirs.sequences_scores, rtol=rtol, atol=atol)
    return identical
