"""The conformance kit passes a correct toy decoder and catches each kind of deliberate bug in it."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from microformers import PretrainedConfig, PreTrainedModel
from microformers_sdk.cache import DynamicCache
from microformers_sdk.masks import build_attention_mask, position_ids_from_attention_mask
from microformers_sdk.outputs import CausalLMOutputWithPast
from microformers_sdk.testing import (
    ModelConformanceTests,
    build_model,
    check_batch_consistency,
    check_cache_equivalence,
    check_dtype_casting,
    check_gradients_flow,
    check_loss,
    check_padding_invariance,
    check_save_load_round_trip,
    default_labels,
    random_token_ids,
)
from microformers_sdk.testing.checks import assert_outputs_close


class ToyConfig(PretrainedConfig):
    model_type = "conformance-toy"

    def __init__(self, vocab_size: int = 40, hidden_size: int = 16, max_positions: int = 32, **kwargs: Any) -> None:
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.max_positions = max_positions
        self.bug = kwargs.pop("bug", None)
        super().__init__(**kwargs)


class ToyForCausalLM(PreTrainedModel):
    """One causal attention layer with absolute positions; ``config.bug`` switches in one defect."""

    config_class = ToyConfig
    base_model_prefix = "model"

    def __init__(self, config: ToyConfig) -> None:
        super().__init__(config)
        size = config.hidden_size
        self.embed = nn.Embedding(config.vocab_size, size)
        self.positions = nn.Embedding(config.max_positions, size)
        self.qkv = nn.Linear(size, 3 * size)
        self.norm = nn.LayerNorm(size)
        self.head = nn.Linear(size, config.vocab_size)
        if config.bug == "unused-parameter":
            self.unused = nn.Linear(size, size)
        if config.bug == "unsaved-state":
            self.register_buffer("offset", torch.randn(size), persistent=False)
        if config.bug in ("zero-gradient", "nan-gradient"):
            self.dead = nn.Linear(size, size)
        self.post_init()

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        past_key_values: DynamicCache | None = None,
        use_cache: bool | None = None,
        labels: torch.Tensor | None = None,
        **kwargs: Any,
    ) -> CausalLMOutputWithPast:
        bug = self.config.bug
        if use_cache and past_key_values is None:
            past_key_values = DynamicCache()
        past = past_key_values.get_seq_length() if past_key_values is not None else 0
        length = input_ids.shape[1]
        positions = position_ids_from_attention_mask(attention_mask, past, length, input_ids.device)
        if bug == "positions-ignore-cache":
            positions = torch.arange(length).unsqueeze(0)  # restarts at 0 on every decoding step
        hidden = self.embed(input_ids) + self.positions(positions)
        if bug == "batch-leak":
            hidden = hidden + hidden.mean(dim=0, keepdim=True)
        if bug == "unsaved-state":
            hidden = hidden + self.offset
        query, key, value = self.qkv(hidden).unflatten(-1, (3, 1, -1)).permute(2, 0, 3, 1, 4)
        if past_key_values is not None:
            key, value = past_key_values.update(key, value, 0)
            if bug == "double-cache-update":
                past_key_values.update(key[..., -1:, :], value[..., -1:, :], 0)
        mask, is_causal = build_attention_mask(None if bug == "ignores-mask" else attention_mask, length, past)
        attended = F.scaled_dot_product_attention(
            query, key, value, attn_mask=mask, is_causal=is_causal and mask is None and length > 1
        )
        logits = self.head(self.norm(hidden + attended.transpose(1, 2).flatten(2)))
        if bug == "float32-constant":
            logits = logits + torch.zeros(1, dtype=torch.float32)
        low_precision = logits.dtype != torch.float32
        if bug == "drift-in-low-precision" and low_precision:
            logits = logits * 1.1  # a 10% error: more than bf16 rounding, less than the old tolerance
        if bug == "zero-gradient":
            logits = logits + 0.0 * self.dead(hidden).sum()
        if bug == "nan-gradient":
            logits = logits + torch.sqrt(torch.cat([self.dead.weight.flatten(), self.dead.bias]) * 0.0).sum()
        if bug == "loss-without-labels" and labels is None:
            labels = input_ids
        loss = None
        if labels is not None and bug != "no-loss":
            shifted = F.pad(labels, (0, 1), value=-100)[:, 1:]
            reduction = "none" if bug == "loss-per-token" else "mean"
            loss = F.cross_entropy(logits.flatten(0, 1), shifted.flatten(), ignore_index=-100, reduction=reduction)
            if bug == "detached-loss":
                loss = loss.detach()
            if bug == "nan-loss":
                loss = loss * float("nan")
        cache = None if bug == "no-cache-returned" or not use_cache else past_key_values
        if bug == "no-logits-in-low-precision" and low_precision:
            logits = None
        if bug == "loss-not-first":
            output = CausalLMOutputWithPast(logits=logits, past_key_values=cache)
            output.loss = loss
            return output
        return CausalLMOutputWithPast(loss=loss, logits=logits, past_key_values=cache)


class TestToyConformance(ModelConformanceTests):
    """The suite itself, run on the correct toy."""

    config_class = ToyConfig
    model_classes = (ToyForCausalLM,)
    padding_side = "left"


def test_tests_that_apply_to_no_class_are_removed_not_skipped() -> None:
    class EncoderOnly(ModelConformanceTests):
        config_class = ToyConfig
        model_classes = (nn.Identity,)

    assert EncoderOnly.test_cache_equivalence is None
    assert EncoderOnly.test_loss_with_labels is None
    assert callable(TestToyConformance.test_cache_equivalence)
    assert callable(TestToyConformance.test_loss_with_labels)


def _toy(bug: str | None = None) -> tuple[ToyForCausalLM, ToyConfig, dict[str, torch.Tensor]]:
    config = ToyConfig(bug=bug, pad_token_id=0)
    model = build_model(ToyForCausalLM, config)
    ids = random_token_ids(model.config, 3, 6, avoid=0)
    return model, model.config, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def test_default_labels_follow_the_head() -> None:
    model, _, inputs = _toy()
    labels = default_labels(model, inputs)
    assert set(labels) == {"labels"}
    assert labels["labels"].shape == inputs["input_ids"].shape
    assert int(labels["labels"].max()) < model.config.vocab_size


def test_round_trip_catches_state_that_is_not_saved(tmp_path: Path) -> None:
    model, _, inputs = _toy()
    check_save_load_round_trip(model, inputs, tmp_path / "good")
    broken, _, inputs = _toy("unsaved-state")
    with pytest.raises(AssertionError, match="reloaded model"):
        check_save_load_round_trip(broken, inputs, tmp_path / "bad")


def test_dtype_check_catches_float32_leaking_into_outputs(tmp_path: Path) -> None:
    model, _, inputs = _toy()
    check_dtype_casting(model, inputs, tmp_path / "good")
    broken, _, inputs = _toy("float32-constant")
    with pytest.raises(AssertionError, match="torch.float32"):
        check_dtype_casting(broken, inputs, tmp_path / "bad")


def test_batch_check_catches_rows_that_see_each_other() -> None:
    model, _, inputs = _toy()
    check_batch_consistency(model, inputs)
    broken, _, inputs = _toy("batch-leak")
    with pytest.raises(AssertionError, match="batch row"):
        check_batch_consistency(broken, inputs)


def test_padding_check_catches_an_ignored_mask() -> None:
    model, config, _ = _toy()
    check_padding_invariance(model, config, padding_side="left", pad_token_id=0)
    broken, config, _ = _toy("ignores-mask")
    with pytest.raises(AssertionError, match="padded row"):
        check_padding_invariance(broken, config, padding_side="left", pad_token_id=0)


def test_cache_check_catches_wrong_positions_after_prefill() -> None:
    model, config, _ = _toy()
    check_cache_equivalence(model, config, pad_token_id=0)
    broken, config, _ = _toy("positions-ignore-cache")
    with pytest.raises(AssertionError, match="cached decoding"):
        check_cache_equivalence(broken, config, pad_token_id=0)


def test_loss_check_catches_a_detached_loss() -> None:
    model, _, inputs = _toy()
    check_loss(model, inputs, default_labels(model, inputs))
    broken, _, inputs = _toy("detached-loss")
    with pytest.raises(AssertionError, match="does not depend"):
        check_loss(broken, inputs, default_labels(broken, inputs))


def test_gradient_check_catches_an_unused_parameter() -> None:
    broken, _, inputs = _toy("unused-parameter")
    labels = default_labels(broken, inputs)
    with pytest.raises(AssertionError, match="unused.weight"):
        check_gradients_flow(broken, inputs, labels)
    check_gradients_flow(broken, inputs, labels, exempt=(r"^unused\.",))


class _Registry:
    """Collects what a conformance subclass would parametrize, without running pytest's machinery."""

    fixturenames: ClassVar[list[str]] = ["model_class"]

    def __init__(self, function: Any) -> None:
        self.function = function
        self.params: list[Any] = []

    def parametrize(self, name: str, values: list[Any], ids: list[str]) -> None:
        self.params = values


def test_suite_parametrizes_only_the_classes_a_test_applies_to() -> None:
    class Mixed(ModelConformanceTests):
        config_class = ToyConfig
        model_classes = (nn.Identity, ToyForCausalLM)

    for name, expected in (
        ("test_cache_equivalence", [ToyForCausalLM]),
        ("test_loss_with_labels", [ToyForCausalLM]),
        ("test_padding_invariance", [nn.Identity, ToyForCausalLM]),
    ):
        collected = _Registry(getattr(Mixed, name))
        Mixed().pytest_generate_tests(collected)  # type: ignore[arg-type]
        assert collected.params == expected, name


# -- every assertion of every check can fail: one deliberate defect each -------------------------
class TamperedToy(ToyForCausalLM):
    """A toy whose loading path is broken in one way (``tamper``), for the round-trip and dtype checks."""

    tamper: ClassVar[str | None] = None

    @classmethod
    def from_pretrained(cls, *args: Any, **kwargs: Any) -> Any:
        model = super().from_pretrained(*args, **kwargs)
        dtype = kwargs.get("dtype")
        if cls.tamper == "wrong-class":
            plain = ToyForCausalLM(model.config)
            plain.load_state_dict(model.state_dict())
            return plain
        if cls.tamper == "extra-buffer":
            model.register_buffer("extra", torch.zeros(1))
        if cls.tamper == "bias-as-float64":
            model.head.bias.data = model.head.bias.data.double()
        if cls.tamper == "bias-shifted":
            model.head.bias.data += 1.0
        if cls.tamper == "config-changed":
            model.config.max_positions = 31
        if cls.tamper == "norm-stays-float32" and dtype is not None:
            model.norm.float()
        if cls.tamper == "auto-dtype-lost" and dtype is None:
            model.float()
        return model

    @property
    def dtype(self) -> torch.dtype:
        return torch.float32 if self.tamper == "misreported-dtype" else super().dtype

    def save_pretrained(self, *args: Any, **kwargs: Any) -> Any:
        result = super().save_pretrained(*args, **kwargs)
        if self.tamper == "dtype-not-recorded":
            self.config.dtype = None
        return result


def _tampered(tamper: str) -> tuple[Any, dict[str, torch.Tensor]]:
    cls = type(f"Tampered_{tamper.replace('-', '_')}", (TamperedToy,), {"tamper": tamper})
    model = build_model(cls, ToyConfig(pad_token_id=0))
    ids = random_token_ids(model.config, 3, 6, avoid=0)
    return model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


@pytest.mark.parametrize(
    ("tamper", "message"),
    [
        ("wrong-class", "from_pretrained returned a ToyForCausalLM"),
        ("extra-buffer", r"state dict names changed in the round trip: lost \[\], gained \['extra'\]"),
        ("bias-as-float64", "'head.bias' came back as torch.float64"),
        ("bias-shifted", "'head.bias' changed in the save/load round trip"),
        ("config-changed", "the config changed in the save/load round trip"),
    ],
)
def test_round_trip_check_catches_each_loading_defect(tmp_path: Path, tamper: str, message: str) -> None:
    model, inputs = _tampered(tamper)
    with pytest.raises(AssertionError, match=message):
        check_save_load_round_trip(model, inputs, tmp_path / "saved")


@pytest.mark.parametrize(
    ("tamper", "message"),
    [
        ("norm-stays-float32", r"left \['norm.weight', 'norm.bias'\] in another dtype"),
        ("misreported-dtype", "reports model.dtype torch.float32"),
        ("dtype-not-recorded", "save_pretrained did not record the dtype"),
        ("auto-dtype-lost", "dtype='auto' loading should keep the saved torch.bfloat16"),
    ],
)
def test_dtype_check_catches_each_loading_defect(tmp_path: Path, tamper: str, message: str) -> None:
    model, inputs = _tampered(tamper)
    with pytest.raises(AssertionError, match=message):
        check_dtype_casting(model, inputs, tmp_path / "saved")


@pytest.mark.parametrize(
    ("bug", "message"),
    [
        ("no-logits-in-low-precision", "output fields differ"),
        ("drift-in-low-precision", "more than torch.bfloat16 rounding explains"),
    ],
)
def test_dtype_check_catches_each_output_defect(tmp_path: Path, bug: str, message: str) -> None:
    broken, _, inputs = _toy(bug)
    with pytest.raises(AssertionError, match=message):
        check_dtype_casting(broken, inputs, tmp_path / "bad")


def test_bf16_tolerance_is_what_bf16_rounding_needs(tmp_path: Path) -> None:
    """A 10% error in bfloat16 passed the old tolerance (0.1 x scale); 4 eps of bfloat16 (0.031) catches it."""
    broken, _, inputs = _toy("drift-in-low-precision")
    with pytest.raises(AssertionError, match="4 eps"):
        check_dtype_casting(broken, inputs, tmp_path / "tight")
    check_dtype_casting(broken, inputs, tmp_path / "loose", eps_multiple=0.1 / torch.finfo(torch.bfloat16).eps)


@pytest.mark.parametrize(
    ("bug", "message"),
    [
        ("no-cache-returned", "returned no past_key_values with use_cache=True"),
        ("double-cache-update", "the cache holds 4 positions, not 3"),
    ],
)
def test_cache_check_catches_each_cache_defect(bug: str, message: str) -> None:
    broken, config, _ = _toy(bug)
    with pytest.raises(AssertionError, match=message):
        check_cache_equivalence(broken, config, pad_token_id=0)


@pytest.mark.parametrize(
    ("bug", "message"),
    [
        ("no-loss", "returned no loss although"),
        ("loss-per-token", "the loss should be a scalar"),
        ("nan-loss", "the loss is not finite"),
        ("loss-not-first", "the loss must be the first field"),
        ("loss-without-labels", "a loss was returned although no labels were given"),
    ],
)
def test_loss_check_catches_each_loss_defect(bug: str, message: str) -> None:
    broken, _, inputs = _toy(bug)
    labels = random_token_ids(broken.config, 3, 6, seed=5)
    with pytest.raises(AssertionError, match=message):
        check_loss(broken, inputs, {"labels": labels})


@pytest.mark.parametrize(
    ("bug", "message"),
    [
        ("zero-gradient", r"all-zero gradients in \['dead.weight', 'dead.bias'\]"),
        ("nan-gradient", r"non-finite gradients in \['dead.weight', 'dead.bias'\]"),
    ],
)
def test_gradient_check_catches_zero_and_non_finite_gradients(bug: str, message: str) -> None:
    broken, _, inputs = _toy(bug)
    labels = default_labels(broken, inputs)
    with pytest.raises(AssertionError, match=message):
        check_gradients_flow(broken, inputs, labels)
    check_gradients_flow(broken, inputs, labels, exempt=(r"^dead\.",))


def test_output_comparison_catches_each_kind_of_difference() -> None:
    want = {"logits": torch.zeros(2, 3)}
    assert_outputs_close({"logits": torch.zeros(2, 3) + 1e-7}, want, atol=1e-6, what="ok")
    cases = [
        ({"scores": torch.zeros(2, 3)}, "output fields differ"),
        ({"logits": torch.zeros(2, 4)}, r"'logits' has shape \(2, 4\), expected \(2, 3\)"),
        ({"logits": torch.full((2, 3), float("nan"))}, "'logits' has non-finite values"),
        ({"logits": torch.full((2, 3), 1e-3)}, "'logits' differs by 0.001"),
    ]
    for got, message in cases:
        with pytest.raises(AssertionError, match=message):
            assert_outputs_close(got, want, atol=1e-6, what="case")
