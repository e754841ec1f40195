"""``microformers_sdk.testing`` (the conformance kit): behaviour the seventh mutation pass found unasserted in the
model builders, the input and label makers, the output comparison and the round-trip, dtype and cache checks
(docs/reliability.md, workspace ``jtst``).

The kit is what plugin authors run: its inputs must be reproducible, its labels must fit the head, and each check
must fail, naming what broke, on a model broken in one precise way (and pass a correct one at its limits)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest
import torch
from torch import nn

from microformers import PretrainedConfig, PreTrainedModel
from microformers_sdk.outputs import CausalLMOutputWithPast
from microformers_sdk.testing import ModelConformanceTests, checks


# -- randomize_parameters and build_model --------------------------------------------------------------
class _Mixed(nn.Module):
    """An integer parameter first (skipped), then a linear layer and a norm named the BERT way (``LayerNorm``)."""

    def __init__(self, config: Any = None) -> None:
        super().__init__()
        self.counts = nn.Parameter(torch.tensor([3, 4]), requires_grad=False)
        self.proj = nn.Linear(6, 5)
        self.LayerNorm = nn.LayerNorm(5)


def _expected_draws(model: nn.Module, seed: int, std: float) -> dict[str, torch.Tensor]:
    """What the kit documents: every floating parameter redrawn in order, N(0, std), norm weights around 1."""
    generator = torch.Generator().manual_seed(seed)
    expected = {}
    for name, param in model.named_parameters():
        if not param.is_floating_point():
            continue
        noise = torch.randn(param.shape, generator=generator) * std
        expected[name] = 1.0 + noise if name == "LayerNorm.weight" else noise
    return expected


def test_randomize_parameters_draws_every_floating_parameter_from_the_seed() -> None:
    model = checks.randomize_parameters(_Mixed())
    assert torch.equal(model.counts, torch.tensor([3, 4]))  # integer parameters are left alone
    expected = _expected_draws(_Mixed(), seed=0, std=0.1)
    assert sorted(expected) == ["LayerNorm.bias", "LayerNorm.weight", "proj.bias", "proj.weight"]
    for name, value in expected.items():
        # exact: the same seeded draws and the same ops
        assert torch.equal(model.get_parameter(name), value), name
    again = checks.randomize_parameters(_Mixed(), seed=3, std=0.5)
    for name, value in _expected_draws(_Mixed(), seed=3, std=0.5).items():
        # exact: the same seeded draws and the same ops
        assert torch.equal(again.get_parameter(name), value), name


def test_randomized_norm_weights_sit_around_one_and_the_rest_around_zero() -> None:
    model = checks.randomize_parameters(_Mixed()).requires_grad_(False)
    assert abs(float(model.LayerNorm.weight.mean()) - 1.0) < 0.2
    assert abs(float(model.LayerNorm.bias.mean())) < 0.2 and abs(float(model.proj.weight.mean())) < 0.2
    assert 0.05 < float(model.proj.weight.std()) < 0.2


class _Tied(nn.Module):
    """Ties its head to its embedding only when ``tie_weights`` is called (as a model built without post_init)."""

    def __init__(self, config: Any) -> None:
        super().__init__()
        config.built.append(type(self).__name__)  # a model that records itself in a nested config value
        self.embed = nn.Embedding(config.vocab_size, 3)
        self.head = nn.Linear(3, config.vocab_size, bias=False)

    def tie_weights(self) -> None:
        self.head.weight = self.embed.weight


def test_build_model_ties_weights_after_randomizing_and_returns_an_eval_model() -> None:
    model = checks.build_model(_Tied, SimpleNamespace(vocab_size=7, built=[]))
    assert model.head.weight is model.embed.weight
    assert not model.training


def test_build_model_leaves_the_callers_config_untouched() -> None:
    config = SimpleNamespace(vocab_size=7, built=[])
    model = checks.build_model(_Tied, config)
    assert config.built == []
    assert model is not None


def test_build_model_is_seeded_and_defaults_to_seed_zero() -> None:
    config = SimpleNamespace(vocab_size=7, built=[])
    default, zero, one = (checks.build_model(_Tied, config, **kw) for kw in ({}, {"seed": 0}, {"seed": 1}))
    # exact: the same seed draws the same numbers (the checks below)
    assert torch.equal(default.embed.weight, zero.embed.weight)
    assert not torch.equal(default.embed.weight, one.embed.weight)
    assert torch.equal(one.embed.weight, checks.randomize_parameters(_Tied(config), seed=1).embed.weight)


# -- random_token_ids and pad_rows ---------------------------------------------------------------------
def test_random_token_ids_are_reproducible_and_default_to_seed_zero() -> None:
    config = SimpleNamespace(vocab_size=9)
    ids = checks.random_token_ids(config, 2, 40)
    assert ids.shape == (2, 40) and ids.dtype == torch.long
    assert torch.equal(ids, checks.random_token_ids(config, 2, 40, seed=0))
    assert torch.equal(ids, torch.randint(0, 9, (2, 40), generator=torch.Generator().manual_seed(0)))
    assert not torch.equal(ids, checks.random_token_ids(config, 2, 40, seed=1))


def test_random_token_ids_use_the_whole_vocabulary() -> None:
    ids = checks.random_token_ids(SimpleNamespace(vocab_size=2), 1, 64)
    assert set(ids.flatten().tolist()) == {0, 1}


def test_the_avoided_id_becomes_the_next_id_and_nothing_else_changes() -> None:
    config = SimpleNamespace(vocab_size=4)
    raw = checks.random_token_ids(config, 3, 30, seed=5)
    for avoid in (0, 3):
        ids = checks.random_token_ids(config, 3, 30, seed=5, avoid=avoid)
        assert ids.dtype == torch.long and not bool((ids == avoid).any())
        assert torch.equal(ids, torch.where(raw == avoid, (raw + 1) % 4, raw)), avoid


def test_pad_rows_pads_on_the_side_asked_with_an_integer_mask() -> None:
    rows = [torch.tensor([5, 6, 7]), torch.tensor([8])]
    ids, mask = checks.pad_rows(rows, 1, "left")
    assert ids.tolist() == [[5, 6, 7], [1, 1, 8]] and mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    assert ids.dtype == mask.dtype == torch.long
    ids, mask = checks.pad_rows(rows, 2, "right")
    assert ids.tolist() == [[5, 6, 7], [8, 2, 2]] and mask.tolist() == [[1, 1, 1], [1, 0, 0]]
    assert ids.dtype == mask.dtype == torch.long


# -- default_labels ------------------------------------------------------------------------------------
class _Positional(nn.Module):
    """A token-classification style head: ``(batch, length, classes)`` logits."""

    def __init__(self, classes: int) -> None:
        super().__init__()
        self.classes = classes

    def forward(self, input_ids: torch.Tensor, labels: Any = None) -> dict[str, Any]:
        return {"logits": torch.zeros(*input_ids.shape, self.classes)}


class _PerRow(nn.Module):
    """A sequence-classification style head: ``(batch, classes)`` logits."""

    def __init__(self, classes: int) -> None:
        super().__init__()
        self.classes = classes

    def forward(self, input_ids: torch.Tensor, labels: Any = None) -> dict[str, Any]:
        return {"logits": torch.zeros(input_ids.shape[0], self.classes)}


class _Pretraining(nn.Module):
    """A BERT-pretraining style head: ``prediction_logits`` and a next-sentence head, no ``logits``."""

    def forward(self, input_ids: torch.Tensor, labels: Any = None, next_sentence_label: Any = None) -> dict[str, Any]:
        return {"prediction_logits": torch.zeros(*input_ids.shape, 3), "seq_relationship_logits": torch.zeros(1, 2)}


class _SpanArgumentsButLogits(nn.Module):
    """Takes span arguments as well as labels but this head returns plain logits (no ``start_logits``)."""

    def forward(
        self, input_ids: torch.Tensor, labels: Any = None, start_positions: Any = None, end_positions: Any = None
    ) -> dict[str, Any]:
        return {"logits": torch.zeros(*input_ids.shape, 4)}


class _Span(nn.Module):
    def forward(self, input_ids: torch.Tensor, start_positions: Any = None, end_positions: Any = None) -> dict:
        return {"start_logits": torch.zeros(input_ids.shape), "end_logits": torch.zeros(input_ids.shape)}


def _ids(batch: int, length: int) -> dict[str, torch.Tensor]:
    return {"input_ids": torch.ones(batch, length, dtype=torch.long)}


def test_token_labels_cover_the_classes_not_the_positions() -> None:
    labels = checks.default_labels(_Positional(classes=2), _ids(50, 7))
    assert set(labels) == {"labels"} and labels["labels"].shape == (50, 7) and labels["labels"].dtype == torch.long
    assert set(labels["labels"].flatten().tolist()) == {0, 1}
    wide = checks.default_labels(_Positional(classes=9), _ids(50, 2))["labels"]
    assert set(wide.flatten().tolist()) == set(range(9))


def test_labels_default_to_seed_zero_and_follow_the_seed() -> None:
    for model in (_Positional(5), _PerRow(3), _PerRow(1), _Pretraining(), _Span()):
        default = checks.default_labels(model, _ids(20, 6))
        zero, one = checks.default_labels(model, _ids(20, 6), seed=0), checks.default_labels(model, _ids(20, 6), seed=1)
        assert set(default) == set(zero) == set(one)
        for key in default:
            # exact: the same seed draws the same numbers
            assert torch.equal(default[key], zero[key]), (type(model).__name__, key)
            assert not torch.equal(default[key], one[key]), (type(model).__name__, key)


def test_class_labels_for_two_or_more_classes_and_float_targets_for_one() -> None:
    two = checks.default_labels(_PerRow(classes=2), _ids(40, 3))["labels"]
    assert two.shape == (40,) and two.dtype == torch.long and set(two.tolist()) == {0, 1}
    three = checks.default_labels(_PerRow(classes=3), _ids(40, 3))["labels"]
    assert three.dtype == torch.long and set(three.tolist()) == {0, 1, 2}
    regression = checks.default_labels(_PerRow(classes=1), _ids(40, 3))["labels"]
    assert regression.shape == (40,) and regression.dtype == torch.float32


def test_a_pretraining_head_gets_token_labels_and_next_sentence_labels() -> None:
    labels = checks.default_labels(_Pretraining(), _ids(40, 5))
    assert set(labels) == {"labels", "next_sentence_label"}
    assert labels["labels"].shape == (40, 5) and set(labels["labels"].flatten().tolist()) == {0, 1, 2}
    sentence = labels["next_sentence_label"]
    assert sentence.shape == (40,) and sentence.dtype == torch.long and set(sentence.tolist()) == {0, 1}


def test_span_labels_only_for_a_head_that_returns_start_logits() -> None:
    labels = checks.default_labels(_SpanArgumentsButLogits(), _ids(4, 6))
    assert set(labels) == {"labels"}
    span = checks.default_labels(_Span(), _ids(60, 2))
    for key in ("start_positions", "end_positions"):
        assert span[key].shape == (60,) and set(span[key].tolist()) == {0, 1}, key


def test_a_labelled_forward_without_logits_is_named() -> None:
    class NoLogits(nn.Module):
        def forward(self, input_ids: torch.Tensor, labels: Any = None) -> dict[str, Any]:
            return {"hidden": torch.zeros(*input_ids.shape, 2)}

    with pytest.raises(AssertionError) as raised:
        checks.default_labels(NoLogits(), _ids(2, 3))
    assert str(raised.value) == "NoLogits.forward takes labels but returns no logits; override make_labels()"


# -- main_outputs and assert_outputs_close -------------------------------------------------------------
def test_main_outputs_keep_only_floating_prediction_tensors() -> None:
    logits, scores = torch.zeros(2, 3), torch.ones(2)
    output = {
        "loss": torch.tensor(1.0),
        "logits": logits,
        "past_key_values": None,
        "extra": None,
        "token_ids": torch.ones(2, dtype=torch.long),
        "scores": scores,
        "hidden_states": (torch.zeros(2, 3),),
    }
    kept = checks.main_outputs(output)
    assert list(kept) == ["logits", "scores"] and kept["logits"] is logits and kept["scores"] is scores


def test_outputs_close_at_exactly_the_tolerance_and_for_empty_fields() -> None:
    checks.assert_outputs_close({"logits": torch.full((2,), 0.5)}, {"logits": torch.zeros(2)}, atol=0.5, what="edge")
    empty = {"logits": torch.zeros(2, 0)}
    checks.assert_outputs_close(empty, {"logits": torch.zeros(2, 0)}, atol=0.0, what="empty")
    assert checks._max_diff(torch.zeros(0), torch.zeros(0)) == 0.0
    assert checks._max_diff(torch.tensor([1.0, -2.0]), torch.tensor([1.5, 2.0])) == 4.0


# -- the round-trip and dtype checks on a configurable model -------------------------------------------
class _ScaleConfig(PretrainedConfig):
    model_type = "conformance-kit-rest-mutants"

    def __init__(self, vocab_size: int = 7, base: float = 0.0, low_offset: float = 0.0, **kwargs: Any) -> None:
        self.vocab_size = vocab_size
        self.base = base  # every logit's value in float32
        self.low_offset = low_offset  # what a lower precision adds to it (0: a correct model)
        super().__init__(**kwargs)


class _Scale(PreTrainedModel):
    """Logits ``base`` everywhere (exactly, in any dtype), plus ``low_offset`` when run below float32."""

    config_class = _ScaleConfig
    base_model_prefix = "model"
    tamper: ClassVar[str | None] = None

    def __init__(self, config: _ScaleConfig) -> None:
        super().__init__(config)
        self.embed = nn.Embedding(config.vocab_size, 2)
        self.extra = nn.ModuleList(nn.Linear(2, 2) for _ in range(3))
        self.register_buffer("shift", torch.zeros(2), persistent=False)
        self.post_init()

    def forward(self, input_ids: torch.Tensor, attention_mask: Any = None, **kwargs: Any) -> CausalLMOutputWithPast:
        hidden = self.embed(input_ids)
        for layer in self.extra:
            hidden = layer(hidden)
        logits = hidden * 0.0 + self.config.base + self.shift.to(hidden.dtype)
        if logits.dtype != torch.float32:
            logits = logits + self.config.low_offset
        return CausalLMOutputWithPast(logits=logits)

    @classmethod
    def from_pretrained(cls, *args: Any, **kwargs: Any) -> Any:
        model = super().from_pretrained(*args, **kwargs)
        if cls.tamper == "extra-stays-float32" and kwargs.get("dtype") is not None:
            model.extra.float()
        if cls.tamper == "shifted-on-reload":
            model.shift += 1e-3
        if cls.tamper == "config-changed-on-reload":
            model.config.low_offset = 1.0
        return model

    def to(self, *args: Any, **kwargs: Any) -> Any:
        return self if self.tamper == "to-ignores-dtype" else super().to(*args, **kwargs)

    def save_pretrained(self, *args: Any, **kwargs: Any) -> Any:
        result = super().save_pretrained(*args, **kwargs)
        if self.tamper == "dtype-not-recorded":
            self.config.dtype = None
        return result


def _scale(base: float = 0.0, low_offset: float = 0.0, tamper: str | None = None) -> tuple[Any, dict]:
    cls = type("Scale", (_Scale,), {"tamper": tamper}) if tamper else _Scale
    model = checks.build_model(cls, _ScaleConfig(base=base, low_offset=low_offset))
    ids = checks.random_token_ids(model.config, 2, 3)
    return model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def test_round_trip_check_allows_no_drift_in_the_reloaded_outputs_or_config(tmp_path: Path) -> None:
    model, inputs = _scale()
    checks.check_save_load_round_trip(model, inputs, tmp_path / "good")
    model, inputs = _scale(tamper="shifted-on-reload")
    with pytest.raises(AssertionError, match=r"^reloaded model: 'logits' differs by 0\.001 \(allowed 1e-06\)$"):
        checks.check_save_load_round_trip(model, inputs, tmp_path / "bad")
    model, inputs = _scale(tamper="config-changed-on-reload")
    with pytest.raises(AssertionError) as raised:
        checks.check_save_load_round_trip(model, inputs, tmp_path / "config")
    assert str(raised.value) == "the config changed in the save/load round trip"


def test_dtype_check_passes_at_exactly_its_tolerance_and_leaves_the_model_as_it_was(tmp_path: Path) -> None:
    """Outputs 0 in float32 and 2**-5 in bfloat16: exactly 4 eps x scale 1, the most the check allows."""
    model, inputs = _scale(low_offset=2**-5)
    checks.check_dtype_casting(model, inputs, tmp_path / "saved")
    assert model.dtype == torch.float32 and all(p.dtype == torch.float32 for p in model.parameters())
    assert sorted(path.name for path in tmp_path.iterdir()) == ["saved", "saved-bfloat16"]
    model, inputs = _scale()
    checks.check_dtype_casting(model, inputs, tmp_path / "half", dtype=torch.float16)
    assert (tmp_path / "half-float16" / "config.json").is_file()


def test_dtype_check_fails_just_past_its_tolerance(tmp_path: Path) -> None:
    model, inputs = _scale(low_offset=0.04)
    with pytest.raises(AssertionError) as raised:
        checks.check_dtype_casting(model, inputs, tmp_path / "saved")
    assert str(raised.value) == (
        "from_pretrained(dtype=...): 'logits' is 0.04 away from float32, more than torch.bfloat16 rounding "
        "explains (0.0312 = 4 eps x scale 1)"
    )


def test_dtype_tolerance_grows_with_the_outputs_scale(tmp_path: Path) -> None:
    """Outputs of 100: the allowed error is 4 eps x 101 = 3.16, so 2 passes and 4 fails, with the numbers named."""
    model, inputs = _scale(base=100.0, low_offset=2.0)
    checks.check_dtype_casting(model, inputs, tmp_path / "passes")
    model, inputs = _scale(base=100.0, low_offset=4.0)
    with pytest.raises(AssertionError, match=r"rounding explains \(3\.16 = 4 eps x scale 101\)$"):
        checks.check_dtype_casting(model, inputs, tmp_path / "fails")


def test_dtype_check_lists_the_first_five_parameters_left_behind(tmp_path: Path) -> None:
    model, inputs = _scale(tamper="extra-stays-float32")
    names = ["extra.0.weight", "extra.0.bias", "extra.1.weight", "extra.1.bias", "extra.2.weight"]
    with pytest.raises(AssertionError) as raised:
        checks.check_dtype_casting(model, inputs, tmp_path / "saved")
    assert str(raised.value) == f"from_pretrained(dtype=torch.bfloat16) left {names} in another dtype"


def test_dtype_check_names_a_model_whose_to_ignores_the_dtype(tmp_path: Path) -> None:
    model, inputs = _scale(tamper="to-ignores-dtype")
    with pytest.raises(AssertionError) as raised:
        checks.check_dtype_casting(model, inputs, tmp_path / "saved")
    assert str(raised.value) == "model.to(dtype): 'logits' is torch.float32, expected torch.bfloat16"


def test_dtype_check_names_a_save_that_does_not_record_the_dtype(tmp_path: Path) -> None:
    model, inputs = _scale(tamper="dtype-not-recorded")
    with pytest.raises(AssertionError) as raised:
        checks.check_dtype_casting(model, inputs, tmp_path / "saved")
    assert str(raised.value) == "save_pretrained did not record the dtype"


# -- the cache check's per-row outputs -----------------------------------------------------------------
class _Count:
    def __init__(self, total: torch.Tensor, length: int) -> None:
        self.total, self.length = total, length

    def get_seq_length(self) -> int:
        return self.length


class _RunningSum(nn.Module):
    """Per-token logits plus a per-row ``pooled`` sum of the real tokens so far; ``drift`` spoils cached pooling."""

    def __init__(self, drift: float = 0.0) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(11, 4)
        self.drift = drift

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        past_key_values: _Count | None = None,
        use_cache: bool | None = None,
    ) -> dict[str, Any]:
        past = past_key_values.get_seq_length() if past_key_values is not None else 0
        x = self.embed(input_ids)
        kept = attention_mask[:, past:, None].to(x.dtype)
        total = (x * kept).sum(1) + (past_key_values.total if past_key_values is not None else 0.0)
        pooled = total + (self.drift if past else 0.0)
        cache = _Count(total, past + input_ids.shape[1]) if use_cache else None
        return {"logits": x, "pooled": pooled, "past_key_values": cache}


def test_cache_check_compares_per_row_outputs_after_the_last_step() -> None:
    checks.check_cache_equivalence(_RunningSum(), SimpleNamespace(vocab_size=11), pad_token_id=0)
    with pytest.raises(AssertionError, match=r"^cached decoding vs full forward: 'pooled' differs by 0\.001"):
        checks.check_cache_equivalence(_RunningSum(drift=1e-3), SimpleNamespace(vocab_size=11), pad_token_id=0)


# -- suite hooks ---------------------------------------------------------------------------------------
def test_the_kit_pads_with_zero_when_the_config_has_no_usable_pad_token() -> None:
    kit = ModelConformanceTests()
    assert kit.pad_token_id(SimpleNamespace()) == 0
    assert kit.pad_token_id(SimpleNamespace(pad_token_id=[1, 2])) == 0
    assert kit.pad_token_id(SimpleNamespace(pad_token_id=4)) == 4
