"""The conformance checks, as plain functions any test can call.

Each ``check_*`` function raises ``AssertionError`` with a message saying what broke; the pytest
suite in :mod:`microformers_sdk.testing.suite` runs them for every model class of a plugin.
Models are compared through their "main" outputs: every floating tensor field of the returned
``ModelOutput`` except ``loss``, ``past_key_values``, ``hidden_states`` and ``attentions``.
A field whose second dimension equals the input length is positional (compared token by token);
any other field is per-row (pooled logits, ...).
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

NOT_COMPARED = ("loss", "past_key_values", "hidden_states", "attentions", "cross_attentions")
LABEL_ARGUMENTS = ("labels", "start_positions", "end_positions", "next_sentence_label")


# -- building models and inputs -----------------------------------------------------------------
def randomize_parameters(model: torch.nn.Module, seed: int = 0, std: float = 0.1) -> torch.nn.Module:
    """Redraw every parameter with a wide spread (norm weights around 1) so a wrong computation shows."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if not param.is_floating_point():
                continue
            noise = torch.randn(param.shape, generator=generator) * std
            if "norm" in name.lower() and name.endswith("weight"):
                noise = 1.0 + noise
            param.copy_(noise.to(param.dtype))
    return model


def build_model(model_class: type, config: Any, seed: int = 0) -> Any:
    """``model_class(config)`` with randomized parameters, in eval mode (no dropout)."""
    torch.manual_seed(seed)
    model = model_class(copy.deepcopy(config))
    randomize_parameters(model, seed=seed)
    if hasattr(model, "tie_weights"):
        model.tie_weights()
    return model.eval()


def forward_parameters(model: Any) -> set[str]:
    """The names ``model.forward`` accepts."""
    return set(inspect.signature(model.forward).parameters)


def accepts_labels(model_class: type) -> bool:
    return bool(set(inspect.signature(model_class.forward).parameters) & set(LABEL_ARGUMENTS))


def supports_cache(model_class: type) -> bool:
    """Whether the class's forward takes ``past_key_values`` and ``use_cache`` (an incremental decoder)."""
    return {"past_key_values", "use_cache"} <= set(inspect.signature(model_class.forward).parameters)


def random_token_ids(
    config: Any, batch_size: int, length: int, seed: int = 0, avoid: int | None = None
) -> torch.Tensor:
    """Token ids in ``[0, vocab_size)`` that never equal ``avoid`` (the padding id)."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, config.vocab_size, (batch_size, length), generator=generator)
    if avoid is not None:
        ids = torch.where(ids == avoid, (ids + 1) % config.vocab_size, ids)
    return ids


def pad_rows(rows: list[torch.Tensor], pad_token_id: int, side: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids, attention_mask)`` for 1-D rows padded to the longest on ``side`` ("left"/"right")."""
    width = max(len(row) for row in rows)
    ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for index, row in enumerate(rows):
        span = slice(width - len(row), width) if side == "left" else slice(0, len(row))
        ids[index, span] = row
        mask[index, span] = 1
    return ids, mask


def main_outputs(output: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """The floating tensor fields of a model output that describe its prediction."""
    return {
        name: value
        for name, value in output.items()
        if name not in NOT_COMPARED and isinstance(value, torch.Tensor) and value.is_floating_point()
    }


def default_labels(model: Any, inputs: Mapping[str, torch.Tensor], seed: int = 0) -> dict[str, torch.Tensor]:
    """Labels shaped after the model's own outputs (the head's kind is read off its logits).

    Positional logits ``(batch, length, n)`` get token labels in ``[0, n)``; per-row logits
    ``(batch, n)`` get class labels (float targets when ``n == 1``: regression); ``start_logits`` get
    ``start_positions``/``end_positions``; a ``next_sentence_label`` argument gets 0/1 labels.
    """
    accepted = forward_parameters(model)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        output = model(**inputs)
    ids = inputs["input_ids"]
    batch, length = ids.shape
    labels: dict[str, torch.Tensor] = {}
    if "start_positions" in accepted and output.get("start_logits") is not None:
        labels["start_positions"] = torch.randint(0, length, (batch,), generator=generator)
        labels["end_positions"] = torch.randint(0, length, (batch,), generator=generator)
    if "labels" in accepted:
        logits = output.get("logits")
        if logits is None:
            logits = output.get("prediction_logits")
        if logits is None:
            raise AssertionError(
                f"{type(model).__name__}.forward takes labels but returns no logits; override make_labels()"
            )
        classes = logits.shape[-1]
        if logits.dim() == 3:
            labels["labels"] = torch.randint(0, classes, (batch, length), generator=generator)
        elif classes == 1:
            labels["labels"] = torch.randn(batch, generator=generator)
        else:
            labels["labels"] = torch.randint(0, classes, (batch,), generator=generator)
    if "next_sentence_label" in accepted:
        labels["next_sentence_label"] = torch.randint(0, 2, (batch,), generator=generator)
    return labels


# -- comparisons ------------------------------------------------------------------------------
def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.detach().float() - b.detach().float()).abs().max()) if a.numel() else 0.0


def assert_outputs_close(
    got: Mapping[str, torch.Tensor], want: Mapping[str, torch.Tensor], atol: float, what: str
) -> None:
    assert set(got) == set(want), f"{what}: output fields differ: {sorted(got)} vs {sorted(want)}"
    for name, expected in want.items():
        actual = got[name]
        assert tuple(actual.shape) == tuple(expected.shape), (
            f"{what}: '{name}' has shape {tuple(actual.shape)}, expected {tuple(expected.shape)}"
        )
        assert torch.isfinite(actual.float()).all(), f"{what}: '{name}' has non-finite values"
        diff = _max_diff(actual, expected)
        assert diff <= atol, f"{what}: '{name}' differs by {diff:.3g} (allowed {atol:g})"


def _row_view(
    outputs: Mapping[str, torch.Tensor], row: int, length: int, positions: torch.Tensor | slice
) -> dict[str, torch.Tensor]:
    """One row of each output; positional fields restricted to ``positions``."""
    view = {}
    for name, value in outputs.items():
        if value.dim() >= 2 and value.shape[1] == length:
            view[name] = value[row, positions]
        else:
            view[name] = value[row]
    return view


# -- the checks -------------------------------------------------------------------------------
def check_save_load_round_trip(model: Any, inputs: Mapping[str, torch.Tensor], folder: Path) -> Any:
    """``save_pretrained`` then ``from_pretrained`` gives the same config, tensors and outputs."""
    model.save_pretrained(folder)
    reloaded = type(model).from_pretrained(folder).eval()
    assert type(reloaded) is type(model), f"from_pretrained returned a {type(reloaded).__name__}"
    mine, theirs = model.state_dict(), reloaded.state_dict()
    assert set(mine) == set(theirs), (
        f"state dict names changed in the round trip: lost {sorted(set(mine) - set(theirs))}, "
        f"gained {sorted(set(theirs) - set(mine))}"
    )
    for name, tensor in mine.items():
        assert tensor.dtype == theirs[name].dtype, f"'{name}' came back as {theirs[name].dtype}, was {tensor.dtype}"
        assert torch.equal(tensor, theirs[name]), f"'{name}' changed in the save/load round trip"
    assert reloaded.config.to_dict() == model.config.to_dict(), "the config changed in the save/load round trip"
    with torch.no_grad():
        assert_outputs_close(
            main_outputs(reloaded(**inputs)), main_outputs(model(**inputs)), atol=1e-6, what="reloaded model"
        )
    return reloaded


def check_dtype_casting(
    model: Any,
    inputs: Mapping[str, torch.Tensor],
    folder: Path,
    dtype: torch.dtype = torch.bfloat16,
    eps_multiple: float = 4.0,
) -> None:
    """The model runs in ``dtype`` (cast or loaded with ``dtype=``), its outputs stay near float32's.

    "Near" is ``eps_multiple`` machine epsilons of ``dtype`` relative to ``1 + max|output|``: for bfloat16
    (eps 2**-7) 0.031 of the scale. The tiny models of the llama, gpt2, bert and wav2vec2 plugins stay
    within 0.0102 (1.3 eps), so a correct model passes with a 3x margin while an error of a few percent fails.
    On CPUs with AMX/AVX512-BF16, oneDNN's bfloat16 convolutions take wav2vec2's feature encoder to 4.25 eps
    (as in the reference implementation); a conformance class raises ``cast_eps_multiple`` for such a model.
    """
    rtol = eps_multiple * torch.finfo(dtype).eps
    with torch.no_grad():
        reference = main_outputs(model(**inputs))
    model.save_pretrained(folder)
    loaded = type(model).from_pretrained(folder, dtype=dtype).eval()
    floating = [name for name, param in loaded.named_parameters() if param.is_floating_point()]
    wrong = [name for name in floating if loaded.get_parameter(name).dtype != dtype]
    assert not wrong, f"from_pretrained(dtype={dtype}) left {wrong[:5]} in another dtype"
    assert loaded.dtype == dtype, f"from_pretrained(dtype={dtype}) reports model.dtype {loaded.dtype}"
    cast = copy.deepcopy(model).to(dtype)
    for what, candidate in (("from_pretrained(dtype=...)", loaded), ("model.to(dtype)", cast)):
        with torch.no_grad():
            got = main_outputs(candidate(**inputs))
        assert set(got) == set(reference), f"{what}: output fields differ"
        for name, value in got.items():
            assert value.dtype == dtype, f"{what}: '{name}' is {value.dtype}, expected {dtype}"
            scale = 1.0 + float(reference[name].abs().max())
            diff = _max_diff(value, reference[name])
            assert diff <= rtol * scale, (
                f"{what}: '{name}' is {diff:.3g} away from float32, more than {dtype} rounding explains "
                f"({rtol * scale:.3g} = {eps_multiple:g} eps x scale {scale:.3g})"
            )
    saved = folder.parent / f"{folder.name}-{str(dtype).removeprefix('torch.')}"
    loaded.save_pretrained(saved)
    assert loaded.config.dtype == str(dtype).removeprefix("torch."), "save_pretrained did not record the dtype"
    auto = type(model).from_pretrained(saved).eval()
    assert auto.dtype == dtype, f"dtype='auto' loading should keep the saved {dtype}, got {auto.dtype}"


def check_batch_consistency(model: Any, inputs: Mapping[str, torch.Tensor], atol: float = 1e-5) -> None:
    """Each row of a batch gives what it gives alone."""
    ids = inputs["input_ids"]
    with torch.no_grad():
        batched = main_outputs(model(**inputs))
        for row in range(ids.shape[0]):
            alone = main_outputs(model(**{k: v[row : row + 1] for k, v in inputs.items()}))
            want = _row_view(alone, 0, ids.shape[1], slice(None))
            got = _row_view(batched, row, ids.shape[1], slice(None))
            assert_outputs_close(got, want, atol, what=f"batch row {row} vs alone")


def check_padding_invariance(
    model: Any,
    config: Any,
    *,
    padding_side: str,
    pad_token_id: int,
    lengths: tuple[int, ...] = (7, 4, 2),
    seed: int = 1,
    atol: float = 1e-5,
) -> None:
    """A padded row (with its attention mask) gives, on its real tokens, what the row gives unpadded."""
    rows = [random_token_ids(config, 1, n, seed=seed + i, avoid=pad_token_id)[0] for i, n in enumerate(lengths)]
    ids, mask = pad_rows(rows, pad_token_id, padding_side)
    width = ids.shape[1]
    with torch.no_grad():
        padded = main_outputs(model(input_ids=ids, attention_mask=mask))
        for index, row in enumerate(rows):
            alone = main_outputs(model(input_ids=row[None], attention_mask=torch.ones(1, len(row), dtype=torch.long)))
            real = mask[index].bool()
            got = _row_view(padded, index, width, real)
            want = _row_view(alone, 0, len(row), slice(None))
            assert_outputs_close(got, want, atol, what=f"{padding_side}-padded row {index} vs unpadded")


def check_cache_equivalence(
    model: Any, config: Any, *, pad_token_id: int, prefill: int = 3, seed: int = 2, atol: float = 1e-5
) -> None:
    """Prefill then one token at a time through the KV cache equals one full forward (left-padded batch)."""
    rows = [random_token_ids(config, 1, n, seed=seed + i, avoid=pad_token_id)[0] for i, n in enumerate((8, 5))]
    ids, mask = pad_rows(rows, pad_token_id, "left")
    width = ids.shape[1]
    with torch.no_grad():
        full = main_outputs(model(input_ids=ids, attention_mask=mask, use_cache=False))
        output = model(input_ids=ids[:, :prefill], attention_mask=mask[:, :prefill], use_cache=True)
        cache = output.get("past_key_values")
        assert cache is not None, f"{type(model).__name__} returned no past_key_values with use_cache=True"
        assert cache.get_seq_length() == prefill, f"the cache holds {cache.get_seq_length()} positions, not {prefill}"
        steps = [main_outputs(output)]
        for position in range(prefill, width):
            output = model(
                input_ids=ids[:, position : position + 1],
                attention_mask=mask[:, : position + 1],
                past_key_values=cache,
                use_cache=True,
            )
            cache = output["past_key_values"]
            steps.append(main_outputs(output))
    assert cache.get_seq_length() == width
    real = mask.bool()
    for name, value in full.items():
        if value.dim() >= 2 and value.shape[1] == width:
            stepped = torch.cat([step[name] for step in steps], dim=1)
            assert_outputs_close(
                {name: stepped[real]}, {name: value[real]}, atol, what="cached decoding vs full forward"
            )
        else:
            assert_outputs_close({name: steps[-1][name]}, {name: value}, atol, what="cached decoding vs full forward")


def check_loss(model: Any, inputs: Mapping[str, torch.Tensor], labels: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """Given labels, the model returns a finite scalar loss that autograd can differentiate."""
    output = model(**inputs, **labels)
    loss = output.get("loss")
    assert loss is not None, f"{type(model).__name__} returned no loss although {sorted(labels)} were given"
    assert loss.dim() == 0, f"the loss should be a scalar, got shape {tuple(loss.shape)}"
    assert torch.isfinite(loss), "the loss is not finite"
    assert loss.requires_grad, "the loss does not depend on the parameters"
    assert output[0] is loss, "the loss must be the first field of the output"
    without = model(**inputs).get("loss")
    assert without is None, "a loss was returned although no labels were given"
    return loss


def check_gradients_flow(
    model: Any,
    inputs: Mapping[str, torch.Tensor],
    labels: Mapping[str, torch.Tensor],
    exempt: tuple[str, ...] = (),
) -> None:
    """Backpropagating the loss (or the outputs' sum) reaches every trainable parameter with finite values."""
    import re

    model.zero_grad(set_to_none=True)
    output = model(**inputs, **labels)
    target = output.get("loss")
    if target is None:
        target = sum(value.float().sum() for value in main_outputs(output).values())
    target.backward()
    patterns = [re.compile(p) for p in exempt]
    missing, zero, broken = [], [], []
    for name, param in model.named_parameters():
        if not param.requires_grad or any(p.search(name) for p in patterns):
            continue
        if param.grad is None:
            missing.append(name)
        elif not torch.isfinite(param.grad).all():
            broken.append(name)
        elif not bool(param.grad.any()):
            zero.append(name)
    assert not missing, f"no gradient reached {missing[:8]}"
    assert not broken, f"non-finite gradients in {broken[:8]}"
    assert not zero, f"all-zero gradients in {zero[:8]}"
    model.zero_grad(set_to_none=True)
