"""The numeric policy of every test suite: floats by tolerance, generated tokens by similarity.

Two computations of the same maths by different kernels, shapes, batch sizes or thread counts
round differently: a sum split over two threads, a matrix product MKL blocks for 8 rows rather than
1, an AVX-512 reduction rather than an AVX2 one. Tests that compare such results with ``==`` pass
on the CPU they were written on and fail on the next one. So:

- :func:`assert_close` compares floats (tensors, arrays, numbers, and lists / tuples / dicts of
  them, such as pipeline outputs) within a tolerance picked by dtype; every other leaf (ints,
  strings, bools, integer tensors) must be equal.
- :func:`assert_similar_generation` compares generated token sequences: they must agree up to the
  first position where they differ, and there the two tokens chosen must have had scores within a
  stated tolerance (a near tie that a rounding difference may break either way); after that, the
  sequences may go their own ways. Without scores, sequences must be identical.

Exact equality (``torch.equal``) stays where the code guarantees it by design (the same kernel on
the same shapes, a copy, an integer computation), with a comment saying which.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch

__all__ = ["DEFAULT_TOLERANCES", "assert_close", "assert_similar_generation", "tolerances"]

# dtype -> (rtol, atol). float32: what different summation orders and blockings of the same fp32
# products give through a few layers of a tiny model (observed differences are around 1e-6).
DEFAULT_TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-5, 1e-5),
    torch.float16: (1e-3, 1e-3),
    torch.bfloat16: (1.6e-2, 1e-2),
}


def tolerances(dtype: torch.dtype) -> tuple[float, float]:
    """``(rtol, atol)`` for values of ``dtype`` computed along different code paths."""
    return DEFAULT_TOLERANCES.get(dtype, DEFAULT_TOLERANCES[torch.float32])


def _is_float_tensor(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and (value.is_floating_point() or value.is_complex())


def _as_tensor(value: Any) -> torch.Tensor | None:
    """A tensor view of a numpy array or tensor; None for anything else."""
    if isinstance(value, torch.Tensor):
        return value
    if type(value).__module__ == "numpy" and hasattr(value, "dtype") and hasattr(value, "shape"):
        return torch.as_tensor(value)
    return None


def _coarser_dtype(a: torch.dtype, b: torch.dtype) -> torch.dtype:
    order = [torch.float64, torch.float32, torch.float16, torch.bfloat16]
    ranks = [order.index(d) if d in order else 1 for d in (a, b)]
    return order[max(ranks)]


def _compare(actual: Any, expected: Any, rtol: float | None, atol: float | None, path: str) -> None:
    actual_tensor, expected_tensor = _as_tensor(actual), _as_tensor(expected)
    if actual_tensor is not None or expected_tensor is not None:
        if actual_tensor is None or expected_tensor is None:
            raise AssertionError(f"{path}: one side is a tensor/array, the other a {type(actual if actual_tensor is None else expected).__name__}")
        _compare_tensors(actual_tensor, expected_tensor, rtol, atol, path)
        return
    if isinstance(expected, Mapping):
        if not isinstance(actual, Mapping):
            raise AssertionError(f"{path}: expected a mapping, got {type(actual).__name__}")
        if set(actual) != set(expected):
            raise AssertionError(f"{path}: keys differ: {sorted(map(str, actual))} vs {sorted(map(str, expected))}")
        for key in expected:
            _compare(actual[key], expected[key], rtol, atol, f"{path}[{key!r}]")
        return
    if isinstance(expected, (list, tuple)) and not isinstance(expected, str):
        if not isinstance(actual, (list, tuple)) or isinstance(actual, str):
            raise AssertionError(f"{path}: expected a sequence, got {type(actual).__name__}")
        if len(actual) != len(expected):
            raise AssertionError(f"{path}: lengths differ: {len(actual)} vs {len(expected)}")
        for index, (a, e) in enumerate(zip(actual, expected)):
            _compare(a, e, rtol, atol, f"{path}[{index}]")
        return
    if isinstance(expected, float) or isinstance(actual, float):
        if isinstance(expected, bool) or isinstance(actual, bool) or not isinstance(actual, (int, float)):
            raise AssertionError(f"{path}: {actual!r} vs {expected!r}")
        default_rtol, default_atol = tolerances(torch.float32)
        r = default_rtol if rtol is None else rtol
        a = default_atol if atol is None else atol
        if math.isnan(expected) and math.isnan(actual):
            return
        if not abs(actual - expected) <= a + r * abs(expected):
            raise AssertionError(f"{path}: {actual!r} vs {expected!r} (|diff| {abs(actual - expected):.3g} > {a:g} + {r:g}*|expected|)")
        return
    if actual != expected:
        raise AssertionError(f"{path}: {actual!r} != {expected!r}")


def _compare_tensors(actual: torch.Tensor, expected: torch.Tensor, rtol: float | None, atol: float | None, path: str) -> None:
    if tuple(actual.shape) != tuple(expected.shape):
        raise AssertionError(f"{path}: shapes differ: {tuple(actual.shape)} vs {tuple(expected.shape)}")
    if not (_is_float_tensor(actual) or _is_float_tensor(expected)):
        # integers and booleans: exact by nature
        if not torch.equal(actual.cpu(), expected.cpu().to(actual.dtype)):
            mismatches = int((actual.cpu() != expected.cpu().to(actual.dtype)).sum())
            raise AssertionError(f"{path}: {mismatches} of {actual.numel()} integer values differ")
        return
    dtype = _coarser_dtype(
        actual.dtype if _is_float_tensor(actual) else torch.float32,
        expected.dtype if _is_float_tensor(expected) else torch.float32,
    )
    default_rtol, default_atol = tolerances(dtype)
    r = default_rtol if rtol is None else rtol
    a = default_atol if atol is None else atol
    got = actual.detach().cpu().to(torch.float64)
    want = expected.detach().cpu().to(torch.float64)
    same_nan = torch.isnan(got) & torch.isnan(want)
    same_inf = torch.isinf(got) & (got == want)
    within = torch.isfinite(got) & torch.isfinite(want) & ((got - want).abs() <= a + r * want.abs())
    ok = within | same_nan | same_inf
    if not bool(ok.all()):
        diff = (got - want).abs().nan_to_num(nan=float("inf")).masked_fill(ok, 0)
        where = int(diff.argmax()) if diff.numel() else 0
        raise AssertionError(
            f"{path}: {int((~ok).sum())} of {ok.numel()} values differ beyond rtol={r:g}, atol={a:g}; "
            f"largest |diff| {float(diff.max()):.3g} at flat index {where} "
            f"({float(got.flatten()[where])!r} vs {float(want.flatten()[where])!r})"
        )


def assert_close(actual: Any, expected: Any, *, rtol: float | None = None, atol: float | None = None, msg: str = "") -> None:
    """Assert ``actual`` equals ``expected`` within the dtype's tolerance (:data:`DEFAULT_TOLERANCES`).

    Floats (tensors, numpy arrays, Python floats) pass when ``|actual - expected| <= atol + rtol *
    |expected|`` elementwise; the coarser of the two dtypes picks the defaults. Ints, strings, bools
    and integer tensors must be equal. Lists, tuples and mappings are compared element by element,
    with the same structure required. ``msg`` prefixes the failure message.
    """
    _compare(actual, expected, rtol, atol, msg or "value")


def _rows(sequences: Any) -> list[list[int]]:
    if isinstance(sequences, torch.Tensor):
        if sequences.is_floating_point():
            raise TypeError("assert_similar_generation compares token ids, not floats")
        return [list(map(int, row)) for row in sequences.reshape(-1, sequences.shape[-1]).tolist()] if sequences.dim() > 1 else [list(map(int, sequences.tolist()))]
    sequences = list(sequences)
    if sequences and isinstance(sequences[0], int):
        return [[int(t) for t in sequences]]
    return [[int(t) for t in row] for row in sequences]


def assert_similar_generation(
    ours: Any,
    theirs: Any,
    scores: Sequence[torch.Tensor] | None = None,
    *,
    prompt_length: int = 0,
    tie_tolerance: float = 1e-4,
    pad_token_id: int | None = None,
    msg: str = "",
) -> None:
    """Assert two generations are the same up to a near tie.

    ``ours`` and ``theirs``: token ids, ``[batch, length]`` tensors or lists of rows (one row: a 1-D
    tensor or a list of ints). ``scores``: what decided each generated token, one ``[batch, vocab]``
    tensor per generated step (``generate(..., output_scores=True)``'s ``scores`` or ``logits``),
    from either side; step ``s`` chose the token at position ``prompt_length + s``.

    Each row must equal the other side's up to its first differing position. There, the scores of
    the two tokens chosen must differ by at most ``tie_tolerance`` (absolute, or relative to the
    larger magnitude, whichever is looser); after that the rows may differ in anything, length
    included. Without ``scores`` every row must be identical. Trailing ``pad_token_id`` tokens are
    ignored, so rows that stopped at different lengths in a padded batch compare as such.
    """
    label = f"{msg}: " if msg else ""
    our_rows, their_rows = _rows(ours), _rows(theirs)
    if len(our_rows) != len(their_rows):
        raise AssertionError(f"{label}{len(our_rows)} sequences vs {len(their_rows)}")
    for row, (mine, other) in enumerate(zip(our_rows, their_rows)):
        if pad_token_id is not None:
            while mine and mine[-1] == pad_token_id:
                mine = mine[:-1]
            while other and other[-1] == pad_token_id:
                other = other[:-1]
        if mine == other:
            continue
        first = next((i for i, (a, b) in enumerate(zip(mine, other)) if a != b), min(len(mine), len(other)))
        if scores is None:
            raise AssertionError(
                f"{label}row {row} differs from position {first}: {mine[first:first + 8]} vs {other[first:first + 8]} "
                "(no scores given, so no tie can explain it)"
            )
        step = first - prompt_length
        if first >= min(len(mine), len(other)):
            # one row stopped (its end-of-sequence token, stripped as padding) where the other went on
            if pad_token_id is None or not 0 <= step < len(scores):
                raise AssertionError(
                    f"{label}row {row}: one sequence is a strict prefix of the other (lengths {len(mine)} and {len(other)})"
                )
            longer = other if len(mine) < len(other) else mine
            step_scores = scores[step][row].detach().float().cpu()
            _check_tie(label, row, first, float(step_scores[pad_token_id]), float(step_scores[longer[first]]), tie_tolerance)
            continue
        if step < 0:
            raise AssertionError(f"{label}row {row} differs at position {first}, inside the prompt ({prompt_length} tokens)")
        if step >= len(scores):
            raise AssertionError(f"{label}row {row} differs at generated step {step}, but scores cover only {len(scores)} steps")
        step_scores = scores[step][row].detach().float().cpu()
        _check_tie(label, row, first, float(step_scores[mine[first]]), float(step_scores[other[first]]), tie_tolerance)


def _check_tie(label: str, row: int, position: int, a: float, b: float, tolerance: float) -> None:
    gap = abs(a - b)
    allowed = max(tolerance, tolerance * max(abs(a), abs(b)))
    if not (math.isfinite(a) and math.isfinite(b)) or gap > allowed:
        raise AssertionError(
            f"{label}row {row} differs at position {position}, where the two tokens' scores were {a:.6g} and {b:.6g} "
            f"(gap {gap:.3g} > {allowed:.3g}): not a near tie, a real difference"
        )
