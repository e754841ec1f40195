"""Test-only plugins (tests/plugins/*) are installed into .test-plugins/, never into the user's environment.

pytest puts that folder on sys.path (pyproject ``pythonpath``); this makes the subprocesses that
tests start see it too.
"""

from __future__ import annotations

import os
from pathlib import Path

TEST_PLUGINS = Path(__file__).parent / ".test-plugins"
if not TEST_PLUGINS.is_dir():
    raise RuntimeError(f"{TEST_PLUGINS} is missing: run `scripts/install.sh --test` (or `make install-test`) first")
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TEST_PLUGINS), os.environ.get("PYTHONPATH")]))
