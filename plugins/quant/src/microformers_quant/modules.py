"""Quantized layers: ``QuantLinear``, ``QuantEmbedding`` and ``TiedQuantHead`` (an LM head reading a quantized embedding).

Integer weights and scales are persistent buffers (``qweight``, ``scales`` and, for 4 bits, ``mins``),
so ``state_dict``/``save_pretrained`` write them and loading fills them by name. Activations stay
float32: inputs of another dtype are cast in and the output cast back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from microformers.errors import ConfigError, MicroformersError

from . import kernels

# With ``activations="int16"`` or ``"int8"``, inputs of at most this many rows (batch-1 decoding)
# quantize their activations; larger ones use float activations, as every input does otherwise (the
# C++ kernels pick row kernels or de-quantised tiles + a float GEMM by ``kernels.GEMM_MIN_ROWS``).
# One row: the integer kernels unpack each weight block once per input row, while the float row
# kernels convert it once for up to 8 rows, so batch-8 decoding was slower with int16 activations
# (110.6 against 130.9 tok/s, gguf, bench/quant.py --scenario batch8, 2 threads).
KERNEL_MAX_ROWS = 1
# quantization_config.activations -> bits the kernels quantize decoding inputs to (32: float)
ACTIVATION_BITS = {"float32": 32, "int16": 16, "int8": 8}


class QuantizedDtypeError(MicroformersError, ValueError):
    """A quantized model was asked to change its dtype."""


def _meta(*shape: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device="meta")


class _QuantWeight(nn.Module):
    """The integer weight ``[rows, cols]`` with its scales, and how to (de)quantize it."""

    def __init__(self, rows: int, cols: int, bits: int, group: int, name: str = "") -> None:
        super().__init__()
        if bits not in (4, 8):
            raise ConfigError(f"{name or 'layer'}: {bits}-bit weights are not supported (use 4 or 8)")
        if group <= 0 or group % 32 or cols % group:
            raise ConfigError(
                f"{name or 'layer'}: group size {group} must be a multiple of 32 that divides the input size {cols}; "
                "choose another group_size (32, 64 or 128) or list the layer in modules_to_not_convert"
            )
        self.rows, self.cols, self.bits, self.group = rows, cols, bits, group
        self.activation_bits = 32  # set by the quantizer from quantization_config.activations
        # buffers in the 8-row interleaved layout of the integer-activation kernels (see interleave());
        # state_dict and everything that reads rows see the plain layout
        self.interleaved = False
        groups = cols // group
        if bits == 4:
            self.register_buffer("qweight", _meta(rows, cols // 2, dtype=torch.uint8))
            self.register_buffer("scales", _meta(rows, groups, dtype=torch.float16))
            self.register_buffer("mins", _meta(rows, groups, dtype=torch.float16))
        else:
            self.register_buffer("qweight", _meta(rows, cols, dtype=torch.int8))
            self.register_buffer("scales", _meta(rows, groups, dtype=torch.float32))

    def quantize_weight(self, weight: torch.Tensor, chunk: int = 256) -> dict[str, torch.Tensor]:
        """Buffers for the float ``weight``: int8 symmetric (round(w / s), s = max|w| / 127) or
        int4 asymmetric (q = round((w - min) / s) in 0..15, s = (max - min) / 15), per group.

        Rows are done ``chunk`` at a time so the float temporaries stay small."""
        parts = [self._quantize_rows(weight[i : i + chunk]) for i in range(0, self.rows, chunk)]
        return {name: torch.cat([p[name] for p in parts]) if len(parts) > 1 else parts[0][name] for name in parts[0]}

    def _quantize_rows(self, weight: torch.Tensor) -> dict[str, torch.Tensor]:
        rows = weight.shape[0]
        w = weight.detach().to(torch.float32).reshape(rows, self.cols // self.group, self.group)
        if self.bits == 8:
            scales = w.abs().amax(-1) / 127.0
            q = torch.round(w / scales.clamp_min(1e-12).unsqueeze(-1)).clamp_(-127, 127).to(torch.int8)
            return {"qweight": q.view(rows, self.cols), "scales": scales.contiguous()}
        low, high = w.amin(-1), w.amax(-1)
        scales = ((high - low) / 15.0).to(torch.float16)
        mins = low.to(torch.float16)
        s = scales.float().clamp_min(1e-12).unsqueeze(-1)
        q = torch.round((w - mins.float().unsqueeze(-1)) / s).clamp_(0, 15).to(torch.uint8)
        q = q.view(rows, -1, 2, 16)  # ggml order: value j low nibble, value j + 16 high nibble
        packed = q[:, :, 0, :] | (q[:, :, 1, :] << 4)
        return {"qweight": packed.reshape(rows, self.cols // 2).contiguous(), "scales": scales, "mins": mins}

    def _parts(self) -> list[torch.Tensor]:
        buffers = self._buffers
        return [buffers["qweight"], buffers["scales"], *([buffers["mins"]] if self.bits == 4 else [])]

    def plain_buffers(self) -> dict[str, torch.Tensor]:
        """``qweight``, ``scales`` (and ``mins``) in the plain row-major layout, whatever the layout held."""
        parts = self._parts()
        if self.interleaved:
            parts = kernels.plain_rows(*parts)
        return dict(zip(("qweight", "scales", "mins"), parts, strict=False))

    def interleave(self) -> bool:
        """Put the buffers in the 8-row layout of the integer-activation kernels (``activation_bits`` 8 or 16, a
        multiple of 8 rows, the kernels built, on the CPU); True if they are (now) in it. Every input is then
        quantized, prefill included, not only one-row inputs (``KERNEL_MAX_ROWS``)."""
        if self.interleaved:
            return True
        qweight = self._buffers["qweight"]
        if (
            self.activation_bits == 32
            or self.rows % 8
            or qweight.device.type != "cpu"
            or not kernels.native_available()
        ):
            return False
        for name, tensor in zip(("qweight", "scales", "mins"), kernels.interleave_rows(*self._parts()), strict=False):
            self._buffers[name] = tensor
        self.interleaved = True
        return True

    def _save_to_state_dict(self, destination: dict[str, Any], prefix: str, keep_vars: bool) -> None:
        super()._save_to_state_dict(destination, prefix, keep_vars)
        if self.interleaved:
            for name, tensor in self.plain_buffers().items():
                destination[prefix + name] = tensor

    def _load_from_state_dict(self, state_dict: Any, prefix: str, *args: Any) -> None:
        # what loads is in the plain layout: back to it first, so that a partial load keeps the rest readable
        if self.interleaved:
            self._buffers.update(self.plain_buffers())
            self.interleaved = False
        super()._load_from_state_dict(state_dict, prefix, *args)

    def dequantize(self) -> torch.Tensor:
        parts = self.plain_buffers()
        if self.bits == 4:
            return kernels.dequantize_q4(parts["qweight"], parts["scales"], parts["mins"], self.group)
        return kernels.dequantize_q8(parts["qweight"], parts["scales"], self.group)

    def matmul(self, x: torch.Tensor) -> torch.Tensor:
        """``x @ W.T`` for float32 2-D ``x``."""
        if x.requires_grad and torch.is_grad_enabled():
            # training through a frozen quantized layer (LoRA): the kernels have no backward, so the
            # product runs on the de-quantised weight and gradients reach the input
            return torch.nn.functional.linear(x, self.dequantize())
        buffers = self._buffers  # not through Module.__getattr__: this runs ~200 times per decoded token
        if self.interleaved:
            mins = [buffers["mins"]] if self.bits == 4 else None
            return kernels.linear_x8(
                x, self.bits, [buffers["qweight"]], [buffers["scales"]], mins, self.group, self.activation_bits
            )[0]
        act_bits = self.activation_bits if x.shape[0] <= KERNEL_MAX_ROWS else 32
        if self.bits == 4:
            return kernels.q4_linear(x, buffers["qweight"], buffers["scales"], buffers["mins"], self.group, act_bits)
        return kernels.q8_linear(x, buffers["qweight"], buffers["scales"], self.group, act_bits)

    def _apply(self, fn: Any, recurse: bool = True) -> Any:
        probe = fn(torch.zeros(1))
        if probe.dtype != torch.float32:
            raise QuantizedDtypeError(
                f"cannot cast a quantized model to {probe.dtype}: its weights are {self.bits}-bit integers with "
                "fixed scales. Load the model again with dtype=... instead (non-quantized parts then use it)."
            )
        return super()._apply(fn, recurse)


class QuantLinear(_QuantWeight):
    """A linear layer with quantized weight; ``bias`` stays float."""

    def __init__(self, in_features: int, out_features: int, bias: bool, bits: int, group: int, name: str = "") -> None:
        super().__init__(out_features, in_features, bits, group, name)
        self.in_features, self.out_features = in_features, out_features
        self.bias = nn.Parameter(torch.empty(out_features, device="meta")) if bias else None

    @classmethod
    def like(cls, linear: nn.Linear, bits: int, group: int | None = None, name: str = "") -> QuantLinear:
        group = linear.in_features if group is None else group
        return cls(linear.in_features, linear.out_features, linear.bias is not None, bits, group, name)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features)
        dtype = x.dtype
        if dtype != torch.float32:
            flat = flat.float()
        out = self.matmul(flat if flat.is_contiguous() else flat.contiguous())
        bias = self._parameters.get("bias")
        if bias is not None:
            out = out + bias.to(out.dtype)
        out = out.view(*x.shape[:-1], self.out_features)
        return out if dtype == torch.float32 else out.to(dtype)

    @staticmethod
    def linear_group(modules: Sequence[nn.Module], x: torch.Tensor) -> tuple[torch.Tensor, ...] | None:
        """``tuple(m(x) for m in modules)`` in one kernel call (the SDK's ``apply_linears``: q/k/v,
        gate/up), or None where the layers cannot share one (other types, hooks, bits, group, activations)."""
        first = modules[0]
        if (
            not isinstance(first, QuantLinear)
            or x.dtype != torch.float32
            or (x.requires_grad and torch.is_grad_enabled())
        ):
            return None
        shared = (first.bits, first.group, first.activation_bits, first.in_features, first.interleaved)
        for module in modules:
            if (
                type(module) is not QuantLinear
                or module._forward_hooks
                or module._forward_pre_hooks
                or (module.bits, module.group, module.activation_bits, module.in_features, module.interleaved) != shared
            ):
                return None
        flat = x.reshape(-1, first.in_features)
        flat = flat if flat.is_contiguous() else flat.contiguous()
        buffers = [module._buffers for module in modules]
        qweights, scales = [b["qweight"] for b in buffers], [b["scales"] for b in buffers]
        mins = [b["mins"] for b in buffers] if first.bits == 4 else None
        if first.interleaved:
            outs = kernels.linear_x8(flat, first.bits, qweights, scales, mins, first.group, first.activation_bits)
        else:
            act_bits = first.activation_bits if flat.shape[0] <= KERNEL_MAX_ROWS else 32
            outs = kernels.linear_many(flat, first.bits, qweights, scales, mins, first.group, act_bits)
        results = []
        for module, out in zip(modules, outs, strict=True):
            bias = module._parameters.get("bias")
            results.append((out if bias is None else out + bias).view(*x.shape[:-1], module.out_features))
        return tuple(results)

    @staticmethod
    def native_decoder_step(layers: Sequence[Any], shape: Any, final_norm: Any = None, lm_head: Any = None) -> Any:
        """The SDK's ``native_decoder_step`` protocol: every layer of a Llama-style decoder (and the final
        norm and head, when given) in one native call (``decoder_step.QuantDecoderStep``), or None where
        they cannot run that way."""
        from .decoder_step import QuantDecoderStep

        return QuantDecoderStep.build(layers, shape, final_norm, lm_head)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bits={self.bits}, group={self.group}"


class QuantEmbedding(_QuantWeight):
    """An embedding table stored quantized; looked-up rows are de-quantised to ``dtype``."""

    def __init__(
        self, num_embeddings: int, embedding_dim: int, padding_idx: int | None, bits: int, group: int, name: str = ""
    ) -> None:
        super().__init__(num_embeddings, embedding_dim, bits, group, name)
        self.num_embeddings, self.embedding_dim, self.padding_idx = num_embeddings, embedding_dim, padding_idx
        self.output_dtype = torch.float32

    @classmethod
    def like(cls, embedding: nn.Embedding, bits: int, group: int | None = None, name: str = "") -> QuantEmbedding:
        dim = embedding.embedding_dim
        group = dim if group is None else group
        return cls(embedding.num_embeddings, dim, embedding.padding_idx, bits, group, name)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        flat = input_ids.reshape(-1)
        parts = [self._rows_of(t, flat) for t in self._parts()]
        if self.bits == 4:
            rows = kernels.dequantize_q4(*parts, self.group)
        else:
            rows = kernels.dequantize_q8(*parts, self.group)
        return rows.view(*input_ids.shape, self.embedding_dim).to(self.output_dtype)

    def _rows_of(self, tensor: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """Rows ``ids`` of one buffer in the plain layout (gathered from the interleaved one without unpacking it)."""
        if not self.interleaved:
            return tensor.index_select(0, ids)
        # qweight [N/8, chunks, 8, 4] bytes, scales/mins [N/8, G, 8]
        is_qweight = tensor.dtype in (torch.uint8, torch.int8)
        grouped = tensor.view(self.rows // 8, -1, 8, 4) if is_qweight else tensor.view(self.rows // 8, -1, 8)
        if ids.numel() == 1:  # decoding: plain indexing costs a fraction of advanced indexing
            row = int(ids)
            return grouped[row // 8, :, row % 8].reshape(1, tensor.shape[1])
        return grouped[ids // 8, :, ids % 8].reshape(ids.numel(), tensor.shape[1])

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, bits={self.bits}, group={self.group}"


class TiedQuantHead(nn.Module):
    """An LM head tied to a ``QuantEmbedding``: it multiplies by the embedding's quantized table (no tensors of its own)."""

    def __init__(self, embedding: QuantEmbedding, bias: nn.Parameter | None = None) -> None:
        super().__init__()
        self._embedding = [embedding]  # a list: not a submodule, so its tensors are saved once
        self.in_features, self.out_features = embedding.embedding_dim, embedding.num_embeddings
        self.bias = bias

    @property
    def embedding(self) -> QuantEmbedding:
        return self._embedding[0]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features)
        if flat.dtype != torch.float32:
            flat = flat.float()
        out = self.embedding.matmul(flat.contiguous())
        if self.bias is not None:
            out = out + self.bias.to(out.dtype)
        return out.view(*x.shape[:-1], self.out_features).to(x.dtype)

    def extra_repr(self) -> str:
        return f"tied to the quantized embedding ({self.embedding.bits}-bit)"
