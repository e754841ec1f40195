"""Entry point of microformers-quant: the ``int8``, ``int4`` and ``gguf`` quantizers and their config classes."""

from __future__ import annotations

from typing import Any

from microformers import hookimpl

MICROFORMERS_API_VERSION = 1


@hookimpl
def register_quantizers(register: Any) -> None:
    register("int8", "microformers_quant.quantizers:Int8Quantizer")
    register("int4", "microformers_quant.quantizers:Int4Quantizer")
    register("gguf", "microformers_quant.gguf:GgufQuantizer")


@hookimpl
def register_exports(register: Any) -> None:
    for name in ("Int8Config", "Int4Config", "GgufQuantConfig"):
        register(name, f"microformers_quant.config:{name}")


@hookimpl
def register_environment_reports(register: Any) -> None:
    register("quantized kernels", "microformers_quant.kernels:environment_report")
