"""Shared test settings of this plugin."""

from __future__ import annotations

from microformers_sdk.testing import one_thread  # noqa: F401  (an autouse fixture, found by name)
