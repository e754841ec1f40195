"""GPTQ and AutoAWQ GEMM folders written from a float checkpoint by round-to-nearest quantization, in their
published packings: what the GPTQ/AWQ tests load, and what ``bench/quant.py`` builds its ``gptq``/``awq`` rows from.

No calibration (a real GPTQ run picks other integers); the packing, zero points and scales are the formats'.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def pack_words(values: np.ndarray, bits: int, axis: int) -> np.ndarray:
    """The published GPTQ packing: ``32 / bits`` unsigned fields per int32 along ``axis``, lowest bits first."""
    per = 32 // bits
    moved = np.moveaxis(values.astype(np.uint32), axis, 0)
    moved = moved.reshape(moved.shape[0] // per, per, *moved.shape[1:])
    words = np.zeros(moved.shape[:1] + moved.shape[2:], dtype=np.uint32)
    for i in range(per):
        words |= moved[:, i] << np.uint32(bits * i)
    return np.ascontiguousarray(np.moveaxis(words.view(np.int32), 0, axis))


def gptq_quantize(
    weight: torch.Tensor, bits: int, group: int, fmt: str, rng: np.random.Generator, shuffle_groups: bool = False
) -> tuple[dict[str, torch.Tensor], torch.Tensor, np.ndarray, np.ndarray]:
    """Round-to-nearest asymmetric quantization of ``weight`` (N x K): GPTQ's tensors, the exact de-quantised
    weight they stand for (computed here from the integers), and the integers ``q`` (K x N) and zero points."""
    w = weight.double().numpy().T  # (K, N), GPTQ's orientation
    k, n = w.shape
    size = k if group == -1 else group
    g_idx = np.arange(k) // size
    if shuffle_groups:  # act-order: any input may belong to any group
        g_idx = rng.permutation(g_idx)
    groups = g_idx.max() + 1
    maxq = (1 << bits) - 1
    scales, zeros = np.zeros((groups, n), np.float16), np.zeros((groups, n), np.int64)
    for g in range(groups):
        rows = w[g_idx == g]
        low, high = np.minimum(rows.min(0), 0), np.maximum(rows.max(0), 0)
        scales[g] = ((high - low) / maxq).astype(np.float16)
        zeros[g] = np.clip(np.round(-low / scales[g].astype(np.float64)), 0, maxq)
    if fmt == "gptq":
        zeros = np.clip(zeros, 1, maxq)  # v1 stores zero - 1: a zero of 0 cannot be written
    s = scales.astype(np.float64)[g_idx]
    q = np.clip(np.round(w / s) + zeros[g_idx], 0, maxq).astype(np.int64)
    dequantised = torch.from_numpy(np.ascontiguousarray((s * (q - zeros[g_idx])).T, dtype=np.float32))
    stored_zeros = (zeros - 1) & maxq if fmt == "gptq" else zeros
    tensors = {
        "qweight": torch.from_numpy(pack_words(q, bits, axis=0)),
        "qzeros": torch.from_numpy(pack_words(stored_zeros, bits, axis=1)),
        "scales": torch.from_numpy(scales),
        "g_idx": torch.from_numpy(g_idx.astype(np.int32)),
    }
    return tensors, dequantised, q, zeros


def write_gptq_folder(
    float_folder: Path,
    folder: Path,
    *,
    bits: int = 4,
    group: int = 32,
    fmt: str = "gptq",
    shuffle: bool = False,
    with_expected: bool = True,
) -> Path:
    """``folder``: the float checkpoint's linears GPTQ-packed; ``folder/expected`` (``with_expected``): the
    de-quantised floats."""
    rng = np.random.default_rng(bits + group)
    state = load_file(float_folder / "model.safetensors")
    packed, expected = {}, {}
    for name, tensor in state.items():
        stem = name.removesuffix(".weight")
        if name.endswith(".weight") and stem.rsplit(".", 1)[-1] in LINEARS:
            parts, expected[name], _, _ = gptq_quantize(tensor, bits, group, fmt, rng, shuffle)
            packed.update({f"{stem}.{part}": value for part, value in parts.items()})
        else:
            packed[name] = expected[name] = tensor
    return _write_folder(
        float_folder,
        folder,
        packed,
        expected if with_expected else None,
        {
            "quant_method": "gptq",
            "bits": bits,
            "group_size": group,
            "desc_act": shuffle,
            "sym": False,
            "checkpoint_format": fmt,
            "damp_percent": 0.1,
            "true_sequential": True,
        },
    )


AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # AutoAWQ's GEMM packing: word c, bits 4 i hold output column 8 c + ORDER[i]


def awq_pack(values: np.ndarray) -> np.ndarray:
    """``(rows, N)`` 4-bit values -> AutoAWQ's ``(rows, N / 8)`` int32 words."""
    grouped = values.astype(np.uint32).reshape(values.shape[0], -1, 8)
    words = np.zeros(grouped.shape[:2], dtype=np.uint32)
    for i, column in enumerate(AWQ_ORDER):
        words |= grouped[:, :, column] << np.uint32(4 * i)
    return words.view(np.int32)


def write_awq_folder(float_folder: Path, folder: Path, group: int = 32, *, with_expected: bool = True) -> Path:
    """``folder``: the float checkpoint's linears AutoAWQ-GEMM-packed; ``folder/expected`` (``with_expected``): the
    de-quantised floats."""
    rng = np.random.default_rng(group)
    state = load_file(float_folder / "model.safetensors")
    packed, expected = {}, {}
    for name, tensor in state.items():
        stem = name.removesuffix(".weight")
        if name.endswith(".weight") and stem.rsplit(".", 1)[-1] in LINEARS:
            # the GPTQ test's integers, packed the AWQ way (zero points as they are)
            parts, expected[name], q, zeros = gptq_quantize(tensor, 4, group, "gptq_v2", rng)
            packed[f"{stem}.qweight"] = torch.from_numpy(awq_pack(q))
            packed[f"{stem}.qzeros"] = torch.from_numpy(awq_pack(zeros))
            packed[f"{stem}.scales"] = parts["scales"]
        else:
            packed[name] = expected[name] = tensor
    return _write_folder(
        float_folder,
        folder,
        packed,
        expected if with_expected else None,
        {
            "quant_method": "awq",
            "bits": 4,
            "group_size": group,
            "zero_point": True,
            "version": "gemm",
        },
    )


def _write_folder(
    float_folder: Path, folder: Path, packed: dict, expected: dict | None, quantization_config: dict
) -> Path:
    """``folder``: ``packed`` with the float checkpoint's config plus ``quantization_config``; ``folder/expected``:
    ``expected`` (the de-quantised floats) with the plain config, when given."""
    config = json.loads((float_folder / "config.json").read_text())
    folder.mkdir(parents=True)
    if expected is not None:
        (folder / "expected").mkdir()
        save_file(expected, str(folder / "expected" / "model.safetensors"))
        (folder / "expected" / "config.json").write_text(json.dumps(config))
    config["quantization_config"] = quantization_config
    save_file(packed, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(config))
    return folder
