"""Entry point of microformers-quant: the ``int8``, ``int4``, ``gguf``, ``gptq``, ``awq`` and ``bitsandbytes`` (8-bit)
quantizers, the reference's other ``quant_method`` names (refused with the reason) and their config classes."""

from __future__ import annotations

from typing import Any

from microformers import hookimpl

MICROFORMERS_API_VERSION = 1

# the reference's config classes (microformers_quant.ecosystem_configs says what each does here)
ECOSYSTEM_CONFIGS = ("GPTQConfig", "AwqConfig", "BitsAndBytesConfig", "QuantoConfig", "TorchAoConfig", "HqqConfig")


@hookimpl
def register_quantizers(register: Any) -> None:
    register("int8", "microformers_quant.quantizers:Int8Quantizer")
    register("int4", "microformers_quant.quantizers:Int4Quantizer")
    register("gguf", "microformers_quant.gguf:GgufQuantizer")
    register("gptq", "microformers_quant.gptq:GptqQuantizer")
    register("awq", "microformers_quant.gptq:AwqQuantizer")
    register("bitsandbytes", "microformers_quant.ecosystem_configs:BitsAndBytesQuantizer")
    for refused in ("quanto", "torchao", "hqq"):
        register(refused, "microformers_quant.ecosystem_configs:RefusedQuantizer")


@hookimpl
def register_exports(register: Any) -> None:
    for name in ("Int8Config", "Int4Config", "GgufQuantConfig"):
        register(name, f"microformers_quant.config:{name}")
    for name in ECOSYSTEM_CONFIGS:
        register(name, f"microformers_quant.ecosystem_configs:{name}")


@hookimpl
def register_environment_reports(register: Any) -> None:
    register("quantized kernels", "microformers_quant.kernels:environment_report")
