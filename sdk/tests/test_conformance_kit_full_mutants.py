"""``microformers_sdk.testing`` (the conformance kit): behaviour the full mutation run of ``checks.py``,
``suite.py`` and ``plugin_checks.py`` found unasserted (docs/reliability.md, workspace ``htst``).

The kit is what plugin authors run, so most tests here hand a check a model or plugin that is broken in
one precise way and expect the check to fail, naming what broke."""

from __future__ import annotations

import importlib.metadata
import re
import types
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest
import torch
from torch import nn

import microformers
from microformers import PretrainedConfig, PreTrainedModel
from microformers_sdk.outputs import CausalLMOutputWithPast
from microformers_sdk.testing import ModelConformanceTests, PluginConformanceTests, checks, plugin_checks


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
