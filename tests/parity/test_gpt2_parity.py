"""GPT-2 against the reference implementation on tiny random checkpoints, both directions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from parity.harness import (
    assert_close,
    assert_generation_matches,
    assert_logits_to_keep_matches,
    assert_same_state_dict,
    generate_both,
    load_ours,
    load_reference,
    make_reference_checkpoint,
    padded_batch,
    position_ids_for,
    random_ids,
)

pytest.importorskip("transformers")

TINY: dict[str, Any] = {
    "vocab_size": 99,
    "n_embd": 32,
    "n_layer": 2,
    "n_head": 4,
    "n_positions": 32,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
}

# name -> (class name, Auto class, config overrides, labels kind)
CASES: dict[str, tuple[str, str, dict[str, Any], str | None]] = {
    "base": ("GPT2Model", "AutoModel", {}, None),
    "lm-tied": ("GPT2LMHeadModel", "AutoModelForCausalLM", {}, "lm"),
    "lm-untied-inner-relu": ("GPT2LMHeadModel", "AutoModelForCausalLM", {"tie_word_embeddings": False, "n_inner": 40, "activation_function": "relu"}, "lm"),
    "lm-inverse-layer-scaling": ("GPT2LMHeadModel", "AutoModelForCausalLM", {"scale_attn_by_inverse_layer_idx": True}, "lm"),
    "lm-unscaled-upcast": ("GPT2LMHeadModel", "AutoModelForCausalLM", {"scale_attn_weights": False, "reorder_and_upcast_attn": True}, "lm"),
    "seq-single-label": ("GPT2ForSequenceClassification", "AutoModelForSequenceClassification", {"num_labels": 3}, "single"),
    "seq-multi-label": ("GPT2ForSequenceClassification", "AutoModelForSequenceClassification", {"num_labels": 3, "problem_type": "multi_label_classification"}, "multi"),
    "seq-regression": ("GPT2ForSequenceClassification", "AutoModelForSequenceClassification", {"num_labels": 1}, "regression"),
}  # fmt: skip
LENGTHS = [10, 7, 3]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Any, Any]]:
    built: dict[str, tuple[Path, Any, Any]] = {}
    for name, (class_name, auto_name, overrides, _) in CASES.items():
        folder, reference = make_reference_checkpoint(
            "GPT2Config", class_name, tmp_path_factory.mktemp(name), **{**TINY, **overrides}
        )
        built[name] = (folder, reference, load_ours(folder, auto_name))
    return built


def _labels(kind: str | None, ids: torch.Tensor) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(5)
    batch = ids.shape[0]
    if kind is None:
        return {}
    if kind == "lm":
        # Only tokens predicted from a real token are scored: the logits at padding positions differ by
        # design (the reference gives fully masked query rows zero attention output, the SDK lets them see
        # every key), so a label right after the padding would compare two arbitrary numbers.
        scored = torch.zeros_like(ids, dtype=torch.bool)
        scored[:, 1:] = ids[:, :-1] != 0
        return {"labels": ids.masked_fill(~scored, -100)}
    if kind == "single":
        return {"labels": torch.tensor([2, 0, 1])}
    if kind == "multi":
        return {"labels": torch.randint(0, 2, (batch, 3), generator=generator).float()}
    if kind == "regression":
        return {"labels": torch.randn(batch, generator=generator)}
    raise AssertionError(kind)


def _tensor_fields(output: Any) -> dict[str, torch.Tensor]:
    return {k: v for k, v in output.items() if isinstance(v, torch.Tensor)}


@pytest.mark.parametrize("case", CASES)
def test_outputs_and_loss_match_reference_on_left_padded_batch(
    case: str, checkpoints: dict[str, tuple[Path, Any, Any]]
) -> None:
    _, reference, ours = checkpoints[case]
    assert type(ours).__name__ == CASES[case][0]
    ids, mask = padded_batch(TINY["vocab_size"], LENGTHS, pad_token_id=0, seed=2, side="left")
    labels = _labels(CASES[case][3], ids)
    with torch.no_grad():
        # Ours derives position ids from the mask; the reference is given them.
        got = _tensor_fields(ours(ids, attention_mask=mask, **labels))
        want = _tensor_fields(reference(ids, attention_mask=mask, position_ids=position_ids_for(mask), **labels))
    assert set(got) == set(want)
    if labels:
        assert "loss" in got
    for name, tensor in want.items():
        positional = tensor.dim() >= 2 and tensor.shape[1] == ids.shape[1]
        assert_close(got[name], tensor, atol=1e-4, what=name, mask=mask if positional else None)


@pytest.mark.parametrize("case", ["lm-tied", "lm-inverse-layer-scaling"])
def test_hidden_states_and_attentions_match_reference(case: str, checkpoints: dict[str, tuple[Path, Any, Any]]) -> None:
    _, reference, ours = checkpoints[case]
    ids = random_ids(TINY["vocab_size"], batch=2, length=8, seed=3)
    with torch.no_grad():
        got = ours(ids, output_hidden_states=True, output_attentions=True)
        reference.config._attn_implementation = "eager"
        try:
            want = reference(ids, output_hidden_states=True, output_attentions=True)
        finally:
            reference.config._attn_implementation = "sdpa"
    assert len(got.hidden_states) == len(want.hidden_states) == TINY["n_layer"] + 1
    for layer, (mine, theirs) in enumerate(zip(got.hidden_states, want.hidden_states)):
        assert_close(mine, theirs, what=f"hidden_states[{layer}]")
    for layer, (mine, theirs) in enumerate(zip(got.attentions, want.attentions)):
        assert_close(mine, theirs, what=f"attentions[{layer}]")


@pytest.mark.parametrize("case", ["lm-tied", "lm-untied-inner-relu"])
def test_incremental_decoding_matches_reference_full_forward(
    case: str, checkpoints: dict[str, tuple[Path, Any, Any]]
) -> None:
    _, reference, ours = checkpoints[case]
    ids, mask = padded_batch(TINY["vocab_size"], [9, 6], pad_token_id=0, seed=6, side="left")
    steps = []
    with torch.no_grad():
        out = ours(ids[:, :4], attention_mask=mask[:, :4], use_cache=True)
        steps.append(out.logits)
        for t in range(4, ids.shape[1]):
            out = ours(ids[:, t : t + 1], attention_mask=mask[:, : t + 1], past_key_values=out.past_key_values)
            steps.append(out.logits)
        want = reference(ids, attention_mask=mask, position_ids=position_ids_for(mask)).logits
    assert_close(torch.cat(steps, dim=1), want, mask=mask, what="cached logits")


def test_token_type_ids_match_reference(checkpoints: dict[str, tuple[Path, Any, Any]]) -> None:
    _, reference, ours = checkpoints["lm-tied"]
    ids = random_ids(TINY["vocab_size"], batch=2, length=6, seed=8)
    token_types = torch.tensor([[0, 0, 0, 5, 5, 5], [0, 0, 7, 7, 7, 7]])
    with torch.no_grad():
        assert_close(ours(ids, token_type_ids=token_types).logits, reference(ids, token_type_ids=token_types).logits)


@pytest.mark.parametrize("case", CASES)
def test_our_checkpoint_loads_in_reference(
    case: str, checkpoints: dict[str, tuple[Path, Any, Any]], tmp_path: Path
) -> None:
    _, reference, ours = checkpoints[case]
    ours.save_pretrained(tmp_path / "ours")
    reloaded = load_reference(tmp_path / "ours", CASES[case][0])
    assert_same_state_dict(reloaded.state_dict(), reference.state_dict())
    ids = random_ids(TINY["vocab_size"], batch=2, length=7, seed=4, low=1)
    with torch.no_grad():
        got = _tensor_fields(ours(ids))
        want = _tensor_fields(reloaded(ids))
    for name, tensor in want.items():
        assert_close(got[name], tensor, what=name)


def test_original_release_layout_loads(checkpoints: dict[str, tuple[Path, Any, Any]], tmp_path: Path) -> None:
    """The original ``gpt2`` files: no ``transformer.`` prefix, no ``lm_head``, plus ``attn.bias`` mask buffers."""
    from safetensors.torch import load_file, save_file

    folder, reference, _ = checkpoints["lm-tied"]
    state = load_file(str(folder / "model.safetensors"))
    legacy = {key.removeprefix("transformer."): value for key, value in state.items() if key != "lm_head.weight"}
    length = TINY["n_positions"]
    for layer in range(TINY["n_layer"]):
        legacy[f"h.{layer}.attn.bias"] = torch.tril(torch.ones(length, length)).view(1, 1, length, length)
        legacy[f"h.{layer}.attn.masked_bias"] = torch.tensor(-1e4)
    target = tmp_path / "original"
    target.mkdir()
    (target / "config.json").write_text((folder / "config.json").read_text())
    save_file(legacy, str(target / "model.safetensors"), metadata={"format": "pt"})
    ours = load_ours(target, "AutoModelForCausalLM")
    ids = random_ids(TINY["vocab_size"], batch=2, length=7, seed=3)
    with torch.no_grad():
        assert_close(ours(ids).logits, reference(ids).logits)


def test_greedy_generation_matches_reference(checkpoints: dict[str, tuple[Path, Any, Any]]) -> None:
    from microformers import registry

    if registry.get("generation_strategies", "greedy") is None:
        pytest.fail("greedy generation needs the microformers-generation plugin installed")
    _, reference, ours = checkpoints["lm-untied-inner-relu"]
    ids, mask = padded_batch(TINY["vocab_size"], [6, 4], pad_token_id=0, seed=11, side="left")
    settings = {"max_new_tokens": 8, "do_sample": False, "pad_token_id": 0, "eos_token_id": None}
    got, want = generate_both(ours, reference, ids, attention_mask=mask, **settings)
    assert_generation_matches(got, want, prompt_length=ids.shape[1])


def test_logits_to_keep_tensors_and_negative_ints_match_reference(
    checkpoints: dict[str, tuple[Path, Any, Any]],
) -> None:
    _, reference, ours = checkpoints["lm-tied"]
    assert_logits_to_keep_matches(ours, reference, TINY["vocab_size"])
