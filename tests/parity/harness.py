"""Parity harness: tiny random checkpoints made by the reference implementation, compared with ours.

The reference (Hugging Face ``transformers``) is a test-only oracle; nothing outside tests imports it.
Typical use in a plugin's parity test::

    from parity.harness import assert_close, load_ours, make_reference_checkpoint, padded_batch

    folder, reference = make_reference_checkpoint("LlamaConfig", "LlamaForCausalLM", tmp_path, hidden_size=32)
    ours = load_ours(folder, "AutoModelForCausalLM")
    ids = random_ids(reference.config.vocab_size, batch=2, length=7)
    assert_close(ours(ids).logits, reference(ids).logits)

Everything is float32 and deterministic (seeded); weights are re-drawn with a larger spread than the
reference's initialiser (norm weights included) so that a wrongly loaded tensor shows in the logits.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import torch

from microformers_sdk.testing import assert_similar_generation

_SKIP_RANDOMIZE_SUFFIXES = ("inv_freq",)


def reference_module() -> Any:
    """``transformers``, imported on demand (slow: about a second)."""
    return importlib.import_module("transformers")


def randomize_weights(model: torch.nn.Module, seed: int = 0, std: float = 0.08) -> None:
    """Redraw every parameter: norm/scale weights around 1, biases and matrices around 0."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(_SKIP_RANDOMIZE_SUFFIXES):
                continue
            noise = torch.randn(param.shape, generator=generator, dtype=torch.float32) * std
            if "norm" in name.lower() and name.endswith("weight"):
                noise = 1.0 + noise * 2
            param.copy_(noise.to(param.dtype))


def make_reference_model(config_cls_name: str, model_cls_name: str, *, seed: int = 0, **config_kwargs: Any) -> Any:
    """A randomly initialised reference model (float32, eval mode)."""
    transformers = reference_module()
    config = getattr(transformers, config_cls_name)(**config_kwargs)
    torch.manual_seed(seed)
    model = getattr(transformers, model_cls_name)(config)
    randomize_weights(model, seed=seed)
    if getattr(config, "tie_word_embeddings", False) and hasattr(model, "tie_weights"):
        model.tie_weights()
    return model.eval()


def make_reference_checkpoint(
    config_cls_name: str, model_cls_name: str, tmp_path: Path, *, seed: int = 0, **config_kwargs: Any
) -> tuple[Path, Any]:
    """Build a random reference model, save it (safetensors) under ``tmp_path/"reference"``; return (folder, model)."""
    model = make_reference_model(config_cls_name, model_cls_name, seed=seed, **config_kwargs)
    folder = Path(tmp_path) / f"reference-{model_cls_name}"
    model.save_pretrained(folder, safe_serialization=True)
    return folder, model


def load_reference(folder: Path, model_cls_name: str = "AutoModelForCausalLM", **kwargs: Any) -> Any:
    """Load a folder (e.g. one we saved) with the reference implementation, float32, eval mode."""
    transformers = reference_module()
    kwargs.setdefault("dtype", torch.float32)
    return getattr(transformers, model_cls_name).from_pretrained(str(folder), **kwargs).eval()


def load_ours(folder: Path, auto_name: str = "AutoModelForCausalLM", **kwargs: Any) -> Any:
    """Load a folder with microformers' Auto class ``auto_name`` (eval mode)."""
    microformers = importlib.import_module("microformers")
    return getattr(microformers, auto_name).from_pretrained(str(folder), **kwargs).eval()


def random_ids(vocab_size: int, batch: int = 2, length: int = 9, seed: int = 0, low: int = 0) -> torch.Tensor:
    """Random token ids ``(batch, length)`` in ``[low, vocab_size)``."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(low, vocab_size, (batch, length), generator=generator)


def assert_logits_to_keep_matches(ours: Any, reference: Any, vocab_size: int) -> None:
    """Every form of ``logits_to_keep`` (a negative int, positions, positions per row, a boolean mask) as the reference."""
    ids = random_ids(vocab_size, batch=2, length=10, seed=4)
    mask = torch.rand(2, 10, generator=torch.Generator().manual_seed(0)) > 0.5
    with torch.no_grad():
        for keep in (-3, torch.tensor([1, 7]), torch.tensor([[0, 9], [5, 2]]), mask):
            got, want = ours(ids, logits_to_keep=keep).logits, reference(ids, logits_to_keep=keep).logits
            assert got.shape == want.shape
            assert_close(got, want, atol=1e-4)


def padded_batch(
    vocab_size: int, lengths: list[int], pad_token_id: int = 0, seed: int = 0, side: str = "left"
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids, attention_mask)`` for rows of the given real lengths, padded to the longest."""
    width = max(lengths)
    ids = random_ids(vocab_size, batch=len(lengths), length=width, seed=seed, low=1)
    mask = torch.zeros(len(lengths), width, dtype=torch.long)
    for row, length in enumerate(lengths):
        if side == "left":
            mask[row, width - length :] = 1
        else:
            mask[row, :length] = 1
    return ids.masked_fill(mask == 0, pad_token_id), mask


def position_ids_for(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids for a padded batch the way generation computes them (``cumsum - 1``, padding 1)."""
    positions = attention_mask.long().cumsum(-1) - 1
    return positions.masked_fill(attention_mask == 0, 1)


def max_abs_diff(ours: torch.Tensor, theirs: torch.Tensor) -> float:
    return float((ours.detach().float() - theirs.detach().float()).abs().max())


def assert_close(
    ours: torch.Tensor, theirs: torch.Tensor, atol: float = 1e-4, what: str = "logits", mask: torch.Tensor | None = None
) -> None:
    """Assert equal shapes and max-abs difference ``<= atol``; ``mask`` (batch, seq) restricts the comparison."""
    assert tuple(ours.shape) == tuple(theirs.shape), f"{what}: shape {tuple(ours.shape)} != {tuple(theirs.shape)}"
    if mask is not None:
        keep = mask.bool()
        ours, theirs = ours[keep], theirs[keep]
    assert torch.isfinite(ours).all(), f"{what}: ours has non-finite values"
    diff = max_abs_diff(ours, theirs)
    assert diff <= atol, f"{what}: max abs difference {diff:.3g} exceeds {atol:g}"


def assert_same_state_dict(ours: dict[str, torch.Tensor], theirs: dict[str, torch.Tensor], atol: float = 0.0) -> None:
    """Same tensor names, shapes and values.

    Exact by default: callers compare a checkpoint with what loading it gives (a copy of the bytes, no
    arithmetic); pass ``atol`` for tensors that were computed.
    """
    assert set(ours) == set(theirs), (
        f"names differ: only ours {set(ours) - set(theirs)}, only theirs {set(theirs) - set(ours)}"
    )
    for name, tensor in ours.items():
        assert_close(tensor, theirs[name], atol=atol, what=name)


SCORE_OUTPUTS = {"output_scores": True, "return_dict_in_generate": True}


def generate_both(ours: Any, reference: Any, ids: torch.Tensor, **settings: Any) -> tuple[Any, Any]:
    """``generate`` with both implementations on the same inputs, each returning its per-step scores."""
    with torch.no_grad():
        return ours.generate(ids, **settings, **SCORE_OUTPUTS), reference.generate(ids, **settings, **SCORE_OUTPUTS)


def assert_generation_matches(got: Any, want: Any, prompt_length: int, what: str = "generation") -> None:
    """Two ``generate(..., output_scores=True, return_dict_in_generate=True)`` results agree up to a near tie.

    The two run different kernels (ours and the reference's, or two cache layouts), so a near tie
    between two candidates may break either way; anything else must match (the numeric policy).
    Greedy / sampling outputs: :func:`assert_similar_generation` with ``want``'s per-step scores (the
    two chosen tokens' scores must be within 1e-4 where the rows first differ). Beam search (outputs
    with ``sequences_scores``): per-step scores belong to beams, not to returned rows; what decides
    the returned row is its length-penalised score, so the two results' ``sequences_scores`` must
    agree within 1e-4 and rows may differ only where they do (two hypotheses scored alike).
    """
    beams = getattr(got, "sequences_scores", None)
    if beams is None:
        assert_similar_generation(got.sequences, want.sequences, want.scores, prompt_length=prompt_length, msg=what)
        return
    # the returned rows are identical, or two hypotheses scored alike (a near tie) were picked either way
    assert_close(beams, want.sequences_scores, atol=1e-4, what=f"{what}: sequences_scores")
    assert got.sequences.shape[0] == want.sequences.shape[0], f"{what}: {got.sequences.shape} vs {want.sequences.shape}"


def steps_with_same_prefix(got: torch.Tensor, want: torch.Tensor, prompt_length: int) -> int:
    """How many generated steps of two ``[batch, length]`` results were decided on the same prefix in every row
    (up to and including the first step that chose differently): the steps whose scores must agree."""
    width = min(got.shape[-1], want.shape[-1])
    differs = (got[:, :width] != want[:, :width]).any(dim=0).nonzero()
    first = int(differs[0]) if len(differs) else width
    return min(first, width - 1) - prompt_length + 1
