"""Shared test settings of this plugin."""

from __future__ import annotations

import sys
from pathlib import Path

from microformers_sdk.testing import one_thread  # noqa: F401  (an autouse fixture, found by name)

sys.path.insert(0, str(Path(__file__).parent))  # tiny_whisper, the test tokenizer builder
