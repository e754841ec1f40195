"""The plugin conformance kit checks generation strategies (issue 41 item 3): a strategy registered as a class
whose instances have no ``__call__`` passed the kit and failed only inside ``generate()``."""

from __future__ import annotations

from typing import Any

import pytest

from microformers.plugins import PluginInfo, Registration
from microformers_sdk.testing import plugin_checks


class CallableStrategy:
    def __call__(self, model: Any, inputs: Any, **kwargs: Any) -> str:
        return "ok"


class NoCall:
    def applies(self, config: Any) -> bool:
        return True


class NeedsArguments(CallableStrategy):
    def __init__(self, required: int) -> None:
        self.required = required


def _plugin(monkeypatch: pytest.MonkeyPatch, **strategies: Any) -> None:
    registrations = [Registration("generation_strategies", name, obj, "fake") for name, obj in strategies.items()]
    registrations.append(Registration("pipelines", "not-a-strategy", object(), "fake"))  # other kinds are not asked
    info = PluginInfo("fake", "fake_plugin", None, None, registrations=registrations)
    monkeypatch.setattr(plugin_checks, "discovered", lambda name: info)


def test_callable_strategies_and_classes_pass_the_kit(monkeypatch: pytest.MonkeyPatch) -> None:
    _plugin(monkeypatch, instance=CallableStrategy(), cls=CallableStrategy, function=lambda *args, **kwargs: None)
    plugin_checks.check_generation_strategies("fake")


@pytest.mark.parametrize(
    ("registered", "message"),
    [
        (NoCall, r"'broken' is a NoCall object, which has no __call__"),
        (NoCall(), r"'broken' is a NoCall object, which has no __call__"),
        (NeedsArguments, r"'broken' is registered as the class NeedsArguments, which cannot be made without"),
    ],
    ids=["class-without-call", "instance-without-call", "class-needing-arguments"],
)
def test_a_strategy_generate_could_not_call_fails_the_kit_by_name(
    monkeypatch: pytest.MonkeyPatch, registered: Any, message: str
) -> None:
    _plugin(monkeypatch, good=CallableStrategy, broken=registered)
    with pytest.raises(AssertionError, match=rf"plugin 'fake': generation strategy {message}"):
        plugin_checks.check_generation_strategies("fake")


def test_the_kits_test_class_runs_the_strategy_check() -> None:
    assert "test_generation_strategies_are_callable" in vars(plugin_checks.PluginConformanceTests)
