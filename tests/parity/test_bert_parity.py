"""BERT heads against the reference implementation on tiny random checkpoints, both directions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from parity.harness import (
    assert_close,
    assert_same_state_dict,
    load_ours,
    load_reference,
    make_reference_checkpoint,
    padded_batch,
    random_ids,
)

pytest.importorskip("transformers")

TINY: dict[str, Any] = {
    "vocab_size": 99,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 37,
    "max_position_embeddings": 64,
    "type_vocab_size": 2,
    "pad_token_id": 0,
}
LENGTHS = [9, 6, 3]

# name -> (reference class == our class, our Auto class or None for the class itself, config overrides, labels kind)
CASES: dict[str, tuple[str, str | None, dict[str, Any], str | None]] = {
    "base": ("BertModel", "AutoModel", {}, None),
    "masked-lm": ("BertForMaskedLM", "AutoModelForMaskedLM", {}, "tokens"),
    "masked-lm-untied": ("BertForMaskedLM", "AutoModelForMaskedLM", {"tie_word_embeddings": False}, "tokens"),
    "pretraining": ("BertForPreTraining", None, {}, "pretraining"),
    "next-sentence": ("BertForNextSentencePrediction", "AutoModelForNextSentencePrediction", {}, "nsp"),
    "seq-single-label": ("BertForSequenceClassification", "AutoModelForSequenceClassification", {"num_labels": 3}, "single"),
    "seq-multi-label": ("BertForSequenceClassification", "AutoModelForSequenceClassification", {"num_labels": 3, "problem_type": "multi_label_classification"}, "multi"),
    "seq-regression": ("BertForSequenceClassification", "AutoModelForSequenceClassification", {"num_labels": 1}, "regression"),
    "token-classification": ("BertForTokenClassification", "AutoModelForTokenClassification", {"num_labels": 5}, "token-labels"),
    "question-answering": ("BertForQuestionAnswering", "AutoModelForQuestionAnswering", {}, "spans"),
}  # fmt: skip


def _load_ours(folder: Path, case: str) -> Any:
    class_name, auto_name, _, _ = CASES[case]
    if auto_name is not None:
        return load_ours(folder, auto_name)
    import microformers_bert

    return getattr(microformers_bert, class_name).from_pretrained(folder).eval()


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Any, Any]]:
    built: dict[str, tuple[Path, Any, Any]] = {}
    for name, (class_name, _, overrides, _) in CASES.items():
        config_kwargs = {**TINY, **overrides}
        folder, reference = make_reference_checkpoint(
            "BertConfig", class_name, tmp_path_factory.mktemp(name), **config_kwargs
        )
        built[name] = (folder, reference, _load_ours(folder, name))
    return built


def _inputs() -> dict[str, torch.Tensor]:
    ids, mask = padded_batch(TINY["vocab_size"], LENGTHS, pad_token_id=0, seed=4, side="right")
    token_types = torch.zeros_like(ids)
    token_types[:, 4:] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": token_types * mask}


def _labels(kind: str | None, batch: int, length: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(7)
    if kind is None:
        return {}
    if kind in ("tokens", "pretraining"):
        labels = torch.randint(0, TINY["vocab_size"], (batch, length), generator=generator)
        labels[:, ::2] = -100
        extra = {"next_sentence_label": torch.tensor([0, 1, 1])} if kind == "pretraining" else {}
        return {"labels": labels, **extra}
    if kind == "nsp":
        return {"labels": torch.tensor([1, 0, 1])}
    if kind == "single":
        return {"labels": torch.tensor([2, 0, 1])}
    if kind == "multi":
        return {"labels": torch.randint(0, 2, (batch, 3), generator=generator).float()}
    if kind == "regression":
        return {"labels": torch.randn(batch, generator=generator)}
    if kind == "token-labels":
        labels = torch.randint(0, 5, (batch, length), generator=generator)
        labels[0, 0] = -100
        return {"labels": labels}
    if kind == "spans":
        return {"start_positions": torch.tensor([1, 3, 40]), "end_positions": torch.tensor([4, 5, 2])}
    raise AssertionError(kind)


def _tensor_fields(output: Any) -> dict[str, torch.Tensor]:
    return {k: v for k, v in output.items() if isinstance(v, torch.Tensor)}


@pytest.mark.parametrize("case", CASES)
def test_outputs_and_loss_match_reference(case: str, checkpoints: dict[str, tuple[Path, Any, Any]]) -> None:
    _, reference, ours = checkpoints[case]
    assert type(ours).__name__ == CASES[case][0]
    inputs = _inputs()
    labels = _labels(CASES[case][3], *inputs["input_ids"].shape)
    with torch.no_grad():
        got = _tensor_fields(ours(**inputs, **labels))
        want = _tensor_fields(reference(**inputs, **labels))
    assert set(got) == set(want)
    if labels:
        assert "loss" in got
    for name, tensor in want.items():
        positional = tensor.dim() >= 2 and tensor.shape[1] == inputs["input_ids"].shape[1]
        # Padded positions carry no meaning, but both implementations compute them the same way.
        assert_close(got[name], tensor, atol=1e-4, what=name, mask=inputs["attention_mask"] if positional else None)


@pytest.mark.parametrize("case", ["base", "masked-lm"])
def test_hidden_states_and_attentions_match_reference(case: str, checkpoints: dict[str, tuple[Path, Any, Any]]) -> None:
    _, reference, ours = checkpoints[case]
    inputs = _inputs()
    with torch.no_grad():
        got = ours(**inputs, output_hidden_states=True, output_attentions=True)
        reference.config._attn_implementation = "eager"
        try:
            want = reference(**inputs, output_hidden_states=True, output_attentions=True)
        finally:
            reference.config._attn_implementation = "sdpa"
    assert len(got.hidden_states) == len(want.hidden_states) == TINY["num_hidden_layers"] + 1
    for layer, (mine, theirs) in enumerate(zip(got.hidden_states, want.hidden_states)):
        assert_close(mine, theirs, what=f"hidden_states[{layer}]", mask=inputs["attention_mask"])
    assert len(got.attentions) == len(want.attentions) == TINY["num_hidden_layers"]
    for layer, (mine, theirs) in enumerate(zip(got.attentions, want.attentions)):
        assert_close(mine, theirs, what=f"attentions[{layer}]")


def test_unpadded_single_row_matches_reference(checkpoints: dict[str, tuple[Path, Any, Any]]) -> None:
    _, reference, ours = checkpoints["base"]
    ids = random_ids(TINY["vocab_size"], batch=1, length=11, seed=9, low=1)
    with torch.no_grad():
        assert_close(ours(ids).last_hidden_state, reference(ids).last_hidden_state, what="last_hidden_state")
        assert_close(ours(ids).pooler_output, reference(ids).pooler_output, what="pooler_output")


@pytest.mark.parametrize("case", CASES)
def test_our_checkpoint_loads_in_reference(
    case: str, checkpoints: dict[str, tuple[Path, Any, Any]], tmp_path: Path
) -> None:
    _, reference, ours = checkpoints[case]
    ours.save_pretrained(tmp_path / "ours")
    reloaded = load_reference(tmp_path / "ours", CASES[case][0])
    assert_same_state_dict(reloaded.state_dict(), reference.state_dict())
    inputs = _inputs()
    with torch.no_grad():
        got = _tensor_fields(ours(**inputs))
        want = _tensor_fields(reloaded(**inputs))
    for name, tensor in want.items():
        assert_close(got[name], tensor, what=name)


def test_legacy_gamma_beta_names_load(checkpoints: dict[str, tuple[Path, Any, Any]], tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    import microformers

    folder, reference, _ = checkpoints["masked-lm"]
    state = load_file(str(folder / "model.safetensors"))
    legacy = {
        key.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): value
        for key, value in state.items()
    }
    assert any(key.endswith("LayerNorm.gamma") for key in legacy)
    target = tmp_path / "legacy"
    target.mkdir()
    (target / "config.json").write_text((folder / "config.json").read_text())
    save_file(legacy, str(target / "model.safetensors"), metadata={"format": "pt"})
    ours = microformers.AutoModelForMaskedLM.from_pretrained(target).eval()
    ids = random_ids(TINY["vocab_size"], batch=2, length=7, seed=3)
    with torch.no_grad():
        assert_close(ours(ids).logits, reference(ids).logits)
