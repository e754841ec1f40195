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
from microformers_quant.modules import QuantEmbedding, QuantLinear, TiedQuantHead

GGUF_TESTS = Path(__file__).resolve().parents[2] / "gguf" / "tests" / "conftest.py"
IDS = torch.tensor([[1, 5, 9, 33, 40, 7, 60, 11]])


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
    kept = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file=path.name, quantization_config=GgufQuantConfig())
    q_proj = kept.model.layers[0].self_attn.q_proj
    assert isinstance(q_proj, QuantLinear) and (q_proj.bits, q_proj.group) == (bits, 32)
    assert isinstance(kept.model.embed_tokens, QuantEmbedding) and isinstance(kept.lm_head, TiedQuantHead)
    # the weights are the file's values exactly (q/k rows un-permuted like the float path)
    for name in ("self_attn.q_proj", "self_attn.k_proj", "mlp.down_proj"):
        exact = dequantised.get_submodule(f"model.layers.1.{name}").weight
        assert torch.equal(kept.get_submodule(f"model.layers.1.{name}").dequantize(), exact)
    assert torch.equal(kept.model.embed_tokens.dequantize(), dequantised.model.embed_tokens.weight)
    assert torch.allclose(logits(kept), logits(dequantised), atol=5e-4, rtol=1e-4)  # summation order only
    settings = {"max_new_tokens": 8, "min_new_tokens": 8, "do_sample": False}
    assert torch.equal(kept.generate(IDS, **settings), dequantised.generate(IDS, **settings))


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
    assert torch.equal(logits(reloaded), logits(kept))


def test_gguf_method_errors(writer: ModuleType, tmp_path: Path) -> None:
    float_folder = tmp_path / "float"
    write(writer, tmp_path, T.F32)
    AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file="tiny.gguf").save_pretrained(float_folder)
    with pytest.raises(ConfigError, match="gguf_file"):
        AutoModelForCausalLM.from_pretrained(float_folder, quantization_config=GgufQuantConfig())
    raw = np.zeros((64, 18), dtype=np.uint8)  # ffn_up (64 x 32) as IQ4_NL: a block type nothing here reads
    bad = tmp_path / "bad"
    bad.mkdir()
    _write_with_type(writer, bad / "odd.gguf", "blk.0.ffn_up.weight", raw, T.IQ4_NL)
    with pytest.raises(CheckpointError, match=r"blk\.0\.ffn_up\.weight.*IQ4_NL"):
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
