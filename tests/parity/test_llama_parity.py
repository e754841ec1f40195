"""Llama / Mistral / Qwen2 against the reference implementation on tiny random checkpoints."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from parity.harness import (
    assert_close,
    assert_logits_to_keep_matches,
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
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
    "pad_token_id": 0,
}

# name -> (config class, model class, config overrides, sequence length)
CASES: dict[str, tuple[str, str, dict[str, Any], int]] = {
    "llama-gqa": ("LlamaConfig", "LlamaForCausalLM", {}, 10),
    "llama-mha-bias": ("LlamaConfig", "LlamaForCausalLM", {"num_key_value_heads": 4, "attention_bias": True, "mlp_bias": True}, 10),
    "llama-mqa-tied-smollm": ("LlamaConfig", "LlamaForCausalLM", {"num_key_value_heads": 1, "tie_word_embeddings": True, "rope_theta": 100000.0}, 10),
    "llama-explicit-head-dim": ("LlamaConfig", "LlamaForCausalLM", {"head_dim": 16}, 10),
    "llama-rope-linear": ("LlamaConfig", "LlamaForCausalLM", {"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, 10),
    "llama-rope-dynamic": ("LlamaConfig", "LlamaForCausalLM", {"max_position_embeddings": 8, "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}, 14),
    "llama-rope-yarn": ("LlamaConfig", "LlamaForCausalLM", {"max_position_embeddings": 32, "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8}}, 12),
    "llama-rope-llama3": ("LlamaConfig", "LlamaForCausalLM", {"rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 16}}, 10),
    "mistral-sliding": ("MistralConfig", "MistralForCausalLM", {"sliding_window": 4}, 11),
    "mistral-tied": ("MistralConfig", "MistralForCausalLM", {"sliding_window": None, "tie_word_embeddings": True}, 10),
    "qwen2-bias": ("Qwen2Config", "Qwen2ForCausalLM", {"tie_word_embeddings": True}, 10),
    "qwen2-sliding-layers": ("Qwen2Config", "Qwen2ForCausalLM", {"use_sliding_window": True, "sliding_window": 3, "max_window_layers": 1}, 10),
}  # fmt: skip


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Any, Any]]:
    """Per case: (reference folder, reference model, our model loaded from that folder), built once."""
    built: dict[str, tuple[Path, Any, Any]] = {}
    for name, (config_cls, model_cls, overrides, _) in CASES.items():
        folder, reference = make_reference_checkpoint(
            config_cls, model_cls, tmp_path_factory.mktemp(name), **{**TINY, **overrides}
        )
        built[name] = (folder, reference, load_ours(folder))
    return built


@pytest.mark.parametrize("case", CASES)
def test_logits_match_reference(case: str, checkpoints: dict[str, tuple[Path, Any, Any]]) -> None:
    _, reference, ours = checkpoints[case]
    assert type(ours).__name__ == CASES[case][1]
    ids = random_ids(TINY["vocab_size"], batch=2, length=CASES[case][3], seed=1)
    with torch.no_grad():
        assert_close(ours(ids).logits, reference(ids).logits, atol=1e-4)


@pytest.mark.parametrize("case", CASES)
def test_left_padded_batch_matches_reference(case: str, checkpoints: dict[str, tuple[Path, Any, Any]]) -> None:
    _, reference, ours = checkpoints[case]
    length = CASES[case][3]
    ids, mask = padded_batch(TINY["vocab_size"], [length, length - 4, 2], pad_token_id=0, seed=2)
    with torch.no_grad():
        # Ours derives position ids from the mask itself; the reference is given them explicitly.
        got = ours(ids, attention_mask=mask).logits
        want = reference(ids, attention_mask=mask, position_ids=position_ids_for(mask)).logits
        unpadded = ours(ids[1:2, 4:]).logits
    assert_close(got, want, atol=1e-4, mask=mask)
    if "dynamic" not in case:  # dynamic NTK frequencies depend on the longest row in the batch
        # A left-padded row gives the same logits as the same tokens alone.
        assert_close(got[1:2, 4:], unpadded, atol=1e-4, what="padded row vs alone")


def _incremental_logits(
    model: Any, ids: torch.Tensor, mask: torch.Tensor, prefill: int, **cache_kwargs: Any
) -> torch.Tensor:
    """Logits from a prefill of ``prefill`` tokens then one token at a time through the KV cache."""
    steps = []
    out = model(ids[:, :prefill], attention_mask=mask[:, :prefill], use_cache=True, **cache_kwargs)
    steps.append(out.logits)
    past = out.past_key_values
    for t in range(prefill, ids.shape[1]):
        out = model(ids[:, t : t + 1], attention_mask=mask[:, : t + 1], past_key_values=past, use_cache=True)
        past = out.past_key_values
        steps.append(out.logits)
    return torch.cat(steps, dim=1)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_incremental_decoding_matches_full_forward(
    case: str, cache: str, checkpoints: dict[str, tuple[Path, Any, Any]]
) -> None:
    from microformers_sdk.cache import StaticCache

    _, reference, ours = checkpoints[case]
    length = CASES[case][3]
    ids, mask = padded_batch(TINY["vocab_size"], [length, length - 3], pad_token_id=0, seed=3)
    extra = {"past_key_values": StaticCache(max_cache_len=length)} if cache == "static" else {}
    with torch.no_grad():
        stepped = _incremental_logits(ours, ids, mask, prefill=4, **extra)
        full = ours(ids, attention_mask=mask).logits
        reference_full = reference(ids, attention_mask=mask, position_ids=position_ids_for(mask)).logits
    if "dynamic" not in case:
        assert_close(stepped, full, atol=1e-4, mask=mask, what="incremental vs full")
        assert_close(stepped, reference_full, atol=1e-4, mask=mask, what="incremental vs reference full")
    else:
        # Dynamic NTK rescales frequencies as the sequence grows, so cached keys keep the frequencies
        # they were computed with; the reference does the same, which is what must match.
        reference_steps = []
        out = reference(
            ids[:, :4], attention_mask=mask[:, :4], position_ids=position_ids_for(mask[:, :4]), use_cache=True
        )
        reference_steps.append(out.logits)
        for t in range(4, length):
            position = position_ids_for(mask[:, : t + 1])[:, -1:]
            out = reference(ids[:, t : t + 1], attention_mask=mask[:, : t + 1], position_ids=position,
                            past_key_values=out.past_key_values, use_cache=True)  # fmt: skip
            reference_steps.append(out.logits)
        assert_close(stepped, torch.cat(reference_steps, dim=1), atol=1e-4, mask=mask, what="incremental vs reference")


@pytest.mark.parametrize("case", ["llama-gqa", "llama-mqa-tied-smollm", "llama-rope-llama3", "mistral-sliding", "qwen2-bias", "qwen2-sliding-layers"])  # fmt: skip
def test_our_checkpoint_loads_in_reference(
    case: str, checkpoints: dict[str, tuple[Path, Any, Any]], tmp_path: Path
) -> None:
    _, _, ours = checkpoints[case]
    ours.save_pretrained(tmp_path / "ours")
    reference = load_reference(tmp_path / "ours", "AutoModelForCausalLM")
    assert type(reference).__name__ == CASES[case][1]
    ids = random_ids(TINY["vocab_size"], batch=2, length=CASES[case][3], seed=4)
    with torch.no_grad():
        # two implementations: the policy's fp32 tolerance, not equality
        assert_close(ours(ids).logits, reference(ids).logits, atol=1e-5)
    assert_same_state_dict(
        {k: v for k, v in ours.state_dict().items()}, {k: v for k, v in reference.state_dict().items()}
    )
    # And back: the folder we wrote loads here with the same logits.
    again = load_ours(tmp_path / "ours")
    with torch.no_grad():
        # exact: the same model code on the same inputs, with weights save/load copied byte for byte
        assert max_abs_diff(again(ids).logits, ours(ids).logits) == 0.0


def test_base_model_and_sequence_classification_match_reference(tmp_path: Path) -> None:
    folder, reference = make_reference_checkpoint(
        "LlamaConfig", "LlamaForSequenceClassification", tmp_path, num_labels=3, **TINY
    )
    ours = load_ours(folder, "AutoModelForSequenceClassification")
    ids, mask = padded_batch(TINY["vocab_size"], [8, 5, 3], pad_token_id=0, seed=5, side="right")
    labels = torch.tensor([0, 2, 1])
    with torch.no_grad():
        got = ours(ids, attention_mask=mask, labels=labels)
        want = reference(ids, attention_mask=mask, labels=labels)
    assert_close(got.logits, want.logits, atol=1e-4)
    assert_close(got.loss, want.loss, atol=1e-5, what="loss")

    base = load_ours(folder, "AutoModel")
    reference_base = load_reference(folder, "AutoModel")
    with torch.no_grad():
        assert_close(base(ids).last_hidden_state, reference_base(ids).last_hidden_state, atol=1e-4)


def test_causal_lm_loss_hidden_states_and_attentions_match_reference(
    checkpoints: dict[str, tuple[Path, Any, Any]],
) -> None:
    folder, reference, ours = checkpoints["llama-gqa"]
    # the reference's default (SDPA) attention returns no weights: compare with its eager implementation
    eager = type(reference).from_pretrained(folder, attn_implementation="eager").eval()
    ids = random_ids(TINY["vocab_size"], batch=2, length=8, seed=6)
    labels = ids.clone()
    labels[0, :3] = -100
    with torch.no_grad():
        got = ours(ids, labels=labels, output_hidden_states=True, output_attentions=True)
        want = eager(ids, labels=labels, output_hidden_states=True, output_attentions=True)
    assert_close(got.loss, want.loss, atol=1e-5, what="loss")
    assert len(got.hidden_states) == len(want.hidden_states) == TINY["num_hidden_layers"] + 1
    for i, (a, b) in enumerate(zip(got.hidden_states, want.hidden_states)):
        assert_close(a, b, atol=1e-4, what=f"hidden_states[{i}]")
    assert len(got.attentions) == len(want.attentions) == TINY["num_hidden_layers"]
    for i, (a, b) in enumerate(zip(got.attentions, want.attentions)):
        assert a.shape == b.shape == (2, TINY["num_attention_heads"], 8, 8)
        assert_close(a, b, atol=1e-5, what=f"attentions[{i}]")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_loading(dtype: torch.dtype, checkpoints: dict[str, tuple[Path, Any, Any]]) -> None:
    folder, _reference, ours_fp32 = checkpoints["llama-gqa"]
    ours = load_ours(folder, dtype=dtype)
    theirs = load_reference(folder, dtype=dtype)
    assert ours.dtype == dtype and all(p.dtype == dtype for p in ours.parameters())
    ids, mask = padded_batch(TINY["vocab_size"], [9, 6], pad_token_id=0, seed=7)
    with torch.no_grad():
        got = ours(ids, attention_mask=mask).logits
        want = theirs(ids, attention_mask=mask, position_ids=position_ids_for(mask)).logits
        exact = ours_fp32(ids, attention_mask=mask).logits
    assert got.dtype == dtype
    # Half precision differs from float32 by rounding; ours must be as close to the reference's
    # half-precision result as that result is to float32.
    budget = max(max_abs_diff(want[mask.bool()], exact[mask.bool()]) * 2, 1e-3)
    assert_close(got, want, atol=budget, mask=mask, what=f"{dtype} logits")


def test_logits_to_keep_tensors_and_negative_ints_match_reference(
    checkpoints: dict[str, tuple[Path, Any, Any]],
) -> None:
    _, reference, ours = checkpoints["llama-gqa"]
    assert_logits_to_keep_matches(ours, reference, TINY["vocab_size"])
