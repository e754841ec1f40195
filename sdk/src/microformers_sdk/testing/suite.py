"""``ModelConformanceTests``: the conformance suite a model plugin runs against its own tiny config.

Subclass it in a test module (the class name must start with ``Test``)::

    from microformers_sdk.testing import ModelConformanceTests

    class TestMyArchConformance(ModelConformanceTests):
        config_class = MyArchConfig
        config_kwargs = {"vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 2, ...}
        model_classes = (MyArchModel, MyArchForCausalLM)
        padding_side = "left"   # decoders; encoders with absolute positions use "right"

Every test runs once per model class it applies to: save/load round trip, dtype casting,
batch-vs-single consistency, padding invariance, loss computed when labels are given, gradients
reaching every parameter, and (for classes whose ``forward`` takes ``past_key_values`` and
``use_cache``) cache-vs-no-cache equivalence. Tests that apply to none of the classes are removed
from the subclass rather than skipped. Override ``make_config``, ``make_inputs`` or ``make_labels``
where the defaults do not fit.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch

from . import checks

_APPLIES: dict[str, Callable[[type], bool]] = {
    "test_cache_equivalence": checks.supports_cache,
    "test_loss_with_labels": checks.accepts_labels,
}


class ModelConformanceTests:
    """Base class of a plugin's conformance tests; see the module docstring."""

    config_class: ClassVar[type | None] = None
    config_kwargs: ClassVar[dict[str, Any]] = {}
    model_classes: ClassVar[tuple[type, ...]] = ()
    padding_side: ClassVar[str] = "right"
    batch_size: ClassVar[int] = 3
    seq_length: ClassVar[int] = 7
    atol: ClassVar[float] = 1e-5
    cast_dtype: ClassVar[torch.dtype] = torch.bfloat16
    # How many machine epsilons of cast_dtype (relative to the output's scale) the cast model may be off.
    cast_eps_multiple: ClassVar[float] = 4.0
    # Regex patterns of parameter names allowed to receive no (or an all-zero) gradient.
    parameters_without_gradient: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for test_name, applies in _APPLIES.items():
            if cls.model_classes and not any(applies(model_class) for model_class in cls.model_classes):
                setattr(cls, test_name, None)  # not collected: nothing here to test

    # -- hooks a subclass may override ----------------------------------------------------------
    def make_config(self) -> Any:
        if self.config_class is None:
            raise TypeError(f"{type(self).__name__} must set config_class (or override make_config)")
        return self.config_class(**self.config_kwargs)

    def pad_token_id(self, config: Any) -> int:
        pad = getattr(config, "pad_token_id", None)
        return pad if isinstance(pad, int) else 0

    def make_inputs(self, config: Any) -> dict[str, torch.Tensor]:
        ids = checks.random_token_ids(config, self.batch_size, self.seq_length, avoid=self.pad_token_id(config))
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}

    def make_labels(self, model: Any, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return checks.default_labels(model, inputs) if checks.accepts_labels(type(model)) else {}

    def make_model(self, model_class: type, config: Any) -> Any:
        return checks.build_model(model_class, config)

    # -- parametrisation ------------------------------------------------------------------------
    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        if "model_class" not in metafunc.fixturenames:
            return
        applies = _APPLIES.get(metafunc.function.__name__, lambda _cls: True)
        classes = [model_class for model_class in self.model_classes if applies(model_class)]
        if not self.model_classes:
            raise TypeError(f"{type(self).__name__} must list its model_classes")
        metafunc.parametrize("model_class", classes, ids=[model_class.__name__ for model_class in classes])

    def _setup(self, model_class: type) -> tuple[Any, Any, dict[str, torch.Tensor]]:
        config = self.make_config()
        model = self.make_model(model_class, config)
        return config, model, self.make_inputs(model.config)

    # -- the tests ------------------------------------------------------------------------------
    def test_save_load_round_trip(self, model_class: type, tmp_path: Path) -> None:
        _, model, inputs = self._setup(model_class)
        checks.check_save_load_round_trip(model, inputs, tmp_path / "saved")

    def test_dtype_casting(self, model_class: type, tmp_path: Path) -> None:
        _, model, inputs = self._setup(model_class)
        checks.check_dtype_casting(
            model, inputs, tmp_path / "saved", dtype=self.cast_dtype, eps_multiple=self.cast_eps_multiple
        )

    def test_batch_matches_single(self, model_class: type) -> None:
        _, model, inputs = self._setup(model_class)
        checks.check_batch_consistency(model, inputs, atol=self.atol)

    def test_padding_invariance(self, model_class: type) -> None:
        _, model, _ = self._setup(model_class)
        checks.check_padding_invariance(
            model, model.config, padding_side=self.padding_side, pad_token_id=self.pad_token_id(model.config),
            atol=self.atol,
        )  # fmt: skip

    def test_cache_equivalence(self, model_class: type) -> None:
        _, model, _ = self._setup(model_class)
        checks.check_cache_equivalence(
            model, model.config, pad_token_id=self.pad_token_id(model.config), atol=self.atol
        )

    def test_loss_with_labels(self, model_class: type) -> None:
        _, model, inputs = self._setup(model_class)
        checks.check_loss(model, inputs, self.make_labels(model, inputs))

    def test_gradients_flow(self, model_class: type) -> None:
        _, model, inputs = self._setup(model_class)
        checks.check_gradients_flow(model, inputs, self.make_labels(model, inputs), self.parameters_without_gradient)
