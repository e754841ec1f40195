"""Rotary position embeddings (RoPE) and the frequency-scaling schemes found in real ``config.json`` files.

:func:`~microformers_sdk.rope_settings.normalize_rope_settings` reads the config spelling (see
:mod:`microformers_sdk.rope_settings`); :func:`compute_inv_freq` gives the inverse frequencies for it;
:class:`RotaryEmbedding` turns position ids into the ``cos``/``sin`` tables a model computes once per
forward pass and hands to every layer.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from microformers.errors import ConfigError

from . import native
from .rope_settings import (
    SUPPORTED_ROPE_TYPES,
    RopeSettings,
    normalize_rope_settings,
    rope_settings_from_config,
)

__all__ = [
    "SUPPORTED_ROPE_TYPES",
    "RopeSettings",
    "RotaryEmbedding",
    "apply_rotary",
    "apply_rotary_pos_emb",
    "compute_inv_freq",
    "normalize_rope_settings",
    "rope_settings_from_config",
    "rotate",
    "rotate_half",
]


def _default_inv_freq(theta: float | torch.Tensor, dim: int) -> torch.Tensor:
    exponents = torch.arange(0, dim, 2, dtype=torch.int64, device="cpu").to(torch.float32) / dim
    return 1.0 / (theta**exponents)


def _yarn_inv_freq(settings: RopeSettings) -> tuple[torch.Tensor, float]:
    dim, base, factor = settings.dim, settings.theta, settings.factor
    assert factor is not None and settings.original_max_position_embeddings is not None

    def mscale_of(scale: float, mscale: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0

    attention_factor = settings.attention_factor
    if attention_factor is None:
        if settings.mscale and settings.mscale_all_dim:
            attention_factor = mscale_of(factor, settings.mscale) / mscale_of(factor, settings.mscale_all_dim)
        else:
            attention_factor = mscale_of(factor)

    def correction_dim(rotations: float) -> float:
        # The dimension index whose wavelength completes ``rotations`` turns over the original context.
        original = settings.original_max_position_embeddings
        return (dim * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low = correction_dim(settings.beta_fast or 32)
    high = correction_dim(settings.beta_slow or 1)
    if settings.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(dim // 2, dtype=torch.float32, device="cpu") - low) / (high - low)).clamp(0, 1)
    extrapolated = _default_inv_freq(base, dim)
    interpolated = extrapolated / factor
    # ramp 0 (high-frequency dims) keeps the original frequency, ramp 1 interpolates fully.
    inv_freq = interpolated * ramp + extrapolated * (1 - ramp)
    return inv_freq, float(attention_factor)


def _llama3_inv_freq(settings: RopeSettings) -> torch.Tensor:
    inv_freq = _default_inv_freq(settings.theta, settings.dim)
    factor = settings.factor
    low_freq_factor, high_freq_factor = settings.low_freq_factor, settings.high_freq_factor
    original = settings.original_max_position_embeddings
    assert factor is not None and low_freq_factor is not None and high_freq_factor is not None and original
    wavelength = 2 * math.pi / inv_freq
    low_freq_wavelength = original / low_freq_factor
    high_freq_wavelength = original / high_freq_factor
    scaled = torch.where(wavelength > low_freq_wavelength, inv_freq / factor, inv_freq)
    smooth = (original / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = (wavelength >= high_freq_wavelength) & (wavelength <= low_freq_wavelength)
    return torch.where(is_medium, smoothed, scaled)


def _longrope_inv_freq(settings: RopeSettings, seq_len: int | None) -> torch.Tensor:
    assert settings.short_factor is not None and settings.long_factor is not None
    assert settings.original_max_position_embeddings is not None
    long = seq_len is not None and seq_len > settings.original_max_position_embeddings
    divisors = torch.tensor(settings.long_factor if long else settings.short_factor, dtype=torch.float32)
    exponents = torch.arange(0, settings.dim, 2, dtype=torch.int64, device="cpu").to(torch.float32) / settings.dim
    return 1.0 / (divisors * settings.theta**exponents)


def compute_inv_freq(settings: RopeSettings, seq_len: int | None = None) -> tuple[torch.Tensor, float]:
    """Inverse frequencies (float32, CPU, ``dim // 2`` values) and the factor cos/sin are scaled by.

    ``seq_len`` matters for ``dynamic`` scaling, whose base grows once a sequence is longer than
    ``max_position_embeddings``, and for ``longrope``, whose long factors apply once it is longer
    than ``original_max_position_embeddings`` (the short ones otherwise, and when ``None``).
    """
    rope_type = settings.rope_type
    if rope_type == "default":
        return _default_inv_freq(settings.theta, settings.dim), 1.0
    if rope_type == "linear":
        assert settings.factor is not None
        return _default_inv_freq(settings.theta, settings.dim) / settings.factor, 1.0
    if rope_type == "dynamic":
        assert settings.factor is not None
        max_positions = settings.max_position_embeddings
        seq_len = max(seq_len or max_positions, max_positions)
        dim, factor = settings.dim, settings.factor
        growth = torch.tensor((factor * seq_len / max_positions) - (factor - 1), dtype=torch.float32)
        base = settings.theta * growth ** (dim / (dim - 2))
        return _default_inv_freq(base, dim), 1.0
    if rope_type == "yarn":
        return _yarn_inv_freq(settings)
    if rope_type == "llama3":
        return _llama3_inv_freq(settings), 1.0
    if rope_type == "longrope":
        assert settings.attention_factor is not None
        return _longrope_inv_freq(settings, seq_len), float(settings.attention_factor)
    raise ConfigError(f"rope_type={rope_type!r} is not supported; use one of {list(SUPPORTED_ROPE_TYPES)}")


class RotaryEmbedding(nn.Module):
    """Position ids -> ``(cos, sin)`` of shape ``(batch, seq_len, dim)``, computed once per forward.

    The frequencies are kept in float32 on the side (not as a buffer), so casting the model to
    bfloat16 or loading it on the meta device leaves them exact; they follow the device of the
    position ids.
    """

    def __init__(self, settings: RopeSettings) -> None:
        super().__init__()
        self.settings = settings
        inv_freq, self.attention_scaling = compute_inv_freq(settings)
        self._inv_freq: dict[torch.device, torch.Tensor] = {inv_freq.device: inv_freq}
        self._longrope: dict[tuple[torch.device, bool], torch.Tensor] = {}

    @property
    def inv_freq(self) -> torch.Tensor:
        return self._inv_freq[torch.device("cpu")]

    def _frequencies(self, position_ids: torch.Tensor) -> tuple[torch.Tensor, float]:
        if self.settings.rope_type == "longrope":
            # One set for the whole call, chosen by its longest position (as the reference does).
            long = int(position_ids.max()) + 1 > self.settings.original_max_position_embeddings
            key = (position_ids.device, long)
            inv_freq = self._longrope.get(key)
            if inv_freq is None:
                seq_len = self.settings.original_max_position_embeddings + 1 if long else None
                inv_freq = self._longrope[key] = compute_inv_freq(self.settings, seq_len)[0].to(position_ids.device)
            return inv_freq, self.attention_scaling
        if self.settings.rope_type == "dynamic":
            seq_len = int(position_ids.max()) + 1
            if seq_len > self.settings.max_position_embeddings:
                inv_freq, scaling = compute_inv_freq(self.settings, seq_len)
                return inv_freq.to(position_ids.device), scaling
        inv_freq = self._inv_freq.get(position_ids.device)
        if inv_freq is None:
            inv_freq = self._inv_freq[position_ids.device] = self.inv_freq.to(position_ids.device)
        return inv_freq, self.attention_scaling

    @torch.no_grad()
    def forward(
        self, position_ids: torch.Tensor, dtype: torch.dtype = torch.float32
    ) -> tuple[torch.Tensor, torch.Tensor]:
        inv_freq, scaling = self._frequencies(position_ids)
        freqs = position_ids[..., None].to(torch.float32) * inv_freq
        angles = torch.cat((freqs, freqs), dim=-1)
        cos, sin = angles.cos(), angles.sin()
        if scaling != 1.0:
            cos, sin = cos * scaling, sin * scaling
        return cos.to(dtype), sin.to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``[x1, x2] -> [-x2, x1]`` over the last dimension (the "half-split" RoPE layout)."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """``x * cos + rotate_half(x) * sin`` for ``x`` ``(..., dim)`` and ``cos``/``sin`` broadcastable to it.

    Without gradients it is the same arithmetic with fewer, smaller temporaries (the formula makes a
    negation, a concatenation, two products and a sum): on the CPU in float32 the SDK's one-pass op
    (:func:`~microformers_sdk.native.rotate_half_split`, where the native ops are built), elsewhere one product,
    then each half's product added in place.
    """
    differentiable = torch.is_grad_enabled() and (x.requires_grad or cos.requires_grad or sin.requires_grad)
    if differentiable or torch.jit.is_tracing():  # (a trace records one graph, with or without gradients)
        return x * cos + rotate_half(x) * sin
    if native.eager_cpu_inference(x):
        rotated = native.rotate_half_split(x, cos, sin)
        if rotated is not None:
            return rotated
    half = x.shape[-1] // 2
    out = x * cos
    # Products first, then one rounding per sum, so the result is the formula's to the bit (no fused multiply-add).
    out[..., :half].sub_(x[..., half:] * sin[..., :half])
    out[..., half:].add_(x[..., :half] * sin[..., half:])
    return out


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, unsqueeze_dim: int = 1) -> torch.Tensor:
    """Rotate one of :func:`apply_rotary_pos_emb`'s tensors (``x`` ``(batch, heads, seq, head_dim)``)."""
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    rotary_dim = cos.shape[-1]
    if rotary_dim < x.shape[-1]:
        return torch.cat((rotate(x[..., :rotary_dim], cos, sin), x[..., rotary_dim:]), dim=-1)
    return rotate(x, cos, sin)


def apply_rotary_pos_emb(
    query: torch.Tensor, key: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, unsqueeze_dim: int = 1
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate ``query``/``key`` ``(batch, heads, seq, head_dim)`` by ``cos``/``sin`` ``(batch, seq, dim)``.

    When ``dim < head_dim`` (partial rotary) only the first ``dim`` channels are rotated.
    """
    return apply_rotary(query, cos, sin, unsqueeze_dim), apply_rotary(key, cos, sin, unsqueeze_dim)
