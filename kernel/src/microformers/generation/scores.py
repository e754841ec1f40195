"""``compute_transition_scores``: the score each generated token got, picked out of ``generate``'s per-step scores."""

from __future__ import annotations

import torch

from ..errors import GenerationError


def compute_transition_scores(
    sequences: torch.Tensor,
    scores: tuple[torch.Tensor, ...] | list[torch.Tensor],
    beam_indices: torch.Tensor | None = None,
    normalize_logits: bool = False,
) -> torch.Tensor:
    """The score of each generated token, ``(rows, generated)``.

    ``scores`` holds one ``(score_rows, vocab)`` tensor per step (``output_scores``/``output_logits``);
    ``sequences`` ends with the generated tokens. Without ``beam_indices`` row ``i`` of the result reads
    row ``i`` of every step. With them (beam search), ``beam_indices[i, t]`` is the row of step ``t`` that
    token ``t`` of sequence ``i`` came from, ``-1`` past that sequence's end (scored 0); the result then has
    as many columns as the longest sequence has steps. ``normalize_logits`` log-softmaxes each step first.
    """
    if not scores:
        raise GenerationError("compute_transition_scores needs the per-step scores (output_scores=True)")
    per_step = torch.stack(tuple(scores), dim=1)  # (score_rows, steps, vocab)
    if normalize_logits:
        per_step = torch.log_softmax(per_step, dim=-1)
    device = per_step.device
    if beam_indices is None:
        origin = torch.arange(per_step.shape[0], device=device).unsqueeze(1).repeat(1, per_step.shape[1])
    else:
        origin = beam_indices.to(device)
    live = origin >= 0
    steps = int(live.sum(dim=1).max())
    live, origin = live[:, :steps], origin[:, :steps].clamp(min=0)
    generated = sequences[:, sequences.shape[-1] - steps :].to(device)
    step_of = torch.arange(steps, device=device).expand_as(origin)
    rows = per_step[origin, step_of]  # (rows, steps, vocab): the score row each token was chosen from
    picked = rows.gather(-1, generated.unsqueeze(-1)).squeeze(-1)
    return torch.where(live, picked, torch.zeros_like(picked))
