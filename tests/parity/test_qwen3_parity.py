"""Qwen3 (microformers-qwen3) against the reference implementation on tiny random checkpoints."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from microformers_sdk.testing import one_thread  # noqa: F401  (an autouse fixture, found by name)
from parity.harness import (
    assert_close,
    assert_generation_matches,
    assert_same_state_dict,
    generate_both,
    load_ours,
    load_reference,
    make_reference_checkpoint,
    max_abs_diff,
    padded_batch,
    position_ids_for,
    random_ids,
)

pytest.importorskip("transformers")


TINY: dict[str, Any] = {
    "vocab_size": 96,
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,  # explicit and != hidden_size // heads, as in real Qwen3 checkpoints
    "max_position_embeddings": 64,
    "pad_token_id": 0,
}

# name -> config overrides (sliding window shorter than the prompt on the second layer; biased, tied)
CASES: dict[str, dict[str, Any]] = {
    "gqa": {},
    "sliding-tied-bias": {
        "use_sliding_window": True,
        "sliding_window": 3,
        "max_window_layers": 1,
        "tie_word_embeddings": True,
        "attention_bias": True,
    },
}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Any, Any]]:
    built: dict[str, tuple[Path, Any, Any]] = {}
    for name, overrides in CASES.items():
        folder, reference = make_reference_checkpoint(
            "Qwen3Config", "Qwen3ForCausalLM", tmp_path_factory.mktemp(name), **{**TINY, **overrides}
        )
        built[name] = (folder, reference, load_ours(folder))
    return built


@pytest.mark.parametrize("case", CASES)
def test_logits_and_loss_match_reference(case: str, checkpoints: dict[str, tuple[Path, Any, Any]]) -> None:
    _, reference, ours = checkpoints[case]
    assert type(ours).__name__ == "Qwen3ForCausalLM"
    assert ours.model.layers[0].self_attn.q_norm.weight.shape == (TINY["head_dim"],)
    ids = random_ids(TINY["vocab_size"], batch=2, length=9, seed=1)
    labels = ids.clone()
    labels[0, :3] = -100
    with torch.no_grad():
        got, want = ours(ids, labels=labels), reference(ids, labels=labels)
    assert_close(got.logits, want.logits, atol=1e-4)
    assert_close(got.loss, want.loss, atol=1e-5, what="loss")


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_left_padded_batch_and_cached_steps_match_reference(
    case: str, cache: str, checkpoints: dict[str, tuple[Path, Any, Any]]
) -> None:
    from microformers_sdk.cache import StaticCache

    _, reference, ours = checkpoints[case]
    # Static steps are fed real tokens only, as in generate(): a padding token stepped into a row with no real
    # token yet has nothing to attend to (the Llama decoder's one-query path then stores non-finite keys).
    lengths = [9, 5, 2] if cache == "dynamic" else [9, 6, 5]
    ids, mask = padded_batch(TINY["vocab_size"], lengths, pad_token_id=0, seed=2)
    with torch.no_grad():
        got = ours(ids, attention_mask=mask).logits
        want = reference(ids, attention_mask=mask, position_ids=position_ids_for(mask)).logits
        # prefill 4 tokens, then one token at a time through our cache (a static one: the normed keys are stored)
        extra = {"past_key_values": StaticCache(max_cache_len=ids.shape[1])} if cache == "static" else {}
        out = ours(ids[:, :4], attention_mask=mask[:, :4], use_cache=True, **extra)
        steps = [out.logits]
        for t in range(4, ids.shape[1]):
            out = ours(ids[:, t : t + 1], attention_mask=mask[:, : t + 1], past_key_values=out.past_key_values)
            steps.append(out.logits)
    assert_close(got, want, atol=1e-4, mask=mask)
    assert_close(torch.cat(steps, dim=1), want, atol=1e-4, mask=mask, what="cached steps vs reference")


def test_greedy_generation_matches_reference(checkpoints: dict[str, tuple[Path, Any, Any]]) -> None:
    from microformers import registry

    if registry.get("generation_strategies", "greedy") is None:
        pytest.fail("greedy generation needs the microformers-generation plugin installed")
    _, reference, ours = checkpoints["sliding-tied-bias"]
    ids, mask = padded_batch(TINY["vocab_size"], [6, 4], pad_token_id=0, seed=11, side="left")
    settings = {"max_new_tokens": 8, "do_sample": False, "pad_token_id": 0, "eos_token_id": None}
    got, want = generate_both(ours, reference, ids, attention_mask=mask, **settings)
    assert_generation_matches(got, want, prompt_length=ids.shape[1])


@pytest.mark.parametrize("case", CASES)
def test_our_checkpoint_loads_in_reference(
    case: str, checkpoints: dict[str, tuple[Path, Any, Any]], tmp_path: Path
) -> None:
    _, _, ours = checkpoints[case]
    ours.save_pretrained(tmp_path / "ours")
    reference = load_reference(tmp_path / "ours", "AutoModelForCausalLM")
    assert type(reference).__name__ == "Qwen3ForCausalLM"
    assert_same_state_dict(dict(ours.state_dict()), dict(reference.state_dict()))
    ids = random_ids(TINY["vocab_size"], batch=2, length=7, seed=4)
    with torch.no_grad():
        assert max_abs_diff(ours(ids).logits, reference(ids).logits) <= 1e-5
        again = load_ours(tmp_path / "ours")
        # exact: the same model code on the same inputs, with weights save/load copied byte for byte
        assert max_abs_diff(again(ids).logits, ours(ids).logits) == 0.0


def test_base_model_and_sequence_classification_match_reference(tmp_path: Path) -> None:
    folder, reference = make_reference_checkpoint(
        "Qwen3Config", "Qwen3ForSequenceClassification", tmp_path, num_labels=3, **TINY
    )
    ours = load_ours(folder, "AutoModelForSequenceClassification")
    assert type(ours).__name__ == "Qwen3ForSequenceClassification"
    ids, mask = padded_batch(TINY["vocab_size"], [8, 5, 3], pad_token_id=0, seed=5, side="right")
    labels = torch.tensor([0, 2, 1])
    with torch.no_grad():
        got = ours(ids, attention_mask=mask, labels=labels)
        want = reference(ids, attention_mask=mask, labels=labels)
    assert_close(got.logits, want.logits, atol=1e-4)
    assert_close(got.loss, want.loss, atol=1e-5, what="loss")
    base, reference_base = load_ours(folder, "AutoModel"), load_reference(folder, "AutoModel")
    with torch.no_grad():
        assert_close(base(ids).last_hidden_state, reference_base(ids).last_hidden_state, atol=1e-4)
