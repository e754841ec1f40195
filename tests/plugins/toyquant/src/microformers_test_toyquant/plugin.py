"""Entry point: registers quant_method 'toy_sign'."""

from __future__ import annotations

from typing import Any

from microformers import hookimpl

MICROFORMERS_API_VERSION = 1


@hookimpl
def register_quantizers(register: Any) -> None:
    register("toy_sign", "microformers_test_toyquant.quantizer:SignQuantizer")
