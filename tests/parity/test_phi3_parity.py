"""Phi-3 (microformers-phi3) against the reference implementation on tiny random checkpoints.

Cases: plain rotary; LongRoPE with the original length shorter than the prompts (``original_max_position_embeddings``
8), so calls within it use the short factors and longer ones the long factors, generation crossing the boundary
(where the reference rebuilds its cache); the legacy ``"su"`` name with partial rotary; a sliding window shorter
than the prompt with tied embeddings.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from microformers_sdk.testing import (
    assert_similar_generation,
    one_thread,  # noqa: F401  (an autouse fixture, found by name)
)
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
    steps_with_same_prefix,
)

pytest.importorskip("transformers")


TINY: dict[str, Any] = {
    "vocab_size": 96,
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
    "pad_token_id": 0,
    "eos_token_id": 1,
}
ORIGINAL = 8  # prompts of 6 tokens use the short factors, of 12 the long ones

CASES: dict[str, dict[str, Any]] = {
    "plain": {},
    "longrope": {
        "original_max_position_embeddings": ORIGINAL,
        "rope_scaling": {
            "type": "longrope",
            "short_factor": [1.0, 1.3, 1.7, 2.1],
            "long_factor": [1.5, 2.5, 3.5, 6.0],
        },
    },
    "su-partial": {
        "original_max_position_embeddings": ORIGINAL,
        "partial_rotary_factor": 0.5,
        # the reference needs the original length inside the legacy "su" settings too
        "rope_scaling": {
            "type": "su",
            "short_factor": [1.1, 1.9],
            "long_factor": [2.0, 4.0],
            "original_max_position_embeddings": ORIGINAL,
        },
    },
    "sliding-tied": {"sliding_window": 3, "tie_word_embeddings": True},
}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Any, Any]]:
    built: dict[str, tuple[Path, Any, Any]] = {}
    for name, overrides in CASES.items():
        folder, reference = make_reference_checkpoint(
            "Phi3Config", "Phi3ForCausalLM", tmp_path_factory.mktemp(name), **{**TINY, **overrides}
        )
        built[name] = (folder, reference, load_ours(folder))
    return built


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("length", [6, 12])
def test_logits_and_loss_match_reference(case: str, length: int, checkpoints: dict[str, tuple[Path, Any, Any]]) -> None:
    _, reference, ours = checkpoints[case]
    assert type(ours).__name__ == "Phi3ForCausalLM"
    ids = random_ids(TINY["vocab_size"], batch=2, length=length, seed=1)
    labels = ids.clone()
    labels[0, :3] = -100
    with torch.no_grad():
        got, want = ours(ids, labels=labels), reference(ids, labels=labels)
    assert_close(got.logits, want.logits, atol=1e-4)
    assert_close(got.loss, want.loss, atol=1e-5, what="loss")


def test_longrope_uses_both_factor_sets(checkpoints: dict[str, tuple[Path, Any, Any]]) -> None:
    """The first positions of a 12-token call differ from the same positions in a 6-token call (long vs short)."""
    _, reference, ours = checkpoints["longrope"]
    ids = random_ids(TINY["vocab_size"], batch=1, length=12, seed=3)
    with torch.no_grad():
        short, long = ours(ids[:, :6]).logits, ours(ids).logits[:, :6]
        assert_close(long, reference(ids).logits[:, :6], atol=1e-4)
    assert max_abs_diff(short, long) > 1e-3


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_left_padded_batch_and_cached_steps_match_reference(
    case: str, cache: str, checkpoints: dict[str, tuple[Path, Any, Any]]
) -> None:
    from microformers_sdk.cache import StaticCache

    _, reference, ours = checkpoints[case]
    # 7 columns: every cached step stays within the original length, so one factor set throughout
    ids, mask = padded_batch(TINY["vocab_size"], [7, 5, 2], pad_token_id=0, seed=2)
    with torch.no_grad():
        got = ours(ids, attention_mask=mask).logits
        want = reference(ids, attention_mask=mask, position_ids=position_ids_for(mask)).logits
        extra = {"past_key_values": StaticCache(max_cache_len=ids.shape[1])} if cache == "static" else {}
        out = ours(ids[:, :3], attention_mask=mask[:, :3], use_cache=True, **extra)
        steps = [out.logits]
        for t in range(3, ids.shape[1]):
            out = ours(ids[:, t : t + 1], attention_mask=mask[:, : t + 1], past_key_values=out.past_key_values)
            steps.append(out.logits)
    assert_close(got, want, atol=1e-4, mask=mask)
    assert_close(torch.cat(steps, dim=1), want, atol=1e-4, mask=mask, what="cached steps vs reference")


@pytest.mark.parametrize("case", CASES)
def test_long_left_padded_batch_matches_reference(case: str, checkpoints: dict[str, tuple[Path, Any, Any]]) -> None:
    _, reference, ours = checkpoints[case]
    ids, mask = padded_batch(TINY["vocab_size"], [12, 7, 3], pad_token_id=0, seed=4)
    with torch.no_grad():
        got = ours(ids, attention_mask=mask).logits
        want = reference(ids, attention_mask=mask, position_ids=position_ids_for(mask)).logits
    assert_close(got, want, atol=1e-4, mask=mask)


@pytest.mark.parametrize("case", ["longrope", "su-partial", "sliding-tied"])
@pytest.mark.parametrize("num_beams", [1, 3])
def test_generation_across_the_original_length_matches_reference(
    case: str, num_beams: int, checkpoints: dict[str, tuple[Path, Any, Any]]
) -> None:
    """Prompts of 5 and 3 tokens, 10 new tokens: the sequences pass the original length of 8 while decoding."""
    from microformers import registry

    if registry.get("generation_strategies", "greedy") is None:
        pytest.fail("generation needs the microformers-generation plugin installed")
    _, reference, ours = checkpoints[case]
    ids, mask = padded_batch(TINY["vocab_size"], [5, 3], pad_token_id=0, seed=11, side="left")
    settings = {"max_new_tokens": 10, "do_sample": False, "pad_token_id": 0, "eos_token_id": None}
    got, want = generate_both(ours, reference, ids, attention_mask=mask, num_beams=num_beams, **settings)
    assert_generation_matches(got, want, prompt_length=ids.shape[1])


@pytest.mark.parametrize("case", CASES)
def test_our_checkpoint_loads_in_reference(
    case: str, checkpoints: dict[str, tuple[Path, Any, Any]], tmp_path: Path
) -> None:
    _, _, ours = checkpoints[case]
    ours.save_pretrained(tmp_path / "ours")
    reference = load_reference(tmp_path / "ours", "AutoModelForCausalLM")
    assert type(reference).__name__ == "Phi3ForCausalLM"
    assert_same_state_dict(dict(ours.state_dict()), dict(reference.state_dict()))
    ids = random_ids(TINY["vocab_size"], batch=2, length=12, seed=4)
    with torch.no_grad():
        assert max_abs_diff(ours(ids).logits, reference(ids).logits) <= 1e-5
        again = load_ours(tmp_path / "ours")
        # exact: the same model code on the same inputs, with weights save/load copied byte for byte
        assert max_abs_diff(again(ids).logits, ours(ids).logits) == 0.0


@pytest.mark.parametrize("head", ["SequenceClassification", "TokenClassification"])
def test_base_model_and_classification_heads_match_reference(head: str, tmp_path: Path) -> None:
    folder, reference = make_reference_checkpoint(
        "Phi3Config", f"Phi3For{head}", tmp_path, num_labels=3, **{**TINY, **CASES["longrope"]}
    )
    ours = load_ours(folder, f"AutoModelFor{head}")
    assert type(ours).__name__ == f"Phi3For{head}"
    ids, mask = padded_batch(TINY["vocab_size"], [10, 5, 3], pad_token_id=0, seed=5, side="right")
    if head == "SequenceClassification":
        labels = torch.tensor([0, 2, 1])
    else:
        labels = torch.randint(0, 3, ids.shape, generator=torch.Generator().manual_seed(6)).masked_fill(mask == 0, -100)
    with torch.no_grad():
        got = ours(ids, attention_mask=mask, labels=labels)
        # ours derives position ids from the mask (padding at 1); the reference is given the same ones
        want = reference(ids, attention_mask=mask, position_ids=position_ids_for(mask), labels=labels)
    assert_close(got.logits, want.logits, atol=1e-4)
    assert_close(got.loss, want.loss, atol=1e-5, what="loss")
    base, reference_base = load_ours(folder, "AutoModel"), load_reference(folder, "AutoModel")
    with torch.no_grad():
        assert_close(base(ids).last_hidden_state, reference_base(ids).last_hidden_state, atol=1e-4)


def test_prompt_lookup_across_the_original_length_matches_reference_greedy(
    checkpoints: dict[str, tuple[Path, Any, Any]],
) -> None:
    """Prompt-lookup chunks that cross the original length rebuild the cache as plain decoding does."""
    _, reference, ours = checkpoints["longrope"]
    ids = torch.tensor([[5, 6, 5, 6]])  # repeats, so lookup proposes tokens; chunks cross the length of 8
    settings = {"max_new_tokens": 10, "do_sample": False, "pad_token_id": 0, "eos_token_id": None}
    outputs = {"return_dict_in_generate": True, "output_logits": True}
    with torch.no_grad():
        got = ours.generate(ids, prompt_lookup_num_tokens=3, **settings, **outputs)
        want = reference.generate(ids, **settings, **outputs)
    # chunked lookup vs one token at a time: tokens agree up to a near tie, logits wherever the prefix agrees
    assert_similar_generation(got.sequences, want.sequences, want.logits, prompt_length=ids.shape[1])
    same = steps_with_same_prefix(got.sequences, want.sequences, ids.shape[1])
    assert_close(torch.stack(got.logits[:same], 1), torch.stack(want.logits[:same], 1), atol=1e-4)
