"""The conformance kit: checks every model plugin runs against its own tiny config.

``ModelConformanceTests`` is the pytest suite to subclass (see :mod:`.suite`); the ``check_*``
functions in :mod:`.checks` are the same checks as plain functions. :func:`assert_close` and
:func:`assert_similar_generation` (:mod:`.numeric`) are the numeric policy every test suite uses. ``PluginConformanceTests``
(:mod:`.plugin_checks`) is what every distribution runs against its entry point. :mod:`.distributed` runs a
test's script on several processes (torchrun, accelerate) and says where a crashed rank was. Importing this package imports
pytest and torch, so only tests should import it.
"""

from __future__ import annotations

from .checks import (
    build_model,
    check_batch_consistency,
    check_cache_equivalence,
    check_dtype_casting,
    check_gradients_flow,
    check_loss,
    check_padding_invariance,
    check_save_load_round_trip,
    default_labels,
    main_outputs,
    pad_rows,
    random_token_ids,
    randomize_parameters,
)
from .fixtures import TEST_THREADS, needs_native_ops, one_thread
from .numeric import DEFAULT_TOLERANCES, assert_close, assert_similar_generation, tolerances
from .plugin_checks import PluginConformanceTests, check_plugin
from .suite import ModelConformanceTests

__all__ = [
    "DEFAULT_TOLERANCES",
    "TEST_THREADS",
    "ModelConformanceTests",
    "PluginConformanceTests",
    "assert_close",
    "assert_similar_generation",
    "build_model",
    "check_batch_consistency",
    "check_cache_equivalence",
    "check_dtype_casting",
    "check_gradients_flow",
    "check_loss",
    "check_padding_invariance",
    "check_plugin",
    "check_save_load_round_trip",
    "default_labels",
    "main_outputs",
    "needs_native_ops",
    "one_thread",
    "pad_rows",
    "random_token_ids",
    "randomize_parameters",
    "tolerances",
]
