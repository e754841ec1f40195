"""int8/int4 quantization of float checkpoints: kernels, loading, saving, bad input."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import microformers
from microformers import AutoModelForCausalLM, Int4Config, Int8Config
from microformers.errors import CheckpointError, ConfigError, MicroformersError
from microformers_quant import kernels
from microformers_quant.modules import QuantEmbedding, QuantizedDtypeError, QuantLinear, TiedQuantHead
from microformers_sdk.testing import assert_close, assert_similar_generation

from .markers import needs_compiler, needs_quant_kernels

IDS = torch.tensor([[1, 5, 9, 33, 40, 7, 60, 11]])


def logits(model: torch.nn.Module, ids: torch.Tensor = IDS) -> torch.Tensor:
    with torch.no_grad():
        return model(ids).logits


def unpacked(q: torch.Tensor) -> torch.Tensor:
    blocks = q.view(q.shape[0], -1, 16)
    return torch.cat([blocks & 15, blocks >> 4], -1).view(q.shape[0], -1)


@needs_quant_kernels
@pytest.mark.parametrize("bits,group", [(4, 32), (4, 64), (8, 32), (8, 128)])
@pytest.mark.parametrize("rows", [1, 3])
def test_kernel_matches_dequantised_matmul(bits: int, group: int, rows: int) -> None:
    torch.manual_seed(bits + group + rows)
    layer = QuantLinear(128, 48, bias=False, bits=bits, group=group)
    weight = torch.randn(48, 128)
    for name, tensor in layer.quantize_weight(weight).items():
        setattr(layer, name, tensor)
    x = torch.randn(rows, 128)
    expected = torch.nn.functional.linear(x, layer.dequantize())
    assert kernels.native_available(), "the C++ kernels must build here (g++ and ninja are test requirements)"
    assert torch.allclose(layer(x), expected, atol=1e-4, rtol=1e-5)
    # quantization error is at most half a step per value
    step = layer.scales.float().repeat_interleave(group, dim=1)
    assert ((layer.dequantize() - weight).abs() <= step / 2 + 1e-3 * step + 1e-6).all()


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("rows", [1, 20])
def test_gradients_reach_the_input_through_a_quantized_layer(bits: int, rows: int) -> None:
    """LoRA on a quantized base backpropagates through the frozen layer as through its float weight."""
    torch.manual_seed(bits + rows)
    layer = QuantLinear(64, 48, bias=True, bits=bits, group=32)
    for name, tensor in layer.quantize_weight(torch.randn(48, 64)).items():
        setattr(layer, name, tensor)
    layer.bias = torch.nn.Parameter(torch.randn(48))
    x = torch.randn(rows, 64, requires_grad=True)
    (layer(x) ** 2).sum().backward()
    reference = x.detach().clone().requires_grad_(True)
    (torch.nn.functional.linear(reference, layer.dequantize(), layer.bias) ** 2).sum().backward()
    assert x.grad is not None
    torch.testing.assert_close(x.grad, reference.grad, atol=1e-4, rtol=1e-5)


@needs_quant_kernels
@pytest.mark.parametrize("bits,group", [(4, 32), (4, 64), (8, 32), (8, 96)])
def test_native_dequantize_is_bitwise_the_torch_definition(bits: int, group: int) -> None:
    assert kernels.native_available()
    torch.manual_seed(bits + group)
    layer = QuantLinear(192, 37, bias=False, bits=bits, group=group)
    for name, tensor in layer.quantize_weight(torch.randn(37, 192) * 3).items():
        setattr(layer, name, tensor)
    if bits == 4:
        native = torch.ops.mfquant.q4_dequantize(layer.qweight, layer.scales, layer.mins, group)
    else:
        native = torch.ops.mfquant.q8_dequantize(layer.qweight, layer.scales, group)
    # exact: a documented invariant; scale * q (+ min) as separate float32 operations, as torch does them
    assert torch.equal(native, layer.dequantize())


@needs_quant_kernels
@pytest.mark.parametrize("bits,group", [(4, 32), (8, 64)])
@pytest.mark.parametrize("gemm_rows", [1, 1 << 30])  # de-quantised tiles + GEMM / register-blocked row kernels
def test_multi_row_kernels_match_dequantised_matmul(
    bits: int, group: int, gemm_rows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert kernels.native_available()
    monkeypatch.setattr(kernels, "GEMM_MIN_ROWS", gemm_rows)
    torch.manual_seed(bits * group)
    layer = QuantLinear(128, 300, bias=True, bits=bits, group=group)  # 300 outputs: several uneven tiles
    for name, tensor in layer.quantize_weight(torch.randn(300, 128)).items():
        setattr(layer, name, tensor)
    layer.bias = torch.nn.Parameter(torch.randn(300))
    weight = layer.dequantize()
    for rows in (1, 2, 3, 7, 8, 13, 40):  # every chunk of the row kernels (8, 4, 2, 1) and remainders
        x = torch.randn(rows, 128)
        expected = torch.nn.functional.linear(x, weight, layer.bias)
        got = layer(x)
        assert torch.allclose(got, expected, atol=2e-5, rtol=1e-5), (rows, (got - expected).abs().max())
    x = torch.randn(2, 9, 128)  # a batch of sequences, as prefill passes it
    assert torch.allclose(layer(x), torch.nn.functional.linear(x, weight, layer.bias), atol=2e-5, rtol=1e-5)


@needs_quant_kernels
@pytest.mark.parametrize("bits", [4, 8])
def test_kernels_run_on_two_threads_under_inference_mode(bits: int) -> None:
    """The kernels split output features over OpenMP threads; the prefill tiles run ATen ops on the
    worker threads, which must see the caller's inference mode (writing into an inference tensor
    from a worker without it raised "Inplace update to inference tensor outside InferenceMode")."""
    assert kernels.native_available()
    torch.manual_seed(bits)
    layer = QuantLinear(128, 300, bias=False, bits=bits, group=32)
    for name, tensor in layer.quantize_weight(torch.randn(300, 128)).items():
        setattr(layer, name, tensor)
    weight = layer.dequantize()
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        for rows in (1, 5, 64):  # row kernels and de-quantised tiles
            x = torch.randn(rows, 128)
            with torch.inference_mode():
                got = layer(x)
            assert torch.allclose(got, torch.nn.functional.linear(x, weight), atol=2e-5, rtol=1e-5), rows
    finally:
        torch.set_num_threads(threads)


def test_int8_activations_only_for_one_row() -> None:
    torch.manual_seed(3)
    layer = QuantLinear(64, 40, bias=False, bits=4, group=32)
    for name, tensor in layer.quantize_weight(torch.randn(40, 64)).items():
        setattr(layer, name, tensor)
    layer.activation_bits = 8
    x = torch.randn(24, 64)  # more rows than KERNEL_MAX_ROWS: float activations
    assert torch.allclose(layer(x), torch.nn.functional.linear(x, layer.dequantize()), atol=2e-5, rtol=1e-5)
    assert torch.allclose(layer(x[:2]), torch.nn.functional.linear(x[:2], layer.dequantize()), atol=2e-5, rtol=1e-5)
    assert not torch.allclose(layer(x[:1]), torch.nn.functional.linear(x[:1], layer.dequantize()), atol=1e-4)


def test_int4_packing_is_ggml_order() -> None:
    layer = QuantLinear(32, 1, bias=False, bits=4, group=32)
    weight = torch.arange(32, dtype=torch.float32).view(1, 32) / 31.0
    parts = layer.quantize_weight(weight)
    q = unpacked(parts["qweight"])
    assert q[0].tolist() == torch.round(torch.arange(32) * 15 / 31).tolist()
    assert parts["qweight"][0, 0].item() == q[0, 0].item() | (q[0, 16].item() << 4)


@pytest.mark.parametrize(
    "spec,linear_bits,head_bits",
    [
        ({"quant_method": "int8"}, 8, 8),
        (Int8Config(), 8, 8),
        (Int4Config(group_size=32), 4, 8),
        (Int4Config(group_size=64), 4, 8),
    ],
)
def test_quantized_load_of_a_float_checkpoint(tiny_llama: Path, spec: object, linear_bits: int, head_bits: int) -> None:
    ref = AutoModelForCausalLM.from_pretrained(tiny_llama)
    model = AutoModelForCausalLM.from_pretrained(tiny_llama, quantization_config=spec)
    q_proj = model.model.layers[0].self_attn.q_proj
    assert isinstance(q_proj, QuantLinear) and q_proj.bits == linear_bits
    assert isinstance(model.model.embed_tokens, QuantEmbedding) and model.model.embed_tokens.bits == head_bits
    assert isinstance(model.lm_head, TiedQuantHead) and model.lm_head.embedding is model.model.embed_tokens
    assert model.get_memory_footprint() < 0.45 * ref.get_memory_footprint()
    expected, got = logits(ref), logits(model)
    tolerance = 0.05 if linear_bits == 8 else 0.3
    assert (got - expected).abs().max() < tolerance * expected.abs().max()
    assert not torch.equal(got, expected)  # really quantized
    assert model.config.quantization_config["quant_method"] == ("int8" if linear_bits == 8 else "int4")


def test_quantized_model_generates_with_beams_and_static_cache(tiny_llama: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(tiny_llama, quantization_config=Int4Config())
    settings = {"max_new_tokens": 6, "min_new_tokens": 6, "do_sample": False}
    scored = {"return_dict_in_generate": True, "output_scores": True}
    greedy = model.generate(IDS, **settings, **scored)
    static = model.generate(IDS, **settings, cache_implementation="static", **scored).sequences
    # a static cache attends over its whole masked length: other shapes, so the same tokens up to a near tie
    assert_similar_generation(static, greedy.sequences, greedy.scores, prompt_length=IDS.shape[1])
    beams = model.generate(IDS, max_new_tokens=6, min_new_tokens=6, do_sample=False, num_beams=3)
    assert beams.shape == (1, IDS.shape[1] + 6)
    batch = torch.cat([IDS, IDS.flip(1)])
    alone = model.generate(IDS, max_new_tokens=4, do_sample=False, **scored)
    in_batch = model.generate(batch, max_new_tokens=4, do_sample=False)[:1]
    # a batch of 2 against the row alone: other shapes (and kernels), so the same tokens up to a near tie
    assert_similar_generation(in_batch, alone.sequences, alone.scores, prompt_length=IDS.shape[1])


def test_untied_head_is_int8_per_channel_for_int4(tiny_llama_untied: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_untied, quantization_config=Int4Config())
    assert isinstance(model.lm_head, QuantLinear) and model.lm_head.bits == 8 and model.lm_head.group == 64
    assert isinstance(model.model.embed_tokens, torch.nn.Embedding)  # an untied embedding costs no matmul


def test_modules_to_not_convert(tiny_llama: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(
        tiny_llama, quantization_config=Int8Config(modules_to_not_convert=["lm_head", "q_proj"])
    )
    assert type(model.lm_head) is torch.nn.Linear and type(model.model.embed_tokens) is torch.nn.Embedding
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert type(model.model.layers[1].self_attn.q_proj) is torch.nn.Linear
    assert isinstance(model.model.layers[1].self_attn.k_proj, QuantLinear)


@pytest.mark.parametrize("spec", [Int8Config(), Int4Config(group_size=32)])
def test_save_and_reload_without_arguments(tiny_llama: Path, tmp_path: Path, spec: object) -> None:
    model = AutoModelForCausalLM.from_pretrained(tiny_llama, quantization_config=spec)
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["quantization_config"] == spec.to_dict()
    tensors = load_file(tmp_path / "model.safetensors")
    q = tensors["model.layers.0.mlp.up_proj.qweight"]
    assert q.dtype == (torch.int8 if spec.quant_method == "int8" else torch.uint8)
    assert "model.layers.0.mlp.up_proj.weight" not in tensors and "lm_head.qweight" not in tensors
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert isinstance(reloaded.model.layers[0].mlp.up_proj, QuantLinear)
    assert torch.equal(logits(reloaded), logits(model))  # exact: a save/load copy, the same kernels and shapes


def test_load_in_8bit_and_4bit_warn_and_quantize(tiny_llama: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="microformers"):
        model = AutoModelForCausalLM.from_pretrained(tiny_llama, load_in_8bit=True)
    assert isinstance(model.model.layers[0].mlp.up_proj, QuantLinear) and model.model.layers[0].mlp.up_proj.bits == 8
    assert "load_in_8bit=True" in caplog.text and "symmetric per output channel" in caplog.text
    model = AutoModelForCausalLM.from_pretrained(tiny_llama, load_in_4bit=True)
    assert model.model.layers[0].mlp.up_proj.bits == 4
    with pytest.raises(ConfigError, match="one of"):
        AutoModelForCausalLM.from_pretrained(tiny_llama, load_in_8bit=True, load_in_4bit=True)


def test_bad_quantization_configs(tiny_llama: Path) -> None:
    with pytest.raises(MicroformersError, match="quantization method 'eetq'"):
        AutoModelForCausalLM.from_pretrained(tiny_llama, quantization_config={"quant_method": "eetq"})
    with pytest.raises(ConfigError, match="quant_method"):
        AutoModelForCausalLM.from_pretrained(tiny_llama, quantization_config={"bits": 4})
    with pytest.raises(ConfigError, match=r"group_size 128 does not divide the input size 64 of layer"):
        AutoModelForCausalLM.from_pretrained(tiny_llama, quantization_config=Int4Config(group_size=128))
    with pytest.raises(ConfigError, match="multiple of 32"):
        AutoModelForCausalLM.from_pretrained(tiny_llama, quantization_config={"quant_method": "int4", "group_size": 48})
    with pytest.raises(ConfigError, match="activations"):
        AutoModelForCausalLM.from_pretrained(tiny_llama, quantization_config=Int8Config(activations="int4"))
    with pytest.raises(ConfigError, match="unknown field"):
        AutoModelForCausalLM.from_pretrained(tiny_llama, quantization_config={"quant_method": "int8", "bits": 3})


def test_missing_and_misshaped_scales_name_the_tensor(tiny_llama: Path, tmp_path: Path) -> None:
    AutoModelForCausalLM.from_pretrained(tiny_llama, quantization_config=Int4Config()).save_pretrained(tmp_path)
    tensors = load_file(tmp_path / "model.safetensors")
    key = "model.layers.1.self_attn.o_proj.scales"
    broken = dict(tensors)
    broken[key] = tensors[key][:, :1].contiguous()
    save_file(broken, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match=key.replace(".", r"\.")):
        AutoModelForCausalLM.from_pretrained(tmp_path)
    del broken[key]
    save_file(broken, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match=key.replace(".", r"\.")):
        AutoModelForCausalLM.from_pretrained(tmp_path)


def test_dtype_change_of_a_quantized_model_is_refused(tiny_llama: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(tiny_llama, quantization_config=Int8Config())
    with pytest.raises(QuantizedDtypeError, match="dtype="):
        model.to(torch.float16)
    with pytest.raises(QuantizedDtypeError):
        model.half()
    model.to("cpu")  # moving without a dtype change is fine
    assert isinstance(QuantizedDtypeError("x"), microformers.MicroformersError)


@pytest.mark.parametrize("bits,group", [(4, 32), (4, 64), (8, 32), (8, 64)])
@pytest.mark.parametrize("act_bits,drift", [(8, 0.05), (16, 2e-4)])
def test_integer_activation_kernels_match_their_torch_definition(
    bits: int, group: int, act_bits: int, drift: float
) -> None:
    torch.manual_seed(bits * group)
    layer = QuantLinear(128, 40, bias=False, bits=bits, group=group)
    for name, tensor in layer.quantize_weight(torch.randn(40, 128)).items():
        setattr(layer, name, tensor)
    layer.activation_bits = act_bits
    x = torch.randn(2, 128)
    q = kernels.quantize_activations(x, act_bits)
    if bits == 4:
        low = layer.mins.float().repeat_interleave(group, dim=1)
        expected = torch.nn.functional.linear(q, layer.dequantize() - low) + torch.nn.functional.linear(x, low)
    else:
        expected = torch.nn.functional.linear(q, layer.dequantize())
    if bits == 4:  # two rows straight through the kernel: the layer sends only one-row inputs there
        got = kernels.q4_linear(x, layer.qweight, layer.scales, layer.mins, group, act_bits)
    else:
        got = kernels.q8_linear(x, layer.qweight, layer.scales, group, act_bits)
    assert torch.allclose(got, expected, atol=2e-4, rtol=1e-4)
    # one row against the second of two: the kernels' row blocks (or, in plain torch, the matrix product) differ
    assert_close(layer(x[1:]), got[1:])
    exact = torch.nn.functional.linear(x, layer.dequantize())
    assert 0 < (got - exact).abs().max() < drift * exact.abs().max()
    assert torch.equal(kernels.quantize_activations(x, act_bits), q)  # exact: the same function on the same input
    levels = (q.view(2, -1, 32) / q.view(2, -1, 32).abs().amax(-1, keepdim=True)).mul((1 << (act_bits - 1)) - 1)
    assert torch.allclose(levels, levels.round(), atol=1e-3)  # on the grid of act_bits-bit integers


@pytest.mark.slow
@needs_compiler
def test_compiled_decode_step_runs_the_kernels(tiny_llama: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(tiny_llama, quantization_config=Int4Config())
    settings = {"max_new_tokens": 6, "min_new_tokens": 6, "do_sample": False}
    eager = model.generate(IDS, **settings, return_dict_in_generate=True, output_scores=True)
    model.compile_decode_step(native=False)  # torch.compile through the kernels' fake implementations
    compiled = model.generate(IDS, cache_implementation="static", **settings)
    # compiled static steps against eager dynamic ones: other kernels and shapes, the same tokens up to a near tie
    assert_similar_generation(compiled, eager.sequences, eager.scores, prompt_length=IDS.shape[1])


@needs_quant_kernels
def test_torch_fallback_computes_what_the_kernels_compute(tmp_path: Path) -> None:
    """``MICROFORMERS_QUANT_KERNELS=torch`` (what runs without a compiler): the same products in plain torch."""
    import os
    import subprocess
    import sys

    script = (
        "import torch\n"
        "from microformers_quant import kernels\n"
        "from microformers_quant.modules import QuantLinear\n"
        "torch.manual_seed(0)\n"
        "out = []\n"
        "for bits in (4, 8):\n"
        "    layer = QuantLinear(64, 48, bias=False, bits=bits, group=32)\n"
        "    for name, tensor in layer.quantize_weight(torch.randn(48, 64)).items():\n"
        "        setattr(layer, name, tensor)\n"
        "    for act in (32, 16, 8):\n"
        "        layer.activation_bits = act\n"
        "        out.append(layer(torch.arange(64.0).sin().view(1, 64)))\n"
        "        b = layer._buffers\n"
        "        mins = [b['mins']] * 2 if bits == 4 else None\n"
        "        out += kernels.linear_many(torch.ones(3, 64), bits, [b['qweight']] * 2, [b['scales']] * 2, mins, 32, act)\n"
        "torch.save((bool(kernels._ops), out), __import__('sys').argv[1])\n"
    )
    results = []
    for mode in ("torch", ""):
        path = tmp_path / f"{mode or 'native'}.pt"
        env = {**os.environ, "MICROFORMERS_QUANT_KERNELS": mode, "OMP_NUM_THREADS": "1"}
        subprocess.run([sys.executable, "-c", script, str(path)], check=True, env=env, timeout=300)
        results.append(torch.load(path))
    (fallback_native, fallback), (native_native, native) = results
    assert not fallback_native and native_native
    for got, expected in zip(fallback, native):
        assert torch.allclose(got, expected, atol=2e-4, rtol=1e-4)


def _filled(layer: QuantLinear, seed: int) -> QuantLinear:
    torch.manual_seed(seed)
    for name, tensor in layer.quantize_weight(torch.randn(layer.out_features, layer.in_features)).items():
        setattr(layer, name, tensor)
    return layer


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("act_bits", [32, 16, 8])
@pytest.mark.parametrize("rows", [1, 3, 20])  # row kernels, several rows, de-quantised tiles
@needs_quant_kernels
@pytest.mark.parametrize("threads", [1, 2])
def test_grouped_layers_give_each_layers_own_output(bits: int, act_bits: int, rows: int, threads: int) -> None:
    """q/k/v (or gate/up) through one kernel call: bit for bit what each layer computes alone."""
    from microformers_sdk.layers import apply_linears

    assert kernels.native_available()
    layers = [_filled(QuantLinear(64, n, bias=i == 1, bits=bits, group=32), i) for i, n in enumerate((48, 16, 300))]
    layers[1].bias = torch.nn.Parameter(torch.randn(16))
    for layer in layers:
        layer.activation_bits = act_bits
    calls = []
    many = kernels.linear_many
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        x = torch.randn(2, rows, 64)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(kernels, "linear_many", lambda *a: calls.append(a) or many(*a))
            grouped = apply_linears(layers, x)
        alone = [layer(x) for layer in layers]
    finally:
        torch.set_num_threads(previous)
    assert len(calls) == 1 and [g.shape for g in grouped] == [a.shape for a in alone]
    for got, expected in zip(grouped, alone, strict=True):
        # exact: a documented invariant; the grouped op runs each weight's own product, rows split the same way
        assert torch.equal(got, expected)


def test_layers_that_cannot_share_a_call_run_one_by_one() -> None:
    from microformers_sdk.layers import apply_linears

    x = torch.randn(1, 64)
    four, eight = _filled(QuantLinear(64, 32, False, 4, 32), 0), _filled(QuantLinear(64, 32, False, 8, 32), 1)
    linear = torch.nn.Linear(64, 32)
    assert QuantLinear.linear_group([four, eight], x) is None  # different bits
    assert QuantLinear.linear_group([four, linear], x) is None  # a float layer
    assert QuantLinear.linear_group([four, four], x.double()) is None  # cast per layer
    seen = []
    handle = four.register_forward_hook(lambda module, args, out: seen.append(out))
    assert QuantLinear.linear_group([four, four], x) is None  # hooks must run
    # exact: layers that cannot share a call run alone, the same kernel on the same input
    assert torch.equal(apply_linears([four, eight], x)[1], eight(x)) and len(seen) == 1
    apply_linears([four, four], x)
    handle.remove()
    assert len(seen) == 3


@needs_quant_kernels
def test_the_grouped_op_checks_every_weight_against_the_input() -> None:
    x = torch.randn(1, 64)
    four, wide = _filled(QuantLinear(64, 32, False, 4, 32), 0), _filled(QuantLinear(32, 16, False, 4, 32), 2)
    with pytest.raises(RuntimeError, match="features"):  # the op checks every weight against x
        kernels.linear_many(x, 4, [four.qweight, wide.qweight], [four.scales, wide.scales], [four.mins, wide.mins], 32)
