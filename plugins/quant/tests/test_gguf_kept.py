"""quant_method 'gguf': a GGUF file's Q4_0/Q4_1/Q8_0 blocks are kept, exactly, and run through the kernels."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import torch
from gguf.constants import GGMLQuantizationType as T

from microformers import AutoModelForCausalLM, GgufQuantConfig
from microformers.errors import CheckpointError, ConfigError
from microformers_quant import kernels
from microformers_quant.modules import QuantEmbedding, QuantLinear, TiedQuantHead
from microformers_sdk.testing import assert_similar_generation

GGUF_TESTS = Path(__file__).resolve().parents[2] / "gguf" / "tests" / "conftest.py"
IDS = torch.tensor([[1, 5, 9, 33, 40, 7, 60, 11]])
# the blocks through float activations: the de-quantised model's logits up to summation order
FLOAT_ACTIVATIONS = GgufQuantConfig(activations="float32")
# relative to the largest logit: int16 activations through this tiny model's two layers. Q4_0's drift is rounding
# luck at this level: 3.1e-3 with ATen's RMSNorm, 5.0e-3 (5.2e-3 under ATEN_CPU_CAPABILITY=avx2) with the SDK's
# native one, whose output differs by 5e-7; the de-quantised model's logits move 4e-5 with it, these 3e-2.
INT16_DRIFT = 8e-3


@pytest.fixture(scope="module")
def writer() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gguf_test_helpers", GGUF_TESTS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write(writer: ModuleType, path: Path, linear: T, embedding: T = T.Q8_0, tied: bool = True) -> Path:
    weights = writer.tiny_hf_weights(np.random.default_rng(0), bias=False, tied=tied)
    qtypes = {k: linear for k, v in weights.items() if v.ndim == 2}
    qtypes["model.embed_tokens.weight"] = embedding
    return writer.write_gguf(path / "tiny.gguf", weights=weights, qtypes=qtypes)


def logits(model: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return model(IDS).logits


@pytest.mark.parametrize("linear,bits", [(T.Q4_0, 4), (T.Q4_1, 4), (T.Q8_0, 8)])
def test_blocks_are_kept_and_match_the_dequantised_model(
    writer: ModuleType, tmp_path: Path, linear: T, bits: int
) -> None:
    path = write(writer, tmp_path, linear)
    dequantised = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file=path.name)
    kept = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file=path.name, quantization_config=FLOAT_ACTIVATIONS)
    q_proj = kept.model.layers[0].self_attn.q_proj
    assert isinstance(q_proj, QuantLinear) and (q_proj.bits, q_proj.group) == (bits, 32)
    assert isinstance(kept.model.embed_tokens, QuantEmbedding) and isinstance(kept.lm_head, TiedQuantHead)
    # the weights are the file's values exactly (q/k rows un-permuted like the float path)
    # exact: both de-quantise with the same float32 operations (scale * q, + min) on the same blocks
    for name in ("self_attn.q_proj", "self_attn.k_proj", "mlp.down_proj"):
        exact = dequantised.get_submodule(f"model.layers.1.{name}").weight
        assert torch.equal(kept.get_submodule(f"model.layers.1.{name}").dequantize(), exact)
    assert torch.equal(kept.model.embed_tokens.dequantize(), dequantised.model.embed_tokens.weight)
    assert torch.allclose(logits(kept), logits(dequantised), atol=5e-4, rtol=1e-4)  # summation order only
    settings = {"max_new_tokens": 8, "min_new_tokens": 8, "do_sample": False}
    expected = dequantised.generate(IDS, **settings, return_dict_in_generate=True, output_scores=True)
    # the kernels against a float product: the same tokens up to a near tie
    assert_similar_generation(kept.generate(IDS, **settings), expected.sequences, expected.scores, prompt_length=8)


@pytest.mark.parametrize("linear", [T.Q4_0, T.Q4_1, T.Q8_0])
def test_default_int16_activations_track_the_dequantised_model(writer: ModuleType, tmp_path: Path, linear: T) -> None:
    """By default the blocks meet int16 activations (two int8 planes on the interleaved layout, prompt included):
    logits within 5e-3 of the largest float logit here, the same greedy tokens up to a near tie of that size."""
    path = write(writer, tmp_path, linear)
    dequantised = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file=path.name)
    kept = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file=path.name, quantization_config=GgufQuantConfig())
    layers = [m for m in kept.modules() if isinstance(m, (QuantLinear, QuantEmbedding))]
    assert layers and all(m.activation_bits == 16 for m in layers)
    # interleaved where the kernels are built, except the 300-row embedding/head (rows not a multiple of 8)
    assert [m.interleaved for m in layers] == [kernels.native_available() and m.rows % 8 == 0 for m in layers]
    assert any(m.rows % 8 for m in layers)
    expected = logits(dequantised)
    drift = float((logits(kept) - expected).abs().max())
    # measured 5e-3 / 6e-4 / 2e-4 of the largest logit (Q4_0 / Q4_1 / Q8_0); plain int16 rows: 2e-3 / 3e-3 / 3e-4
    assert drift < INT16_DRIFT * float(expected.abs().max())
    # interleaved layers quantize all 8 rows; without the kernels only one-row inputs are (none here)
    assert drift > 0 or not kernels.native_available()
    settings = {"max_new_tokens": 8, "min_new_tokens": 8, "do_sample": False}
    want = dequantised.generate(IDS, **settings, return_dict_in_generate=True, output_scores=True)
    got = kept.generate(IDS, **settings)
    assert_similar_generation(got, want.sequences, want.scores, prompt_length=8, tie_tolerance=INT16_DRIFT)


@pytest.mark.parametrize("embedding", [T.Q8_0, T.Q4_1])
def test_an_untied_quantized_embedding_is_read_dequantised(writer: ModuleType, tmp_path: Path, embedding: T) -> None:
    """Untied, the embedding stays a float ``nn.Embedding``: its kept blocks are read de-quantised, not refused as
    a missing ``embed_tokens.weight``; the head and the other layers keep their blocks."""
    path = write(writer, tmp_path, T.Q8_0, embedding=embedding, tied=False)
    dequantised = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file=path.name)
    kept = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file=path.name, quantization_config=FLOAT_ACTIVATIONS)
    assert type(kept.model.embed_tokens) is torch.nn.Embedding
    assert isinstance(kept.lm_head, QuantLinear) and isinstance(kept.model.layers[0].mlp.up_proj, QuantLinear)
    # exact: the same de-quantisation of the same blocks as the float load
    assert torch.equal(kept.model.embed_tokens.weight, dequantised.model.embed_tokens.weight)
    assert torch.allclose(logits(kept), logits(dequantised), atol=5e-4, rtol=1e-4)  # summation order only


def test_other_block_types_are_requantised_to_int8(writer: ModuleType, tmp_path: Path) -> None:
    path = write(writer, tmp_path, T.Q5_0, embedding=T.F32)
    dequantised = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file=path.name)
    kept = AutoModelForCausalLM.from_pretrained(
        tmp_path, gguf_file=path.name, quantization_config={"quant_method": "gguf"}
    )
    layer = kept.model.layers[0].mlp.up_proj
    assert isinstance(layer, QuantLinear) and (layer.bits, layer.group) == (8, 32)
    exact = dequantised.model.layers[0].mlp.up_proj.weight
    step = layer.scales.repeat_interleave(32, dim=1)
    assert ((layer.dequantize() - exact).abs() <= step / 2 + 1e-6).all()
    assert type(kept.model.embed_tokens) is torch.nn.Embedding  # F32 in the file stays float


def test_saved_gguf_model_reloads_quantized(writer: ModuleType, tmp_path: Path) -> None:
    path = write(writer, tmp_path, T.Q4_1)
    kept = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file=path.name, quantization_config=GgufQuantConfig())
    kept.save_pretrained(tmp_path / "saved")
    assert json.loads((tmp_path / "saved" / "config.json").read_text())["quantization_config"] == {
        "quant_method": "gguf"
    }
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "saved")
    assert isinstance(reloaded.model.layers[0].self_attn.v_proj, QuantLinear)
    assert torch.equal(logits(reloaded), logits(kept))  # exact: a save/load copy, the same kernels and shapes


def test_gguf_method_errors(writer: ModuleType, tmp_path: Path) -> None:
    float_folder = tmp_path / "float"
    write(writer, tmp_path, T.F32)
    AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file="tiny.gguf").save_pretrained(float_folder)
    with pytest.raises(ConfigError, match="gguf_file"):
        AutoModelForCausalLM.from_pretrained(float_folder, quantization_config=GgufQuantConfig())
    raw = np.zeros((64, 17), dtype=np.uint8)  # ffn_up (64 x 32) as MXFP4: a block type nothing here reads
    bad = tmp_path / "bad"
    bad.mkdir()
    _write_with_type(writer, bad / "odd.gguf", "blk.0.ffn_up.weight", raw, T.MXFP4)
    with pytest.raises(CheckpointError, match=r"blk\.0\.ffn_up\.weight.*MXFP4"):
        AutoModelForCausalLM.from_pretrained(bad, gguf_file="odd.gguf", quantization_config=GgufQuantConfig())


def _write_with_type(writer: ModuleType, dst: Path, name: str, raw: np.ndarray, qtype: T) -> None:
    """Write the tiny GGUF with tensor ``name`` stored as the raw bytes ``raw`` of type ``qtype``."""
    import gguf

    weights = writer.tiny_hf_weights(np.random.default_rng(0), bias=False, tied=True)
    real_add = gguf.GGUFWriter.add_tensor

    def add_tensor(self: object, tensor_name: str, tensor: np.ndarray, **kwargs: object) -> None:
        if tensor_name == name:
            real_add(self, tensor_name, raw, raw_dtype=qtype)
        else:
            real_add(self, tensor_name, tensor, **kwargs)

    gguf.GGUFWriter.add_tensor = add_tensor
    try:
        writer.write_gguf(dst, weights=weights)
    finally:
        gguf.GGUFWriter.add_tensor = real_add


def test_blocks_are_read_into_private_memory_not_the_map(
    writer: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from microformers_gguf.format import open_gguf
    from microformers_quant.gguf import GgufBlockSource

    monkeypatch.setitem(writer.TINY, "ffn", 16384)  # MLP blocks span many pages, beyond the kernel's fault-around
    path = write(writer, tmp_path, T.Q4_1)
    gguf = open_gguf(path)
    source = GgufBlockSource(gguf, torch.float32)
    tensors = {key: source[key] for key in source}
    # the kept blocks' pages were (almost all) not touched through the map: a touched page of a mapped
    # file counts in the process's RSS until the map closes. Reading the header and the float norms
    # through the map does touch pages, and the kernel maps up to 64 KiB around each such fault.
    kept = [info for info in gguf.tensors.values() if info.type_name in ("Q4_1", "Q8_0")]
    pages = [p for info in kept for p in range(-(-info.offset // PAGE), (info.offset + info.nbytes) // PAGE)]
    assert len(pages) >= 400 and sum(_resident(gguf.buffer, pages)) < len(pages) // 4
    qweight = tensors["model.layers.0.mlp.up_proj.qweight"]
    exact = gguf.tensor_bytes(gguf.tensors["blk.0.ffn_up.weight"]).view(qweight.shape[0], -1, 20)[:, :, 4:]
    assert torch.equal(qweight.view(qweight.shape[0], -1, 16), exact)
    with open(path, "r+b") as handle:  # the file shrinks after it was opened: an error, not garbage
        handle.truncate(gguf.tensors["blk.1.ffn_up.weight"].offset + 1)
    with pytest.raises(CheckpointError, match=r"blk\.1\.ffn_up\.weight.*end of the file"):
        source["model.layers.1.mlp.up_proj.qweight"]


PAGE = 4096  # the tests run on Linux x86-64


def _resident(buffer: object, pages: list[int]) -> list[bool]:
    """Whether each page (index into ``buffer``) is present in this process (/proc/self/pagemap bit 63)."""
    import ctypes
    import mmap

    assert mmap.PAGESIZE == PAGE
    start = ctypes.addressof(ctypes.c_char.from_buffer(buffer)) // PAGE
    with open("/proc/self/pagemap", "rb") as pagemap:
        entries = []
        for page in pages:
            pagemap.seek((start + page) * 8)
            entries.append(bool(int.from_bytes(pagemap.read(8), "little") >> 63))
    return entries
