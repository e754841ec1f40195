"""microformers-quant: int8, int4 and GGUF-kept-quantized weights with CPU kernels.

Importing this package is cheap; torch and the kernels load on first use.
"""

from __future__ import annotations

from microformers import lazy_exports

__version__ = "0.1.0"

_EXPORTS = {
    "Int8Config": "config",
    "Int4Config": "config",
    "GgufQuantConfig": "config",
    "GPTQConfig": "ecosystem_configs",
    "AwqConfig": "ecosystem_configs",
    "BitsAndBytesConfig": "ecosystem_configs",
    "QuantoConfig": "ecosystem_configs",
    "TorchAoConfig": "ecosystem_configs",
    "HqqConfig": "ecosystem_configs",
    "QuantLinear": "modules",
    "QuantEmbedding": "modules",
}
__all__ = ["__version__", *_EXPORTS]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
