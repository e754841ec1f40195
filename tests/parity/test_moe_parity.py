"""Mixtral (microformers-mixtral) and Qwen2-MoE (microformers-qwen2-moe) against the reference implementation.

Tiny random checkpoints, top-2 routing over 4 experts: Mixtral (no shared expert, sliding window shorter
than the prompt), Qwen2-MoE with its gated shared expert, and Qwen2-MoE with ``mlp_only_layers``,
``decoder_sparse_step``, ``norm_topk_prob`` and per-layer sliding windows.
"""

from __future__ import annotations

import json
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


VOCAB = 96
SHAPE: dict[str, Any] = {
    "vocab_size": VOCAB,
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
    "pad_token_id": 0,
    "num_experts_per_tok": 2,
}
MIXTRAL = {**SHAPE, "num_local_experts": 4}
QWEN2_MOE = {**SHAPE, "num_experts": 4, "moe_intermediate_size": 16, "shared_expert_intermediate_size": 40}

# name -> (reference config class, reference model-class prefix, config)
CASES: dict[str, tuple[str, str, dict[str, Any]]] = {
    "mixtral-window": ("MixtralConfig", "Mixtral", {**MIXTRAL, "sliding_window": 4}),
    "qwen2moe-shared": ("Qwen2MoeConfig", "Qwen2Moe", QWEN2_MOE),
    "qwen2moe-dense-layers": (
        "Qwen2MoeConfig",
        "Qwen2Moe",
        {
            **QWEN2_MOE,
            "num_hidden_layers": 4,
            "mlp_only_layers": [2],
            "decoder_sparse_step": 1,
            "norm_topk_prob": True,
            "use_sliding_window": True,
            "sliding_window": 3,
            "max_window_layers": 3,
            "tie_word_embeddings": True,
        },
    ),
    "qwen2moe-sparse-step": ("Qwen2MoeConfig", "Qwen2Moe", {**QWEN2_MOE, "decoder_sparse_step": 2}),
}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Any, Any]]:
    built: dict[str, tuple[Path, Any, Any]] = {}
    for name, (config_class, prefix, config) in CASES.items():
        folder, reference = make_reference_checkpoint(
            config_class, f"{prefix}ForCausalLM", tmp_path_factory.mktemp(name), **config
        )
        built[name] = (folder, reference, load_ours(folder))
    return built


def _labels(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Labels of real tokens predicted from real tokens: padding (whose outputs are arbitrary) predicts nothing."""
    predicted_from_real = torch.nn.functional.pad(mask[:, :-1], (1, 0)) * mask
    return ids.masked_fill(predicted_from_real == 0, -100)


@pytest.mark.parametrize("case", CASES)
def test_padded_logits_router_logits_and_losses_match_reference(
    case: str, checkpoints: dict[str, tuple[Path, Any, Any]]
) -> None:
    _, reference, ours = checkpoints[case]
    assert type(ours).__name__ == type(reference).__name__
    ids, mask = padded_batch(VOCAB, [9, 5, 7], pad_token_id=0, seed=2)
    labels = _labels(ids, mask)
    with torch.no_grad():
        got = ours(ids, attention_mask=mask, labels=labels, output_router_logits=True)
        want = reference(
            ids, attention_mask=mask, position_ids=position_ids_for(mask), labels=labels, output_router_logits=True
        )
    assert_close(got.logits, want.logits, atol=1e-4, mask=mask)
    assert len(got.router_logits) == len(want.router_logits) > 0
    real = mask.reshape(-1).bool()
    for layer, (mine, theirs) in enumerate(zip(got.router_logits, want.router_logits)):
        assert_close(mine[real], theirs[real], atol=1e-5, what=f"router logits of MoE layer {layer}")
    assert_close(got.aux_loss, want.aux_loss, atol=1e-6, what="aux_loss")
    assert_close(got.loss, want.loss, atol=1e-5, what="loss (cross entropy + router_aux_loss_coef * aux_loss)")


@pytest.mark.parametrize("case", ["mixtral-window", "qwen2moe-dense-layers"])
def test_unpadded_loss_without_router_logits_and_cached_steps(
    case: str, checkpoints: dict[str, tuple[Path, Any, Any]]
) -> None:
    _, reference, ours = checkpoints[case]
    ids = random_ids(VOCAB, batch=2, length=9, seed=3)
    with torch.no_grad():
        got, want = ours(ids, labels=ids), reference(ids, labels=ids)
        assert got.aux_loss is None and want.aux_loss is None
        assert_close(got.logits, want.logits, atol=1e-4)
        assert_close(got.loss, want.loss, atol=1e-5, what="loss")
        # prefill 4 tokens, then one at a time through our dynamic cache
        out = ours(ids[:, :4], use_cache=True)
        steps = [out.logits]
        for t in range(4, ids.shape[1]):
            out = ours(ids[:, t : t + 1], past_key_values=out.past_key_values, use_cache=True)
            steps.append(out.logits)
    assert_close(torch.cat(steps, dim=1), want.logits, atol=1e-4, what="cached steps vs reference")


@pytest.mark.parametrize("case", ["mixtral-window", "qwen2moe-shared"])
def test_greedy_and_beam_generation_match_reference(case: str, checkpoints: dict[str, tuple[Path, Any, Any]]) -> None:
    from microformers import registry

    if registry.get("generation_strategies", "greedy") is None:
        pytest.fail("generation needs the microformers-generation plugin installed")
    _, reference, ours = checkpoints[case]
    ids, mask = padded_batch(VOCAB, [6, 4], pad_token_id=0, seed=11, side="left")
    base = {"max_new_tokens": 6, "do_sample": False, "pad_token_id": 0, "eos_token_id": None}
    for settings in (base, {**base, "num_beams": 3}):
        got, want = generate_both(ours, reference, ids, attention_mask=mask, **settings)
        assert_generation_matches(got, want, prompt_length=ids.shape[1], what=str(settings))
        if "num_beams" not in settings:
            # a static cache attends over a differently shaped (padded) cache: same tokens up to a near tie
            with torch.no_grad():
                static = ours.generate(ids, attention_mask=mask, cache_implementation="static", **settings, **SCORE_OUTPUTS)
            assert_generation_matches(static, want, prompt_length=ids.shape[1], what="greedy through a static cache")


@pytest.mark.parametrize("case", ["mixtral-window", "qwen2moe-dense-layers"])
def test_our_checkpoint_loads_in_reference(
    case: str, checkpoints: dict[str, tuple[Path, Any, Any]], tmp_path: Path
) -> None:
    folder, _, ours = checkpoints[case]
    from safetensors import safe_open

    ours.save_pretrained(tmp_path / "ours")
    with safe_open(str(tmp_path / "ours" / "model.safetensors"), "pt") as mine:
        with safe_open(str(folder / "model.safetensors"), "pt") as theirs:
            assert set(mine.keys()) == set(theirs.keys()), "we save the tensor names the reference saves"
    reference = load_reference(tmp_path / "ours", "AutoModelForCausalLM")
    assert type(reference).__name__ == type(ours).__name__
    ids = random_ids(VOCAB, batch=2, length=7, seed=4)
    with torch.no_grad():
        assert max_abs_diff(ours(ids).logits, reference(ids).logits) <= 1e-5
        again = load_ours(tmp_path / "ours")
        assert_same_state_dict(dict(again.state_dict()), dict(ours.state_dict()))


@pytest.mark.parametrize("case", ["mixtral-window", "qwen2moe-shared"])
def test_stacked_expert_checkpoint_loads(
    case: str, checkpoints: dict[str, tuple[Path, Any, Any]], tmp_path: Path
) -> None:
    """A checkpoint in the reference's in-memory layout (``mlp.experts.gate_up_proj`` / ``down_proj``) loads too."""
    from safetensors.torch import save_file

    folder, reference, ours = checkpoints[case]
    state = {name: tensor.contiguous() for name, tensor in reference.state_dict().items()}
    if reference.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    assert any(name.endswith("experts.gate_up_proj") for name in state)
    target = tmp_path / "stacked"
    target.mkdir()
    save_file(state, str(target / "model.safetensors"), metadata={"format": "pt"})
    (target / "config.json").write_text((folder / "config.json").read_text())
    loaded = load_ours(target)
    assert_same_state_dict(dict(loaded.state_dict()), dict(ours.state_dict()))


@pytest.mark.parametrize("case", ["mixtral-window", "qwen2moe-shared"])
def test_base_model_and_sequence_classification_match_reference(case: str, tmp_path: Path) -> None:
    config_class, prefix, config = CASES[case]
    folder, reference = make_reference_checkpoint(
        config_class, f"{prefix}ForSequenceClassification", tmp_path, num_labels=3, **config
    )
    ours = load_ours(folder, "AutoModelForSequenceClassification")
    assert type(ours).__name__ == f"{prefix}ForSequenceClassification"
    ids, mask = padded_batch(VOCAB, [8, 5, 3], pad_token_id=0, seed=5, side="right")
    labels = torch.tensor([0, 2, 1])
    with torch.no_grad():
        got = ours(ids, attention_mask=mask, labels=labels)
        want = reference(ids, attention_mask=mask, labels=labels)
        assert_close(got.logits, want.logits, atol=1e-4)
        assert_close(got.loss, want.loss, atol=1e-5, what="loss")
        base, reference_base = load_ours(folder, "AutoModel"), load_reference(folder, "AutoModel")
        assert type(base).__name__ == f"{prefix}Model"
        assert_close(base(ids).last_hidden_state, reference_base(ids).last_hidden_state, atol=1e-4)


@pytest.mark.parametrize(
    ("case", "field", "value", "named"),
    [
        ("mixtral-window", "num_experts_per_tok", 5, "num_local_experts"),
        ("qwen2moe-shared", "num_experts_per_tok", 7, "num_experts"),
        ("mixtral-window", "num_key_value_heads", 3, "num_attention_heads"),
        ("qwen2moe-shared", "num_attention_heads", 5, "hidden_size"),
    ],
)
def test_inconsistent_config_is_refused_naming_field_and_file(
    case: str, field: str, value: int, named: str, checkpoints: dict[str, tuple[Path, Any, Any]], tmp_path: Path
) -> None:
    import shutil

    from microformers import AutoModelForCausalLM
    from microformers.errors import ConfigError

    folder = checkpoints[case][0]
    broken = tmp_path / "broken"
    shutil.copytree(folder, broken)
    config = json.loads((broken / "config.json").read_text())
    config[field] = value
    (broken / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError) as caught:
        AutoModelForCausalLM.from_pretrained(str(broken))
    message = str(caught.value)
    assert field in message and named in message and "config.json" in message, message
    assert str(broken) in message, message
