"""quant_method 'toy_sign': weight ~= sign(w) * mean|w| per output row, kept as int8 signs + a float scale."""

from __future__ import annotations

import torch
from torch import nn

from microformers_sdk.quantization import Quantizer


class SignLinear(nn.Module):
    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.register_buffer("signs", torch.empty(out_features, in_features, dtype=torch.int8, device="meta"))
        self.register_buffer("row_scale", torch.empty(out_features, 1, device="meta"))

    def quantize_weight(self, weight: torch.Tensor) -> dict[str, torch.Tensor]:
        w = weight.float()
        return {"signs": torch.sign(w).to(torch.int8), "row_scale": w.abs().mean(1, keepdim=True)}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.linear(x, self.signs.to(x.dtype) * self.row_scale.to(x.dtype))


class SignQuantizer(Quantizer):
    quant_method = "toy_sign"
    description = "toy: signs times a per-row mean magnitude"

    def quantized_linear(self, name: str, module: nn.Linear) -> nn.Module | None:
        return None if module.bias is not None else SignLinear(module.in_features, module.out_features)
