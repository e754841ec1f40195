"""The ``quantization_config`` values users build: ``Int8Config()``, ``Int4Config(group_size=32)``, ``GgufQuantConfig()``.

Each is the dict ``config.json`` stores, as a class: ``to_dict()`` gives it, ``from_dict`` reads it back.
"""

from __future__ import annotations

from typing import Any, ClassVar

import attrs


def _names(value: Any) -> list[str] | None:
    return None if value is None else list(value)


@attrs.define(kw_only=True)
class _QuantConfig:
    quant_method: ClassVar[str] = ""
    modules_to_not_convert: list[str] | None = attrs.field(default=None, converter=_names)
    # "float32", "int16" or "int8" (default: "float32", "int16" for GgufQuantConfig): quantize activations
    # per 32 values too and use integer dot products (int8 is llama.cpp's approach; int16 keeps the logits
    # close to float32's). Layers with a multiple of 8 outputs quantize every input (prefill too); the rest
    # one-row inputs only. The speed and drift of each are in docs/quantization.md.
    activations: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data = attrs.asdict(self)
        return {"quant_method": self.quant_method, **{k: v for k, v in data.items() if v is not None}}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> _QuantConfig:
        return cls(**{k: v for k, v in data.items() if k != "quant_method"})


@attrs.define(kw_only=True)
class Int8Config(_QuantConfig):
    """int8 weights, symmetric, one scale per output channel; activations stay float32.

    The (tied) embedding and LM head are int8 too unless named in ``modules_to_not_convert``
    (e.g. ``["lm_head"]``).
    """

    quant_method: ClassVar[str] = "int8"


@attrs.define(kw_only=True)
class Int4Config(_QuantConfig):
    """int4 weights, asymmetric (a float16 scale and minimum per ``group_size`` inputs); activations float32.

    ``group_size`` is a multiple of 32 dividing every quantized layer's input size (32, 64, 128).
    The (tied) embedding and LM head are int8 per output channel (4 bits there cost the most accuracy).
    """

    quant_method: ClassVar[str] = "int4"
    group_size: int = 32


@attrs.define(kw_only=True)
class GgufQuantConfig(_QuantConfig):
    """Keep a GGUF file's quantized blocks: Q4_0/Q4_1 as group-32 int4, Q8_0 as group-32 int8 (exact).

    Other block types (Q5_x, K-quants) are de-quantised and re-quantised to group-32 int8
    (see docs/quantization.md); float tensors stay float. Activations are int16 unless
    ``activations`` says otherwise: integer dot products as llama.cpp's, the logits within about
    0.05 of float activations' (``activations="float32"``: within 1e-3, slower).
    """

    quant_method: ClassVar[str] = "gguf"
