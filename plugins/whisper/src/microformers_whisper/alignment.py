"""Token timestamps from cross-attention: the alignment heads, a median filter and dynamic time warping.

A few decoder cross-attention heads (``generation_config.alignment_heads``, ``[layer, head]`` pairs) follow the
audio as the text goes on. Their weights over the encoder frames, one row per decoded token, are standardised per
frame over the tokens, smoothed along time by a median filter (``config.median_filter_width``) and averaged over the
heads; dynamic time warping then finds the monotonic path through ``-weights`` of least cost, and each token's time
is the frame where the path first reaches its row. The decoder prompt's tokens get 0 s and the last token (the
eos, which no step attended from) repeats the time of the one before, as the reference does.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from microformers import GenerationError

__all__ = ["dynamic_time_warping", "median_filter", "token_timestamps"]


def median_filter(values: torch.Tensor, width: int) -> torch.Tensor:
    """Median over a sliding window of ``width`` (odd) along the last dimension, edges mirrored (no edge repeat).

    A last dimension no longer than ``width // 2`` is returned as it is (it cannot be mirrored)."""
    if width <= 0 or width % 2 != 1:
        raise GenerationError(f"median_filter_width={width}: the median filter needs an odd positive width")
    half = width // 2
    if values.shape[-1] <= half:
        return values
    shape = values.shape
    flat = values.reshape(-1, 1, shape[-1])  # reflect padding wants (N, C, L)
    padded = torch.nn.functional.pad(flat, (half, half), mode="reflect").reshape(*shape[:-1], -1)
    return padded.unfold(-1, width, 1).sort(dim=-1).values[..., half]


def dynamic_time_warping(cost_matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The least-cost monotonic path through ``cost_matrix`` (tokens x frames) from its first cell to its last.

    Moves are diagonal, down (next token, same frame) or right (same token, next frame); a tie goes to the
    right move, then down (the reference's order). Accumulated costs are kept in float32 as the reference keeps
    them, so equal inputs give equal paths. Cells on one anti-diagonal only depend on the two before, so each
    anti-diagonal is computed at once. Returns ``(token_indices, frame_indices)`` along the path.
    """
    tokens, frames = cost_matrix.shape
    cost = np.full((tokens + 1, frames + 1), np.inf, dtype=np.float32)
    cost[0, 0] = 0
    move = np.full((tokens + 1, frames + 1), -1, dtype=np.int8)
    matrix = np.asarray(cost_matrix, dtype=np.float64)
    for diagonal in range(2, tokens + frames + 1):
        rows = np.arange(max(1, diagonal - frames), min(tokens, diagonal - 1) + 1)
        cols = diagonal - rows
        diag, up, left = cost[rows - 1, cols - 1], cost[rows - 1, cols], cost[rows, cols - 1]
        step = np.where((diag < up) & (diag < left), 0, np.where((up < diag) & (up < left), 1, 2))
        best = np.where(step == 0, diag, np.where(step == 1, up, left))
        cost[rows, cols] = matrix[rows - 1, cols - 1] + best.astype(np.float64)
        move[rows, cols] = step
    move[0, :] = 2
    move[:, 0] = 1
    i, j = tokens, frames
    token_path, frame_path = [], []
    while i > 0 or j > 0:
        token_path.append(i - 1)
        frame_path.append(j - 1)
        step = move[i, j]
        if step == 0:
            i, j = i - 1, j - 1
        elif step == 1:
            i -= 1
        else:
            j -= 1
    return np.array(token_path[::-1]), np.array(frame_path[::-1])


def _alignment_weights(cross_attentions: Sequence[Any], alignment_heads: Sequence[Sequence[int]]) -> torch.Tensor:
    """``(rows, heads, steps, frames)``: each generate step's cross-attention of the chosen heads, steps joined."""
    layers = len(cross_attentions[0])
    try:
        per_layer = [torch.cat([step[layer] for step in cross_attentions], dim=2) for layer in range(layers)]
        chosen = [per_layer[int(layer)][:, int(head)] for layer, head in alignment_heads]
    except (IndexError, TypeError, ValueError) as exc:
        raise GenerationError(
            f"generation_config.alignment_heads={list(alignment_heads)} must be [layer, head] pairs within this "
            f"model's {layers} decoder layers and their heads"
        ) from exc
    return torch.stack(chosen, dim=1)


def token_timestamps(
    outputs: Any,
    alignment_heads: Sequence[Sequence[int]],
    median_filter_width: int,
    prompt_length: int,
    num_frames: Sequence[int] | None = None,
    time_precision: float = 0.02,
) -> torch.Tensor:
    """``(rows, length)`` seconds per token of ``outputs.sequences`` (prompt included) from the cross-attention
    weights ``generate(..., output_attentions=True, return_dict_in_generate=True)`` kept.

    ``num_frames`` (each row's log-mel frames, from the feature extractor's attention mask) limits the alignment to
    the audio that is there: two frames per encoder position."""
    weights = _alignment_weights(outputs.cross_attentions, alignment_heads)
    sequences = outputs.sequences
    steps = None
    beam_indices = getattr(outputs, "beam_indices", None)
    if beam_indices is not None:
        # beam rows moved between steps: follow each returned sequence's beam back through the steps (the
        # prompt's rows, all computed in the first step, come from that step's beam)
        steps = int((beam_indices != -1).sum(-1).max())
        beams = beam_indices[:, :steps]
        if prompt_length > 1:
            steps += prompt_length - 1
            beams = torch.cat([beams[:, :1].expand(-1, prompt_length - 1), beams], dim=-1)
        beams = beams.masked_fill(beams == -1, 0)
        weights = torch.stack([weights[beams[:, t], :, t] for t in range(beams.shape[1])], dim=2)
    length = steps if steps is not None else weights.shape[2]
    rows = sequences.shape[0]
    times = torch.zeros(rows, length + 1, dtype=torch.float32, device=sequences.device)
    weights = weights[:, :, prompt_length:]
    if weights.shape[2] == 0:
        return times
    for row in range(rows):
        matrix = weights[row]
        if num_frames is not None:
            limit = int(num_frames[row]) // 2
            matrix = matrix[..., :limit]
            if limit < 0 and len(set(num_frames)) == 1:
                # a window that starts after the end of audio of one length: the reference crops the weights of
                # such a batch a second time, which leaves no frame, and every token gets -time_precision; kept
                # for equal results
                matrix = matrix[..., :limit]
        if matrix.shape[-1] == 0:
            token_path, frame_path = np.arange(matrix.shape[-2]), np.full(matrix.shape[-2], -1)
        else:
            with warnings.catch_warnings():  # one token: a zero deviation (and NaN weights), as in the reference
                warnings.simplefilter("ignore", UserWarning)
                std = torch.std(matrix, dim=-2, keepdim=True, unbiased=False)
            mean = torch.mean(matrix, dim=-2, keepdim=True)
            matrix = median_filter((matrix - mean) / std, median_filter_width).mean(dim=0)
            token_path, frame_path = dynamic_time_warping(-matrix.cpu().double().numpy())
        first_of_token = np.diff(token_path, prepend=token_path[0] - 1).astype(bool)
        jump_times = torch.tensor(frame_path[first_of_token] * time_precision)
        times[row] = torch.cat([torch.zeros(prompt_length), jump_times, jump_times[-1:]])
    return times
