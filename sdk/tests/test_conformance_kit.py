"""The conformance kit passes a correct toy decoder and catches each kind of deliberate bug in it."""

from __future__ import annotations

import importlib.metadata
import re
import types
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import microformers
from microformers import PretrainedConfig, PreTrainedModel
from microformers_sdk.cache import DynamicCache
from microformers_sdk.masks import build_attention_mask, position_ids_from_attention_mask
from microformers_sdk.outputs import CausalLMOutputWithPast
from microformers_sdk.testing import (
    ModelConformanceTests,
    PluginConformanceTests,
    build_model,
    check_batch_consistency,
    check_cache_equivalence,
    check_dtype_casting,
    check_gradients_flow,
    check_loss,
    check_padding_invariance,
    check_save_load_round_trip,
    checks,
    default_labels,
    plugin_checks,
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


# From test_conformance_kit_mutants.py: ``microformers_sdk.testing`` (the conformance kit) behaviour the mutation
# pass found unasserted (docs/reliability.md).


class _QA(torch.nn.Module):
    def forward(self, input_ids: torch.Tensor, start_positions: Any = None, end_positions: Any = None) -> dict:
        return {"start_logits": torch.zeros(input_ids.shape), "end_logits": torch.zeros(input_ids.shape)}


class _Regression(torch.nn.Module):
    def forward(self, input_ids: torch.Tensor, labels: Any = None) -> dict:
        return {"logits": torch.zeros(input_ids.shape[0], 1)}


def test_default_labels_for_span_and_regression_heads_are_seeded() -> None:
    inputs = {"input_ids": torch.ones(3, 7, dtype=torch.long)}
    first, second = checks.default_labels(_QA(), inputs, seed=4), checks.default_labels(_QA(), inputs, seed=4)
    assert set(first) == {"start_positions", "end_positions"}
    for key in first:
        assert torch.equal(first[key], second[key]) and first[key].shape == (3,)
        assert 0 <= int(first[key].min()) and int(first[key].max()) < 7
    regression = checks.default_labels(_Regression(), inputs, seed=4)
    assert set(regression) == {"labels"} and regression["labels"].dtype == torch.float32
    # exact: the same seed draws the same numbers
    assert torch.equal(regression["labels"], checks.default_labels(_Regression(), inputs, seed=4)["labels"])


def test_the_kit_pads_with_the_configs_pad_token() -> None:
    kit = ModelConformanceTests()
    assert kit.pad_token_id(SimpleNamespace(pad_token_id=5)) == 5
    assert kit.pad_token_id(SimpleNamespace(pad_token_id=None)) == 0


def test_registrations_that_do_not_resolve_are_listed(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> None:
        raise microformers.PluginError("cannot import 'nowhere:Thing'")

    registrations = [SimpleNamespace(load=broken), SimpleNamespace(load=lambda: object())]
    monkeypatch.setattr(plugin_checks, "discovered", lambda name: SimpleNamespace(registrations=registrations))
    with pytest.raises(AssertionError, match=r"^cannot import 'nowhere:Thing'$"):
        plugin_checks.check_registrations_resolve("any")


class _Kit(ModelConformanceTests):
    def make_config(self) -> Any:
        return SimpleNamespace(pad_token_id=7)

    def make_model(self, model_class: type, config: Any) -> Any:
        return SimpleNamespace(config=config)

    def make_inputs(self, config: Any) -> dict:
        return {}


def test_the_padding_check_is_handed_the_configs_pad_token(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Any] = []
    monkeypatch.setattr(
        checks, "check_padding_invariance", lambda model, config, **kwargs: seen.append(kwargs["pad_token_id"])
    )
    _Kit().test_padding_invariance(object)
    assert seen == [7]


# From test_conformance_kit_full_mutants.py: ``microformers_sdk.testing`` (the conformance kit): behaviour the full
# mutation run of ``checks.py``, ``suite.py`` and ``plugin_checks.py`` found unasserted (docs/reliability.md,
# workspace ``htst``). The kit is what plugin authors run, so most tests here hand a check a model or plugin that is
# broken in one precise way and expect the check to fail, naming what broke.


# -- plugin_checks ----------------------------------------------------------------------------------
def test_check_plugin_passes_an_installed_plugin_and_names_a_missing_entry_point() -> None:
    plugin_checks.check_plugin("sdk")
    with pytest.raises(AssertionError, match=r"no entry point 'no-such-plugin' in group 'microformers' \(installed: "):
        plugin_checks.check_plugin("no-such-plugin")


def test_a_missing_entry_point_lists_the_installed_ones_sorted() -> None:
    with pytest.raises(AssertionError) as raised:
        plugin_checks.entry_point("no-such-plugin")
    names = sorted(ep.name for ep in importlib.metadata.entry_points(group="microformers"))
    assert f"(installed: {names}); check pyproject" in str(raised.value)
    assert plugin_checks.entry_point("sdk").name == "sdk"


def test_heavy_imports_are_reported_and_a_failing_import_is_named() -> None:
    assert plugin_checks.heavy_imports_of("json", ("json", "torch")) == ["json"]
    with pytest.raises(AssertionError) as raised:
        plugin_checks.heavy_imports_of("no_such_module_xyz")
    message = str(raised.value)  # the child's stderr, as text
    assert message.startswith("importing no_such_module_xyz failed in a fresh interpreter:\nTraceback (most recent")
    assert message.endswith("\nModuleNotFoundError: No module named 'no_such_module_xyz'\n")


def _fake_entry_point(monkeypatch: pytest.MonkeyPatch, value: str, module: Any = None) -> None:
    def fake(plugin_name: str) -> Any:
        return SimpleNamespace(name=plugin_name, value=value, load=lambda: module)

    monkeypatch.setattr(plugin_checks, "entry_point", fake)


def test_an_entry_module_that_imports_torch_fails_the_lightness_check(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_entry_point(monkeypatch, "microformers_sdk.testing:PluginConformanceTests")
    with pytest.raises(
        AssertionError,
        match=r"^importing microformers_sdk.testing \(the 'heavy' entry point\) imports \['torch'\]; plugin discovery",
    ):
        plugin_checks.check_entry_module_is_light("heavy")


def test_a_module_without_api_version_fails_the_declaration_check(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_entry_point(monkeypatch, "bad", types.ModuleType("bad"))
    with pytest.raises(AssertionError, match=r"^plugin 'bad': it does not declare MICROFORMERS_API_VERSION"):
        plugin_checks.check_declaration("bad")


def test_discovery_failures_are_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    assert plugin_checks.discovered("sdk").name == "sdk"
    calls: list[str] = []
    plugins = {"broken": SimpleNamespace(broken=True, error="ImportError: boom")}
    fake = SimpleNamespace(discover=lambda: calls.append("discover"), plugins=plugins)
    monkeypatch.setattr(microformers, "registry", fake)
    with pytest.raises(AssertionError, match=r"^plugin 'broken' failed to load: ImportError: boom$"):
        plugin_checks.discovered("broken")
    with pytest.raises(AssertionError, match=r"^discovery did not find plugin 'gone'$"):
        plugin_checks.discovered("gone")
    assert calls == ["discover", "discover"]


class _Promises(PluginConformanceTests):
    plugin_name = "sdk"
    registers = (("attention", "sdpa"), ("attention", "no-such-attention"))


def test_a_promised_registration_that_is_missing_is_named() -> None:
    with pytest.raises(
        AssertionError,
        match=r"^plugin 'sdk' does not register \[\('attention', 'no-such-attention'\)\]; it does: \[.*'sdpa'",
    ):
        _Promises().test_registers_what_it_promises()


def test_registrations_with_names_of_mixed_types_are_listed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A kind may hold tuple names (``("llama", "AutoModel")``) beside plain ones: the message still lists them."""
    registrations = [
        SimpleNamespace(kind="models", name=("toy", "AutoModel")),
        SimpleNamespace(kind="models", name="toy"),
    ]
    monkeypatch.setattr(plugin_checks, "discovered", lambda name: SimpleNamespace(registrations=registrations))
    with pytest.raises(
        AssertionError, match=r"it does: \[\('models', 'toy'\), \('models', \('toy', 'AutoModel'\)\)\]$"
    ):
        _Promises().test_registers_what_it_promises()


# -- suite --------------------------------------------------------------------------------------
class _KitConfig(PretrainedConfig):
    model_type = "conformance-kit-full-mutants"

    def __init__(self, vocab_size: int = 11, hidden_size: int = 4, **kwargs: Any) -> None:
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        super().__init__(**kwargs)


class _Tiny(PreTrainedModel):
    """An embedding, a layer norm and a head (the norm's name marks its weight as a norm weight)."""

    config_class = _KitConfig
    base_model_prefix = "model"

    def __init__(self, config: _KitConfig) -> None:
        super().__init__(config)
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
        self.final_norm = nn.LayerNorm(config.hidden_size)
        self.head = nn.Linear(config.hidden_size, config.vocab_size)
        self.post_init()

    def forward(self, input_ids: torch.Tensor, **kwargs: Any) -> CausalLMOutputWithPast:
        return CausalLMOutputWithPast(logits=self.head(self.final_norm(self.embed(input_ids))))


class _Plain(nn.Module):
    """A model class whose forward takes no labels and no cache."""

    def forward(self, input_ids: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"logits": torch.zeros(*input_ids.shape, 2)}


class _Full(nn.Module):
    """A model class whose forward takes labels and a cache (so every suite test applies)."""

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: Any = None,
        labels: Any = None,
        past_key_values: Any = None,
        use_cache: Any = None,
    ) -> dict[str, torch.Tensor]:
        return {"logits": torch.zeros(*input_ids.shape, 2)}


class _Recorded(ModelConformanceTests):
    """Every knob set away from its default; the checks are replaced by recorders."""

    config_class = _KitConfig
    config_kwargs: ClassVar[dict[str, Any]] = {"vocab_size": 13, "pad_token_id": 3}
    model_classes = (_Full,)
    padding_side = "left"
    batch_size = 2
    seq_length = 5
    atol = 3e-4
    cast_dtype = torch.float16
    cast_eps_multiple = 6.0
    parameters_without_gradient = (r"^frozen\.",)

    def make_model(self, model_class: type, config: Any) -> Any:
        model = model_class()
        model.config = config
        return model


def _record(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, tuple, dict]]:
    seen: list[tuple[str, tuple, dict]] = []
    for name in (
        "check_save_load_round_trip",
        "check_dtype_casting",
        "check_batch_consistency",
        "check_padding_invariance",
        "check_cache_equivalence",
        "check_loss",
        "check_gradients_flow",
    ):
        monkeypatch.setattr(checks, name, lambda *args, _name=name, **kwargs: seen.append((_name, args, kwargs)))
    return seen


def test_each_suite_test_hands_its_check_the_class_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen = _record(monkeypatch)
    kit = _Recorded()
    kit.test_save_load_round_trip(_Full, tmp_path)
    kit.test_dtype_casting(_Full, tmp_path)
    kit.test_batch_matches_single(_Full)
    kit.test_padding_invariance(_Full)
    kit.test_cache_equivalence(_Full)
    kit.test_loss_with_labels(_Full)
    kit.test_gradients_flow(_Full)
    by_name = {name: (args, kwargs) for name, args, kwargs in seen}
    assert len(seen) == len(by_name) == 7

    args, kwargs = by_name["check_save_load_round_trip"]
    assert isinstance(args[0], _Full) and args[2] == tmp_path / "saved" and kwargs == {}
    assert args[1]["input_ids"].shape == (2, 5)
    args, kwargs = by_name["check_dtype_casting"]
    assert isinstance(args[0], _Full) and args[2] == tmp_path / "saved"
    assert kwargs == {"dtype": torch.float16, "eps_multiple": 6.0}
    args, kwargs = by_name["check_batch_consistency"]
    assert isinstance(args[0], _Full) and args[1]["input_ids"].shape == (2, 5) and kwargs == {"atol": 3e-4}
    args, kwargs = by_name["check_padding_invariance"]
    assert isinstance(args[1], _KitConfig) and args[1].vocab_size == 13
    assert kwargs == {"padding_side": "left", "pad_token_id": 3, "atol": 3e-4}
    args, kwargs = by_name["check_cache_equivalence"]
    assert isinstance(args[0], _Full) and isinstance(args[1], _KitConfig) and args[1].vocab_size == 13
    assert kwargs == {"pad_token_id": 3, "atol": 3e-4}
    args, kwargs = by_name["check_loss"]
    assert isinstance(args[0], _Full) and args[1]["input_ids"].shape == (2, 5)
    assert set(args[2]) == {"labels"} and args[2]["labels"].shape == (2, 5)
    args, kwargs = by_name["check_gradients_flow"]
    assert isinstance(args[0], _Full) and args[1]["input_ids"].shape == (2, 5)
    assert set(args[2]) == {"labels"} and args[3] == (r"^frozen\.",)


def test_make_config_needs_a_config_class() -> None:
    with pytest.raises(TypeError, match=r"^ModelConformanceTests must set config_class \(or override make_config\)$"):
        ModelConformanceTests().make_config()
    config = _Recorded().make_config()
    assert isinstance(config, _KitConfig) and config.vocab_size == 13 and config.pad_token_id == 3


def test_make_inputs_are_the_class_shape_and_avoid_the_pad_token() -> None:
    config = _KitConfig(vocab_size=3, pad_token_id=1)
    inputs = _Recorded().make_inputs(config)
    assert set(inputs) == {"input_ids", "attention_mask"}
    ids = inputs["input_ids"]
    assert ids.shape == (2, 5) and ids.dtype == torch.long
    assert not bool((ids == 1).any()) and bool((ids >= 0).all()) and bool((ids < 3).all())
    assert torch.equal(inputs["attention_mask"], torch.ones(2, 5, dtype=torch.long))
    default = ModelConformanceTests().make_inputs(_KitConfig())
    assert default["input_ids"].shape == (3, 7)


def test_make_labels_only_for_classes_that_take_labels() -> None:
    inputs = {"input_ids": torch.ones(2, 4, dtype=torch.long)}
    assert _Recorded().make_labels(_Plain(), inputs) == {}

    class WithLabels(nn.Module):
        def forward(self, input_ids: torch.Tensor, labels: Any = None) -> dict[str, torch.Tensor]:
            return {"logits": torch.zeros(*input_ids.shape, 6)}

    labels = _Recorded().make_labels(WithLabels(), inputs)
    assert set(labels) == {"labels"} and labels["labels"].shape == (2, 4)
    assert torch.equal(labels["labels"], checks.default_labels(WithLabels(), inputs, seed=0)["labels"])


def test_the_default_model_is_built_by_build_model() -> None:
    config = _KitConfig(pad_token_id=0)
    model = ModelConformanceTests().make_model(_Tiny, config)
    expected = checks.build_model(_Tiny, config)
    assert not model.training
    # exact: the same seeded build
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), expected.parameters(), strict=True))


class _Metafunc:
    def __init__(self, function: Any, fixturenames: list[str]) -> None:
        self.function = function
        self.fixturenames = fixturenames
        self.calls: list[tuple[str, list[Any], list[str]]] = []

    def parametrize(self, name: str, values: list[Any], ids: list[str]) -> None:
        self.calls.append((name, values, ids))


def test_parametrisation_by_model_class() -> None:
    kit = _Recorded()
    untouched = _Metafunc(_Recorded.test_batch_matches_single, ["tmp_path"])
    kit.pytest_generate_tests(untouched)  # type: ignore[arg-type]
    assert untouched.calls == []
    metafunc = _Metafunc(_Recorded.test_batch_matches_single, ["model_class"])
    kit.pytest_generate_tests(metafunc)  # type: ignore[arg-type]
    assert metafunc.calls == [("model_class", [_Full], ["_Full"])]

    class Mixed(ModelConformanceTests):
        config_class = _KitConfig
        model_classes = (_Plain, _Full)

    for test, expected in ((Mixed.test_cache_equivalence, [_Full]), (Mixed.test_padding_invariance, [_Plain, _Full])):
        metafunc = _Metafunc(test, ["model_class"])
        Mixed().pytest_generate_tests(metafunc)  # type: ignore[arg-type]
        assert metafunc.calls == [("model_class", expected, [cls.__name__ for cls in expected])]

    class NoClasses(ModelConformanceTests):
        config_class = _KitConfig

    with pytest.raises(TypeError, match=r"^NoClasses must list its model_classes$"):
        NoClasses().pytest_generate_tests(_Metafunc(NoClasses.test_gradients_flow, ["model_class"]))  # type: ignore[arg-type]
    # a subclass that has not listed its classes yet keeps every test (the error above names what is missing)
    assert callable(NoClasses.test_cache_equivalence) and callable(NoClasses.test_loss_with_labels)


def test_each_unresolvable_registration_is_listed_on_its_own_line(monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(message: str) -> Any:
        def load() -> None:
            raise microformers.PluginError(message)

        return SimpleNamespace(load=load)

    registrations = [failing("cannot import 'a:A'"), SimpleNamespace(load=object), failing("cannot import 'b:B'")]
    monkeypatch.setattr(plugin_checks, "discovered", lambda name: SimpleNamespace(registrations=registrations))
    with pytest.raises(AssertionError, match=r"^cannot import 'a:A'\ncannot import 'b:B'$"):
        plugin_checks.check_registrations_resolve("any")


# -- checks -------------------------------------------------------------------------------------
class _Shifted(nn.Module):
    """Mixes each row with the next one: a token shift done along the batch dimension instead of the sequence."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(11, 4)

    def forward(self, input_ids: torch.Tensor, attention_mask: Any = None) -> dict[str, torch.Tensor]:
        hidden = self.embed(input_ids)
        following = torch.cat([hidden[1:], torch.zeros_like(hidden[:1])], dim=0)
        return {"logits": hidden + following}


def test_batch_check_catches_a_row_that_sees_the_next_row() -> None:
    torch.manual_seed(0)
    ids = torch.tensor([[1, 2, 3], [4, 5, 6], [7, 8, 9]])
    with pytest.raises(AssertionError, match=r"^batch row 0 vs alone: 'logits' differs by"):
        checks.check_batch_consistency(_Shifted(), {"input_ids": ids, "attention_mask": torch.ones_like(ids)})


class _MaskPositions(nn.Module):
    """Needs its attention mask: positions counted from it (as left padding requires), outputs mean-pooled over it."""

    def __init__(self, vocab_size: int = 11, leak: float = 0.0) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(vocab_size, 4)
        self.positions = nn.Embedding(8, 4)
        self.leak = leak

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> dict[str, torch.Tensor]:
        if attention_mask.shape != input_ids.shape:
            raise ValueError(f"attention_mask {tuple(attention_mask.shape)} for input_ids {tuple(input_ids.shape)}")
        positions = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        hidden = self.embed(input_ids) + self.positions(positions)
        kept = attention_mask[..., None].to(hidden.dtype)
        pooled = (hidden * kept).sum(1) / kept.sum(1)
        padding = (hidden * (1 - kept)).sum(1, keepdim=True)  # a correct model ignores it: leak = 0
        logits = hidden + self.leak * padding
        return {
            "logits": logits,
            "scores": logits.sum(-1),
            "pooled": pooled,
        }  # (batch, length, 4), (.., length), (.., 4)


@pytest.mark.parametrize("side", ["left", "right"])
def test_padding_check_passes_a_model_that_needs_its_integer_mask(side: str) -> None:
    config = SimpleNamespace(vocab_size=11)
    checks.check_padding_invariance(_MaskPositions(), config, padding_side=side, pad_token_id=0)


def test_padding_check_catches_a_small_leak_of_the_padding() -> None:
    config = SimpleNamespace(vocab_size=11)
    with pytest.raises(AssertionError, match=r"^left-padded row 1 vs unpadded: 'logits' differs by 0\.0"):
        checks.check_padding_invariance(_MaskPositions(leak=0.01), config, padding_side="left", pad_token_id=0)


class _PoolsBeforeFirstPad(nn.Module):
    """Pools the token before the first pad id (GPT-2's sequence classifier once did; -1 wraps to the last token)."""

    def __init__(self, pad_token_id: int) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(3, 5)
        self.pad_token_id = pad_token_id

    def forward(self, input_ids: torch.Tensor, attention_mask: Any = None) -> dict[str, torch.Tensor]:
        last = (input_ids == self.pad_token_id).int().argmax(-1) - 1
        return {"logits": self.embed(input_ids)[torch.arange(len(input_ids)), last]}


def test_padding_check_keeps_the_pad_id_out_of_the_real_tokens() -> None:
    """Real text never holds the pad id: a model that finds its real tokens by id must still pass."""
    for pad in (0, 2):
        config = SimpleNamespace(vocab_size=3)
        checks.check_padding_invariance(_PoolsBeforeFirstPad(pad), config, padding_side="left", pad_token_id=pad)


class _Heads(nn.Module):
    """A body, ``heads`` extra linear layers and maybe a frozen layer; ``heads_in_loss``: "trained", "absent"
    (not in the loss), "zero" (in it times zero) or "nan" (with non-finite gradients)."""

    def __init__(self, heads: int = 0, frozen: bool = False, heads_in_loss: str = "trained") -> None:
        super().__init__()
        torch.manual_seed(0)
        self.frozen = nn.Linear(3, 3).requires_grad_(False) if frozen else None  # first in named_parameters()
        self.body = nn.Linear(3, 3)
        self.extra = nn.ModuleList(nn.Linear(3, 3) for _ in range(heads))
        self.heads_in_loss = heads_in_loss

    def forward(self, input_ids: torch.Tensor, labels: Any = None) -> dict[str, Any]:
        features = input_ids.float()[..., None].expand(-1, -1, 3)
        hidden = self.body(features) if self.frozen is None else self.body(features) + self.frozen(features)
        aux = sum((head(hidden) for head in self.extra), torch.zeros(()))
        out: dict[str, Any] = {"loss": None, "logits": hidden, "aux": hidden + aux}
        if labels is not None:
            out["loss"] = hidden.pow(2).mean()
            if self.heads_in_loss == "trained":
                out["loss"] = out["loss"] + aux.pow(2).mean()
            elif self.heads_in_loss == "zero":
                out["loss"] = out["loss"] + 0.0 * aux.sum()
            elif self.heads_in_loss == "nan":
                out["loss"] = out["loss"] + sum(torch.sqrt(param * 0.0).sum() for param in self.extra.parameters())
        return out


_IDS = {"input_ids": torch.tensor([[1, 2], [3, 4]])}


_LABELS = {"labels": torch.tensor([[1, 2], [3, 4]])}


def test_gradient_check_follows_the_loss_not_the_outputs() -> None:
    """An auxiliary head that the loss never trains is caught even though it shows in the outputs."""
    checks.check_gradients_flow(_Heads(heads=1), _IDS, _LABELS)
    with pytest.raises(AssertionError, match=r"^no gradient reached \['extra.0.weight', 'extra.0.bias'\]$"):
        checks.check_gradients_flow(_Heads(heads=1, heads_in_loss="absent"), _IDS, _LABELS)


def test_gradient_check_without_labels_backpropagates_the_outputs() -> None:
    checks.check_gradients_flow(_Heads(heads=1, heads_in_loss="absent"), _IDS, {})


def test_gradient_check_skips_frozen_parameters_and_checks_the_rest() -> None:
    checks.check_gradients_flow(_Heads(heads=1, frozen=True), _IDS, _LABELS)
    with pytest.raises(AssertionError, match=r"^no gradient reached \['extra.0.weight', 'extra.0.bias'\]$"):
        checks.check_gradients_flow(_Heads(heads=1, frozen=True, heads_in_loss="absent"), _IDS, _LABELS)
    exempt = (r"^body\.",)
    checks.check_gradients_flow(_Heads(heads=1), _IDS, _LABELS, exempt=exempt)
    with pytest.raises(AssertionError, match=r"^no gradient reached \['extra.0.weight', 'extra.0.bias'\]$"):
        checks.check_gradients_flow(_Heads(heads=1, heads_in_loss="absent"), _IDS, _LABELS, exempt=exempt)


@pytest.mark.parametrize(
    ("heads_in_loss", "problem"),
    [("absent", "no gradient reached"), ("zero", "all-zero gradients in"), ("nan", "non-finite gradients in")],
)
def test_gradient_check_lists_at_most_eight_parameters(heads_in_loss: str, problem: str) -> None:
    names = [f"extra.{i}.{kind}" for i in range(4) for kind in ("weight", "bias")]
    with pytest.raises(AssertionError, match=rf"^{problem} {re.escape(str(names))}$"):
        checks.check_gradients_flow(_Heads(heads=5, heads_in_loss=heads_in_loss), _IDS, _LABELS)


def test_gradient_check_ignores_stale_gradients_and_leaves_none_behind() -> None:
    """A gradient left over from an earlier step must not hide a parameter the loss does not reach."""
    model = _Heads(heads=1, heads_in_loss="absent")
    for param in model.parameters():
        param.grad = torch.ones_like(param)
    with pytest.raises(AssertionError, match=r"^no gradient reached \['extra.0.weight', 'extra.0.bias'\]$"):
        checks.check_gradients_flow(model, _IDS, _LABELS)
    model = _Heads(heads=1)
    checks.check_gradients_flow(model, _IDS, _LABELS)
    assert all(param.grad is None for param in model.parameters())


def test_the_lightness_check_names_its_heavy_modules_and_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_entry_point(monkeypatch, "json:loads")
    plugin_checks.check_entry_module_is_light("light")
    with pytest.raises(AssertionError) as raised:
        plugin_checks.check_entry_module_is_light("light", heavy=("json",))
    assert str(raised.value) == (
        "importing json (the 'light' entry point) imports ['json']; plugin discovery must stay cheap: register "
        "'module:Name' strings and use microformers.lazy_exports in the package __init__"
    )


class _Lossy(nn.Module):
    """A loss head broken in one way (``bug``)."""

    def __init__(self, bug: str) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.head = nn.Embedding(5, 3)
        self.bug = bug

    def forward(self, input_ids: torch.Tensor, labels: Any = None) -> CausalLMOutputWithPast:
        logits = self.head(input_ids)
        loss = None if labels is None and self.bug != "loss-without-labels" else logits.pow(2).mean()
        if loss is not None and self.bug == "detached":
            loss = loss.detach()
        if loss is not None and self.bug == "nan":
            loss = loss * float("nan")
        if self.bug == "no-loss":
            loss = None
        if self.bug == "loss-not-first":
            output = CausalLMOutputWithPast(logits=logits)
            output.loss = loss
            return output
        return CausalLMOutputWithPast(loss=loss, logits=logits)


@pytest.mark.parametrize(
    ("bug", "message"),
    [
        ("no-loss", "_Lossy returned no loss although ['labels'] were given"),
        ("nan", "the loss is not finite"),
        ("detached", "the loss does not depend on the parameters"),
        ("loss-not-first", "the loss must be the first field of the output"),
        ("loss-without-labels", "a loss was returned although no labels were given"),
    ],
)
def test_loss_check_says_exactly_what_is_wrong(bug: str, message: str) -> None:
    ids = torch.tensor([[1, 2, 3]])
    checks.check_loss(_Lossy("none"), {"input_ids": ids}, {"labels": ids})
    with pytest.raises(AssertionError) as raised:
        checks.check_loss(_Lossy(bug), {"input_ids": ids}, {"labels": ids})
    assert str(raised.value) == message


class _State:
    """A recurrent cache: the running mean and count of the real tokens' embeddings so far."""

    def __init__(self, mean: torch.Tensor, count: torch.Tensor, length: int) -> None:
        self.mean, self.count, self.length = mean, count, length

    def get_seq_length(self) -> int:
        return self.length


class _Recurrent(nn.Module):
    """Each output is the token plus the mean of the real tokens so far, carried in a cache between calls.

    ``bug``: "unguarded" divides by a zero count (a row whose whole prefill is padding poisons the state);
    "drift" is 1e-3 off in cached steps; "mask-from-ids-at-prefill" finds the prefill's padding by pad id."""

    def __init__(self, bug: str | None = None, vocab_size: int = 11, pad_token_id: int = 0) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(vocab_size, 4)
        self.bug = bug
        self.pad_token_id = pad_token_id

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        past_key_values: _State | None = None,
        use_cache: bool | None = None,
    ) -> dict[str, Any]:
        batch, length = input_ids.shape
        past = past_key_values.get_seq_length() if past_key_values is not None else 0
        if attention_mask.shape != (batch, past + length):
            raise ValueError(f"attention_mask {tuple(attention_mask.shape)} for {past} cached + {length} new")
        x = self.embed(input_ids)
        real = attention_mask[:, past:]
        if self.bug == "mask-from-ids-at-prefill" and past == 0:
            real = input_ids != self.pad_token_id
        kept = real[..., None].to(x.dtype)
        total, count = torch.zeros(batch, 1, 4), torch.zeros(batch, 1, 1)
        if past_key_values is not None:
            total, count = past_key_values.mean * past_key_values.count, past_key_values.count
        total = total + (x * kept).cumsum(1)
        count = count + kept.cumsum(1)
        mean = total / (count if self.bug == "unguarded" else count.clamp(min=1))
        logits = mean + x + (1e-3 * past if self.bug == "drift" else 0.0)
        cache = _State(mean[:, -1:], count[:, -1:], past + length) if use_cache else None
        return {"logits": logits, "scores": logits.sum(-1), "pooled": mean[:, -1], "past_key_values": cache}


def test_cache_check_passes_a_recurrent_model_with_positional_and_pooled_outputs() -> None:
    checks.check_cache_equivalence(_Recurrent(), SimpleNamespace(vocab_size=11), pad_token_id=0)


@pytest.mark.parametrize(
    ("bug", "message"),
    [
        ("unguarded", r"^cached decoding vs full forward: 'logits' has non-finite values$"),
        ("drift", r"^cached decoding vs full forward: 'logits' differs by 0\.00"),
    ],
)
def test_cache_check_catches_each_state_defect(bug: str, message: str) -> None:
    """Row 2 of the check is left-padded through its whole prefill: a state that cannot start empty fails."""
    with pytest.raises(AssertionError, match=message):
        checks.check_cache_equivalence(_Recurrent(bug), SimpleNamespace(vocab_size=11), pad_token_id=0)


def test_cache_check_keeps_the_pad_id_out_of_the_real_tokens() -> None:
    model = _Recurrent("mask-from-ids-at-prefill", vocab_size=3)
    checks.check_cache_equivalence(model, SimpleNamespace(vocab_size=3), pad_token_id=0)


def test_cache_check_names_a_model_that_returns_no_cache() -> None:
    class NoCache(_Recurrent):
        def forward(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
            return {**super().forward(*args, **kwargs), "past_key_values": None}

    with pytest.raises(AssertionError) as raised:
        checks.check_cache_equivalence(NoCache(), SimpleNamespace(vocab_size=11), pad_token_id=0)
    assert str(raised.value) == "NoCache returned no past_key_values with use_cache=True"


# From test_conformance_kit_rest_mutants.py: ``microformers_sdk.testing`` (the conformance kit): behaviour the
# seventh mutation pass found unasserted in the model builders, the input and label makers, the output comparison
# and the round-trip, dtype and cache checks (docs/reliability.md, workspace ``jtst``). The kit is what plugin
# authors run: its inputs must be reproducible, its labels must fit the head, and each check must fail, naming what
# broke, on a model broken in one precise way (and pass a correct one at its limits).


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
