"""microformers-wav2vec2: the SDK conformance kit where it fits, plus audio-specific checks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file

import microformers
from microformers.errors import ConfigError, InputError
from microformers_sdk.attention import sdpa_attention
from microformers_sdk.testing import (
    ModelConformanceTests,
    checks,
    one_thread,  # noqa: F401  (an autouse fixture, found by name)
)
from microformers_wav2vec2.configuration_wav2vec2 import Wav2Vec2Config
from microformers_wav2vec2.modeling_wav2vec2 import (
    Wav2Vec2Attention,
    Wav2Vec2ForCTC,
    Wav2Vec2ForSequenceClassification,
    Wav2Vec2InputError,
    Wav2Vec2Model,
    compute_mask_indices,
)

TINY: dict[str, Any] = {
    "vocab_size": 12,
    "hidden_size": 16,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 24,
    "conv_dim": (8, 8),
    "conv_stride": (5, 4),
    "conv_kernel": (10, 4),
    "num_conv_pos_embeddings": 8,
    "num_conv_pos_embedding_groups": 2,
    "classifier_proj_size": 8,
    "num_labels": 3,
    "mask_time_prob": 0.0,
    "layerdrop": 0.0,
}


def _audio(batch: int, length: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(batch, length, generator=torch.Generator().manual_seed(seed))


class _AudioInputs:
    """Audio in place of the kit's token ids."""

    def make_inputs(self, config: Any) -> dict[str, torch.Tensor]:
        values = _audio(2, 400)
        return {"input_values": values, "attention_mask": torch.ones_like(values, dtype=torch.long)}

    def make_labels(self, model: Any, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        if isinstance(model, Wav2Vec2ForCTC):
            return {"labels": torch.tensor([[3, 4, 5], [6, 7, -100]])}
        if isinstance(model, Wav2Vec2ForSequenceClassification):
            return {"labels": torch.tensor([0, 2])}
        return {}

    def test_batch_matches_single(self, model_class: type) -> None:
        _, model, inputs = self._setup(model_class)
        with torch.no_grad():
            batched = checks.main_outputs(model(**inputs))
            for row in range(2):
                alone = checks.main_outputs(model(**{k: v[row : row + 1] for k, v in inputs.items()}))
                for name, value in alone.items():
                    torch.testing.assert_close(batched[name][row : row + 1], value, atol=1e-5, rtol=1e-5)

    def test_padding_invariance(self, model_class: type) -> None:
        """With layer-norm feature encoders, a padded row plus its mask gives its unpadded frames' outputs."""
        _, model, _ = self._setup(model_class)
        short, long = _audio(1, 300, seed=1), _audio(1, 400, seed=2)
        batch = torch.cat([torch.nn.functional.pad(short, (0, 100)), long])
        mask = torch.ones(2, 400, dtype=torch.long)
        mask[0, 300:] = 0
        with torch.no_grad():
            padded = model(batch, attention_mask=mask)
            alone = model(short, attention_mask=torch.ones(1, 300, dtype=torch.long))
        frames = alone[0].shape[1] if alone[0].dim() == 3 else None
        got = padded[0][0, :frames] if frames else padded[0][0]
        torch.testing.assert_close(got, alone[0][0], atol=1e-5, rtol=1e-5)


class TestWav2Vec2LayerNormConformance(_AudioInputs, ModelConformanceTests):
    config_class = Wav2Vec2Config
    config_kwargs = {**TINY, "feat_extract_norm": "layer", "do_stable_layer_norm": True}
    model_classes = (Wav2Vec2Model, Wav2Vec2ForCTC)
    # On CPUs with AMX/AVX512-BF16, oneDNN's bfloat16 convolutions put this model's output 4.25 eps of the scale
    # from float32 (0.121 of 3.64), exactly as far as the reference implementation's bfloat16 model on the same
    # weights; 1.3 eps with oneDNN off.
    cast_eps_multiple = 6.0


class TestWav2Vec2GroupNormConformance(_AudioInputs, ModelConformanceTests):
    config_class = Wav2Vec2Config
    config_kwargs = {**TINY, "feat_extract_norm": "group", "use_weighted_layer_sum": True}
    model_classes = (Wav2Vec2ForCTC, Wav2Vec2ForSequenceClassification)
    # GroupNorm normalises each channel over all frames, padding included (as in the reference, whose
    # group-norm checkpoints were trained without attention masks): padded rows are not invariant by design.
    test_padding_invariance = None


def _ctc_model(**overrides: Any) -> Wav2Vec2ForCTC:
    return checks.build_model(Wav2Vec2ForCTC, Wav2Vec2Config(**{**TINY, **overrides}))


def test_attention_projects_the_merged_heads_and_drops_out_in_training_only() -> None:
    """``q_proj``/``k_proj``/``v_proj`` in, ``out_proj`` over the merged heads; eager (with probabilities) and sdpa agree."""
    torch.manual_seed(0)
    attention = Wav2Vec2Attention(Wav2Vec2Config(**TINY, attention_dropout=0.5)).eval()
    assert [name for name, _ in attention.named_children()] == ["q_proj", "k_proj", "v_proj", "out_proj"]
    hidden = torch.randn(2, 5, 16)
    mask = torch.zeros(2, 1, 5, 5)
    mask[1, ..., 3:] = torch.finfo(torch.float32).min
    with torch.no_grad():
        fast, none = attention(hidden, mask, sdpa_attention, False)
        eager, weights = attention(hidden, mask, sdpa_attention, True)
        split = (2, 5, 2, 8)
        query, key, value = (
            p(hidden).view(split).transpose(1, 2) for p in (attention.q_proj, attention.k_proj, attention.v_proj)
        )
        probabilities = torch.softmax(query @ key.transpose(-1, -2) / 8**0.5 + mask, dim=-1)
        expected = attention.out_proj((probabilities @ value).transpose(1, 2).reshape(2, 5, 16))
    assert none is None and weights.shape == (2, 2, 5, 5)
    torch.testing.assert_close(weights, probabilities)
    torch.testing.assert_close(fast, expected)
    torch.testing.assert_close(eager, expected)
    attention.train()
    torch.manual_seed(1)
    with torch.no_grad():
        trained, trained_weights = attention(hidden, mask, sdpa_attention, True)
    dropped = trained_weights == 0
    assert dropped.any() and not torch.allclose(trained, expected)
    torch.testing.assert_close(trained_weights[~dropped], 2 * probabilities[~dropped])


def test_freeze_feature_encoder_stops_its_gradients() -> None:
    model = _ctc_model().train()
    model.freeze_feature_encoder()
    out = model(_audio(2, 400), labels=torch.tensor([[3, 4], [5, -100]]))
    out.loss.backward()
    conv = [p for n, p in model.named_parameters() if n.startswith("wav2vec2.feature_extractor.")]
    assert conv and all(not p.requires_grad and p.grad is None for p in conv)
    assert model.lm_head.weight.grad is not None and bool(model.lm_head.weight.grad.any())


def test_ctc_loss_reduction_and_zero_infinity() -> None:
    values = _audio(2, 400)
    labels = torch.tensor([[3, 4, 5], [6, 7, -100]])
    summed = _ctc_model(ctc_loss_reduction="sum")(values, labels=labels).loss
    mean = _ctc_model(ctc_loss_reduction="mean")(values, labels=labels).loss
    per_row = _ctc_model(ctc_loss_reduction="none")(values, labels=labels).loss
    assert per_row.shape == (2,)
    torch.testing.assert_close(summed, per_row.sum())
    torch.testing.assert_close(mean, (per_row / torch.tensor([3.0, 2.0])).mean())
    # 19 frames cannot align 30 labels: the loss is infinite unless ctc_zero_infinity.
    impossible = torch.full((1, 30), 3)
    assert torch.isinf(_ctc_model()(values[:1], labels=impossible).loss)
    assert _ctc_model(ctc_zero_infinity=True)(values[:1], labels=impossible).loss.item() == 0.0  # exact: inf zeroed


def test_labels_beyond_vocabulary_are_refused() -> None:
    with pytest.raises(Wav2Vec2InputError, match="vocabulary has 12"):
        _ctc_model()(_audio(1, 400), labels=torch.tensor([[12]]))


def test_bad_inputs_and_configs() -> None:
    model = _ctc_model()
    with pytest.raises(InputError, match=r"\(batch, samples\)"):
        model(_audio(1, 400)[0])
    with pytest.raises(InputError, match="at least 25"):
        model(_audio(1, 20))
    with pytest.raises(ConfigError, match="feat_extract_norm"):
        Wav2Vec2Config(**{**TINY, "feat_extract_norm": "batch"})
    with pytest.raises(ConfigError, match="conv_stride"):
        Wav2Vec2Config(**{**TINY, "conv_stride": (5,)})
    with pytest.raises(ConfigError, match="add_adapter"):
        Wav2Vec2Config(**{**TINY, "add_adapter": True})


def test_legacy_weight_norm_names_load(tmp_path: Path) -> None:
    """Files from torch's old weight_norm (``weight_g``/``weight_v``) load into the same model."""
    model = _ctc_model()
    model.save_pretrained(tmp_path / "new")
    state = load_file(str(tmp_path / "new" / "model.safetensors"))
    prefix = "wav2vec2.encoder.pos_conv_embed.conv."
    state[prefix + "weight_g"] = state.pop(prefix + "parametrizations.weight.original0")
    state[prefix + "weight_v"] = state.pop(prefix + "parametrizations.weight.original1")
    (tmp_path / "old").mkdir()
    save_file(state, str(tmp_path / "old" / "model.safetensors"), metadata={"format": "pt"})
    (tmp_path / "old" / "config.json").write_text((tmp_path / "new" / "config.json").read_text())
    loaded = microformers.AutoModelForCTC.from_pretrained(tmp_path / "old")
    values = _audio(1, 400)
    with torch.no_grad():
        torch.testing.assert_close(loaded(values).logits, model(values).logits)


def test_spec_augment_masks_spans_in_training() -> None:
    torch.manual_seed(0)
    mask = compute_mask_indices((3, 50), mask_prob=0.3, mask_length=5, min_masks=1)
    assert mask.shape == (3, 50) and bool(mask.any(dim=1).all())
    model = _ctc_model(mask_time_prob=0.5, mask_time_length=2).train()
    assert model.wav2vec2.masked_spec_embed is not None
    values = _audio(1, 400)
    model.eval()
    with torch.no_grad():
        plain = model(values).logits
        forced = model(values, mask_time_indices=torch.ones(1, plain.shape[1], dtype=torch.bool)).logits
    assert not torch.allclose(plain, forced)


def test_auto_classes_and_exports(tmp_path: Path) -> None:
    model = checks.build_model(Wav2Vec2ForSequenceClassification, Wav2Vec2Config(**TINY))
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["architectures"] == ["Wav2Vec2ForSequenceClassification"]
    loaded = microformers.AutoModelForAudioClassification.from_pretrained(tmp_path)
    assert isinstance(loaded, Wav2Vec2ForSequenceClassification)
    assert microformers.Wav2Vec2ForCTC is Wav2Vec2ForCTC
    assert microformers.AutoConfig.from_pretrained(tmp_path).inputs_to_logits_ratio == 20
    # What to install when these are missing (kernel providers data).
    assert microformers.registry.provider_of("configs", "wav2vec2") == "microformers-wav2vec2"
    assert microformers.registry.provider_of("pipelines", "automatic-speech-recognition") == "microformers-audio"
