"""Gemma 2 and Gemma 3 text (microformers-gemma) against the reference implementation on tiny random checkpoints.

Cases: Gemma 2 with soft-capping on (small caps, so they change the numbers) and off, both with a
sliding window shorter than the prompts; Gemma 3 with a local/global layer pattern, separate rotary
bases and linear rotary scaling on the global layers, written in the older config spelling
(``rope_theta``, ``rope_local_base_freq``, ``rope_scaling``, ``sliding_window_pattern``). The
reference runs Gemma 2 through its eager attention (it has no SDPA path for soft-capping) and
Gemma 3 through SDPA; each is compared with what it actually uses (asserted below).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from microformers_sdk.testing import one_thread  # noqa: F401  (an autouse fixture, found by name)
from parity.harness import (
    SCORE_OUTPUTS,
    assert_close,
    assert_generation_matches,
    assert_same_state_dict,
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
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "max_position_embeddings": 64,
    "pad_token_id": 0,
    "query_pre_attn_scalar": 24,  # != head_dim: the scaling must come from this field
    "sliding_window": 3,  # shorter than every prompt below
}

# name -> (reference config class, reference causal-LM class, config overrides, attention the reference uses)
CASES: dict[str, tuple[str, str, dict[str, Any], str]] = {
    "gemma2-softcap": (
        "Gemma2Config",
        "Gemma2ForCausalLM",
        {"attn_logit_softcapping": 1.0, "final_logit_softcapping": 2.0},
        "eager",
    ),
    "gemma2-no-softcap": (
        "Gemma2Config",
        "Gemma2ForCausalLM",
        {"attn_logit_softcapping": None, "final_logit_softcapping": None, "tie_word_embeddings": False},
        "eager",
    ),
    "gemma3-pattern": (
        "Gemma3TextConfig",
        "Gemma3ForCausalLM",
        {
            "sliding_window_pattern": 2,
            "rope_theta": 5000.0,
            "rope_local_base_freq": 100.0,
            "rope_scaling": {"rope_type": "linear", "factor": 2.0},
            "final_logit_softcapping": 3.0,
            "attn_logit_softcapping": 1.0,  # stored; Gemma 3 attention does not apply it (reference nor ours)
        },
        "sdpa",
    ),
}
OUR_CLASSES = {"Gemma2ForCausalLM": "Gemma2ForCausalLM", "Gemma3ForCausalLM": "Gemma3ForCausalLM"}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Any, Any]]:
    built: dict[str, tuple[Path, Any, Any]] = {}
    for name, (config_class, model_class, overrides, _) in CASES.items():
        folder, reference = make_reference_checkpoint(
            config_class, model_class, tmp_path_factory.mktemp(name), **{**TINY, **overrides}
        )
        built[name] = (folder, reference, load_ours(folder))
    return built


@pytest.mark.parametrize("case", CASES)
def test_logits_and_loss_match_reference(case: str, checkpoints: dict[str, tuple[Path, Any, Any]]) -> None:
    _, reference, ours = checkpoints[case]
    _, model_class, overrides, attention = CASES[case]
    assert type(ours).__name__ == OUR_CLASSES[model_class]
    assert reference.config._attn_implementation == attention
    ids = random_ids(TINY["vocab_size"], batch=2, length=9, seed=1)
    labels = ids.clone()
    labels[0, :3] = -100
    with torch.no_grad():
        got, want = ours(ids, labels=labels), reference(ids, labels=labels)
    assert_close(got.logits, want.logits, atol=1e-4)
    assert_close(got.loss, want.loss, atol=1e-5, what="loss")
    cap = overrides.get("final_logit_softcapping")
    if cap is not None:  # the cap is in reach: the logits sit inside (-cap, cap) and not all far below it
        assert float(got.logits.abs().max()) < cap
        assert float(got.logits.abs().max()) > cap / 2


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_left_padded_batch_and_cached_steps_match_reference(
    case: str, cache: str, checkpoints: dict[str, tuple[Path, Any, Any]]
) -> None:
    from microformers_sdk.cache import StaticCache

    _, reference, ours = checkpoints[case]
    ids, mask = padded_batch(TINY["vocab_size"], [9, 5, 2], pad_token_id=0, seed=2)
    with torch.no_grad():
        got = ours(ids, attention_mask=mask).logits
        want = reference(ids, attention_mask=mask, position_ids=position_ids_for(mask)).logits
        # prefill 4 tokens, then one token at a time through our cache, past the window of 3
        extra = {"past_key_values": StaticCache(max_cache_len=ids.shape[1])} if cache == "static" else {}
        out = ours(ids[:, :4], attention_mask=mask[:, :4], use_cache=True, **extra)
        steps = [out.logits]
        for t in range(4, ids.shape[1]):
            out = ours(ids[:, t : t + 1], attention_mask=mask[:, : t + 1], past_key_values=out.past_key_values)
            steps.append(out.logits)
    assert_close(got, want, atol=1e-4, mask=mask)
    assert_close(torch.cat(steps, dim=1), want, atol=1e-4, mask=mask, what="cached steps vs reference")


@pytest.mark.parametrize("case", ["gemma2-softcap", "gemma3-pattern"])
def test_generation_matches_reference(case: str, checkpoints: dict[str, tuple[Path, Any, Any]]) -> None:
    from microformers import registry

    if registry.get("generation_strategies", "greedy") is None:
        pytest.fail("generation needs the microformers-generation plugin installed")
    _, reference, ours = checkpoints[case]
    ids, mask = padded_batch(TINY["vocab_size"], [6, 4], pad_token_id=0, seed=11, side="left")
    settings: dict[str, Any] = {"max_new_tokens": 7, "do_sample": False, "pad_token_id": 0, "eos_token_id": None}
    with torch.no_grad():
        for extra in ({}, {"num_beams": 3}, {"cache_implementation": "static"}):
            if extra.get("cache_implementation") == "static":  # ours only: the reference's result is the same
                want = reference.generate(ids, attention_mask=mask, **settings, **SCORE_OUTPUTS)
            else:
                want = reference.generate(ids, attention_mask=mask, **settings, **extra, **SCORE_OUTPUTS)
            got = ours.generate(ids, attention_mask=mask, **settings, **extra, **SCORE_OUTPUTS)
            assert_generation_matches(got, want, prompt_length=ids.shape[1], what=str(extra or "greedy"))


@pytest.mark.parametrize("case", CASES)
def test_our_checkpoint_loads_in_reference(
    case: str, checkpoints: dict[str, tuple[Path, Any, Any]], tmp_path: Path
) -> None:
    _, _, ours = checkpoints[case]
    _, model_class, _, _ = CASES[case]
    ours.save_pretrained(tmp_path / "ours")
    reference = load_reference(tmp_path / "ours", "AutoModelForCausalLM")
    assert type(reference).__name__ == model_class
    assert reference.config.layer_types == ours.config.layer_types
    assert_same_state_dict(dict(ours.state_dict()), dict(reference.state_dict()))
    ids = random_ids(TINY["vocab_size"], batch=2, length=7, seed=4)
    with torch.no_grad():
        assert max_abs_diff(ours(ids).logits, reference(ids).logits) <= 1e-5
        again = load_ours(tmp_path / "ours")
        assert again.config.rope_parameters == ours.config.rope_parameters
        # exact: the same model code on the same inputs, with weights save/load copied byte for byte
        assert max_abs_diff(again(ids).logits, ours(ids).logits) == 0.0


@pytest.mark.parametrize(
    ("config_class", "classifier", "base"),
    [
        ("Gemma2Config", "Gemma2ForSequenceClassification", "Gemma2Model"),
        ("Gemma3TextConfig", "Gemma3TextForSequenceClassification", "Gemma3TextModel"),
    ],
)
def test_base_model_and_sequence_classification_match_reference(
    config_class: str, classifier: str, base: str, tmp_path: Path
) -> None:
    folder, reference = make_reference_checkpoint(config_class, classifier, tmp_path, num_labels=3, **TINY)
    ours = load_ours(folder, "AutoModelForSequenceClassification")
    assert type(ours).__name__ == classifier
    ids, mask = padded_batch(TINY["vocab_size"], [8, 5, 3], pad_token_id=0, seed=5, side="right")
    labels = torch.tensor([0, 2, 1])
    with torch.no_grad():
        got = ours(ids, attention_mask=mask, labels=labels)
        want = reference(ids, attention_mask=mask, labels=labels)
    assert_close(got.logits, want.logits, atol=1e-4)
    assert_close(got.loss, want.loss, atol=1e-5, what="loss")
    ours_base, reference_base = load_ours(folder, "AutoModel"), load_reference(folder, "AutoModel")
    assert type(ours_base).__name__ == base
    with torch.no_grad():
        assert_close(ours_base(ids).last_hidden_state, reference_base(ids).last_hidden_state, atol=1e-4)


def test_inputs_embeds_are_taken_as_scaled_like_the_reference(checkpoints: dict[str, tuple[Path, Any, Any]]) -> None:
    _, reference, ours = checkpoints["gemma2-softcap"]
    ids = random_ids(TINY["vocab_size"], batch=1, length=5, seed=6)
    with torch.no_grad():
        embeds = ours.get_input_embeddings()(ids)
        assert_close(embeds, reference.get_input_embeddings()(ids), atol=1e-6, what="scaled embeddings")
        assert_close(ours(inputs_embeds=embeds).logits, ours(ids).logits, atol=1e-6, what="inputs_embeds vs ids")
        assert_close(ours(inputs_embeds=embeds).logits, reference(inputs_embeds=embeds).logits, atol=1e-4)
