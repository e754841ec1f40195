"""The reference's quantization config classes, by name: ``GPTQConfig``, ``AwqConfig``, ``BitsAndBytesConfig``,
``QuantoConfig``, ``TorchAoConfig``, ``HqqConfig``, and what each ``quant_method`` does here.

- ``gptq``, ``awq``: GPTQ and AutoAWQ GEMM checkpoints load: 4-bit layers kept packed in this plugin's int4
  format, 2/8-bit ones (and 4-bit ones the kernels cannot take) de-quantised to float (``microformers_quant.gptq``).
- ``bitsandbytes``: ``load_in_8bit=True`` quantizes a float checkpoint with this library's int8 (symmetric,
  per output channel; the LLM.int8 outlier split has no counterpart, which is logged); 4-bit NF4/FP4 and
  checkpoints saved by bitsandbytes are refused, naming ``Int4Config``.
- ``quanto``, ``torchao``, ``hqq``: refused with the reason (their kernels are GPU or library
  specific) and what loads instead.

Each config is the dict ``config.json`` stores, as a class (``to_dict``/``from_dict``), so it can be passed
as ``quantization_config=`` like the reference's.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, ClassVar

import attrs
import torch

from microformers.errors import CheckpointError, ConfigError

from .quantizers import Int8Quantizer

logger = logging.getLogger(__name__)


@attrs.define(kw_only=True)
class _ReferenceConfig:
    quant_method: ClassVar[str] = ""

    def to_dict(self) -> dict[str, Any]:
        data = {k: v for k, v in attrs.asdict(self, recurse=False).items() if v is not None}
        return {"quant_method": self.quant_method, **data}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Any:
        return cls(**{k: v for k, v in data.items() if k != "quant_method"})


@attrs.define(kw_only=True)
class GPTQConfig(_ReferenceConfig):
    """A GPTQ checkpoint's settings: ``bits`` (2, 4, 8), ``group_size`` (-1: one group per row), ``desc_act``,
    ``sym``, ``checkpoint_format`` ("gptq" or "gptq_v2"). 4-bit ones load kept packed as int4 (act-order or
    groups not a multiple of 32: de-quantised), 2/8-bit ones de-quantised; ``dataset``
    (quantizing a float model by calibration) is refused at load time."""

    quant_method: ClassVar[str] = "gptq"
    bits: int = 4
    group_size: int = 128
    desc_act: bool = False
    sym: bool = True
    checkpoint_format: str = "gptq"
    dataset: Any = None
    tokenizer: Any = None
    modules_to_not_convert: list[str] | None = None


@attrs.define(kw_only=True)
class AwqConfig(_ReferenceConfig):
    """An AutoAWQ checkpoint's settings (4 bits, ``group_size``, ``version="gemm"``); such checkpoints load
    kept packed as int4 (a group size not a multiple of 32: de-quantised)."""

    quant_method: ClassVar[str] = "awq"
    bits: int = 4
    group_size: int = 128
    zero_point: bool = True
    version: str = "gemm"
    backend: str = "autoawq"
    modules_to_not_convert: list[str] | None = None


@attrs.define(kw_only=True)
class BitsAndBytesConfig(_ReferenceConfig):
    quant_method: ClassVar[str] = "bitsandbytes"
    load_in_8bit: bool = False
    load_in_4bit: bool = False
    llm_int8_threshold: float = 6.0
    llm_int8_skip_modules: list[str] | None = None
    llm_int8_enable_fp32_cpu_offload: bool = False
    llm_int8_has_fp16_weight: bool = False
    bnb_4bit_compute_dtype: Any = None
    bnb_4bit_quant_type: str = "fp4"
    bnb_4bit_use_double_quant: bool = False
    bnb_4bit_quant_storage: Any = None

    def __attrs_post_init__(self) -> None:
        if self.load_in_8bit and self.load_in_4bit:
            raise ConfigError("BitsAndBytesConfig: load_in_8bit and load_in_4bit are exclusive; pick one")

    def to_dict(self) -> dict[str, Any]:
        data = super().to_dict()
        for key in ("bnb_4bit_compute_dtype", "bnb_4bit_quant_storage"):
            if isinstance(data.get(key), torch.dtype):
                data[key] = str(data[key]).removeprefix("torch.")
        return data


@attrs.define(kw_only=True)
class QuantoConfig(_ReferenceConfig):
    quant_method: ClassVar[str] = "quanto"
    weights: str = "int8"
    activations: str | None = None
    modules_to_not_convert: list[str] | None = None


@attrs.define(kw_only=True)
class TorchAoConfig(_ReferenceConfig):
    quant_method: ClassVar[str] = "torchao"
    quant_type: Any = None
    modules_to_not_convert: list[str] | None = None
    quant_type_kwargs: dict[str, Any] | None = None


@attrs.define(kw_only=True)
class HqqConfig(_ReferenceConfig):
    quant_method: ClassVar[str] = "hqq"
    nbits: int = 8
    group_size: int = 64
    view_as_float: bool = False
    axis: int | None = None
    dynamic_config: dict[str, Any] | None = None
    skip_modules: list[str] | None = None


WHAT_WORKS = (
    "On CPU, quantization_config=Int8Config() (int8 per channel) or Int4Config(group_size=32|64|128) (int4) "
    "quantizes a float checkpoint, a GGUF file loads with gguf_file=..., and GPTQ/AWQ checkpoints load de-quantised"
)

REFUSALS = {
    "quanto": "optimum-quanto's quantized layers are its own library's (not installed or supported here)",
    "torchao": "torchao's quantized tensor subclasses are its own library's (not supported here)",
    "hqq": "HQQ's half-quadratic quantized layers are its own library's (not supported here)",
}


class RefusedQuantizer:
    """A ``quant_method`` of the reference with no implementation here: building it raises the reason."""

    quant_method = ""

    def __init__(self, config: Mapping[str, Any]) -> None:
        method = str(config.get("quant_method"))
        raise ConfigError(f"quantization_config quant_method '{method}': {REFUSALS[method]}. {WHAT_WORKS}.")


class BitsAndBytesQuantizer(Int8Quantizer):
    """``BitsAndBytesConfig(load_in_8bit=True)`` as this library's int8; everything else refused with the reason."""

    BNB_KEYS = frozenset(attrs.fields_dict(BitsAndBytesConfig)) | {"quant_method", "_load_in_8bit", "_load_in_4bit"}

    def __init__(self, config: Mapping[str, Any]) -> None:
        unknown = sorted(set(config) - self.BNB_KEYS)
        if unknown:
            raise ConfigError(f"quantization_config for quant_method 'bitsandbytes' has unknown field(s) {unknown}")
        eight = bool(config.get("load_in_8bit", config.get("_load_in_8bit", False)))
        four = bool(config.get("load_in_4bit", config.get("_load_in_4bit", False)))
        if four:
            kind = config.get("bnb_4bit_quant_type", "fp4")
            raise ConfigError(
                f"BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type={kind!r}): the {kind.upper()} codebook "
                "has no kernel here. Use quantization_config=Int4Config(group_size=64) (affine int4 per 64 values, "
                "CPU kernels) instead"
            )
        if not eight:
            raise ConfigError("BitsAndBytesConfig needs load_in_8bit=True (load_in_4bit is not supported here)")
        for key, default in (("llm_int8_enable_fp32_cpu_offload", False), ("llm_int8_has_fp16_weight", False)):
            if config.get(key, default) != default:
                raise ConfigError(f"BitsAndBytesConfig.{key}={config[key]!r} is not supported; leave it at {default}")
        skip = config.get("llm_int8_skip_modules")
        super().__init__({"quant_method": "int8", **({"modules_to_not_convert": skip} if skip else {})})
        self.threshold = config.get("llm_int8_threshold", 6.0)

    @property
    def description(self) -> str:  # type: ignore[override]
        return "bitsandbytes load_in_8bit as microformers int8 (symmetric per output channel, CPU kernel)"

    def to_dict(self) -> dict[str, Any]:
        # what was built is an int8 model: a saved folder reloads as one
        return {"quant_method": "int8", **{k: v for k, v in self.config.items() if k != "quant_method"}}

    def open_source(self, fmt: Any, files: list[Any], dtype: torch.dtype) -> Mapping[str, Any]:
        source = fmt.load(files, dtype=dtype)
        saved = next((k for k in source if k.endswith((".SCB", ".weight_format")) or "quant_state" in k), None)
        if saved is not None:
            raise CheckpointError(
                f"{files[0]} was saved by bitsandbytes (it has '{saved}'); its int8/4-bit layout is not read here. "
                "Load the original float checkpoint with quantization_config=Int8Config() instead"
            )
        logger.warning(
            "BitsAndBytesConfig(load_in_8bit=True): quantizing with microformers int8; LLM.int8's outlier "
            "split (llm_int8_threshold=%s) has no counterpart: every column is int8",
            self.threshold,
        )
        return source
