"""GPTQ checkpoints (AutoGPTQ/exllama packing) and AutoAWQ GEMM checkpoints load: 4-bit layers kept packed in the
int4 format, others de-quantised; the reference's other quantization configs exist and are mapped (bitsandbytes
8-bit) or refused with the reason."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import microformers
from microformers import AutoModelForCausalLM, Int8Config
from microformers.errors import CheckpointError, ConfigError
from microformers_quant.gptq import GptqQuantizer
from microformers_quant.modules import QuantLinear
from microformers_sdk.testing import assert_close, assert_similar_generation

from .gptq_packing import LINEARS, write_awq_folder, write_gptq_folder
from .markers import needs_quant_kernels

IDS = torch.tensor([[1, 5, 9, 33, 40, 7, 60, 11]])


def logits(model: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return model(IDS).logits


# logits of a kept (int4) model against the de-quantised GPTQ/AWQ model: min = -scale * zero is rounded to
# float16 (max |diff| measured 2.1e-4 on the tiny model's logits of magnitude ~1; the kernels add < 1e-6)
MIN_ROUNDING = {"atol": 5e-4, "rtol": 0.0}


def dequantised(quantized: torch.nn.Module, float_folder: Path) -> torch.nn.Module:
    """The float model holding exactly the quantized model's weights (each kept layer's ``dequantize()``)."""
    model = AutoModelForCausalLM.from_pretrained(float_folder)
    with torch.no_grad():
        for name, module in quantized.named_modules():
            if isinstance(module, QuantLinear):
                model.get_submodule(name).weight.copy_(module.dequantize())
    return model


def min_rounding_bound(model: torch.nn.Module) -> float:
    """The most a kept layer's weight can differ from the de-quantised one: ``min = -scale * zero`` rounded to
    float16, at most half a float16 step (relative 2**-11) of ``|min|``."""
    mins = [m.mins.float().abs().max() for m in model.modules() if isinstance(m, QuantLinear)]
    return float(max(mins)) * 2.0**-11


@pytest.mark.parametrize(("group", "fmt"), [(32, "gptq"), (64, "gptq_v2"), (-1, "gptq")])
def test_gptq_4bit_folder_is_kept_packed_as_int4(tiny_llama: Path, tmp_path: Path, group: int, fmt: str) -> None:
    folder = write_gptq_folder(tiny_llama, tmp_path / "gptq", bits=4, group=group, fmt=fmt)
    model = AutoModelForCausalLM.from_pretrained(folder)
    expected = AutoModelForCausalLM.from_pretrained(folder / "expected")
    bound = min_rounding_bound(model)
    for name in LINEARS:
        stem = f"model.layers.1.{'mlp' if name in ('gate_proj', 'up_proj', 'down_proj') else 'self_attn'}.{name}"
        layer, reference = model.get_submodule(stem), expected.get_submodule(stem).weight
        assert isinstance(layer, QuantLinear) and layer.bits == 4, stem
        assert layer.group == (reference.shape[1] if group == -1 else group)
        assert layer.qweight.dtype == torch.uint8 and layer.qweight.shape == (
            reference.shape[0],
            reference.shape[1] // 2,
        )
        # q and scale carry over unchanged; only min = -scale * zero is rounded to float16
        assert_close(layer.dequantize(), reference, atol=bound, rtol=0, msg=stem)
    assert 0 < bound < 1e-4  # the rounding is real but small on these weights
    # the kernels compute exactly what the int4 tensors hold (float summation order aside) ...
    assert_close(logits(model), logits(dequantised(model, folder / "expected")), atol=1e-5, rtol=1e-5)
    # ... so all of the difference from the de-quantised GPTQ model is the float16 min: 2.1e-4 at most on these
    # logits of magnitude ~1 (measured), not the 1e-4 an exact conversion would give
    assert_close(logits(model), logits(expected), **MIN_ROUNDING)
    assert model.config.quantization_config == {
        "quant_method": "int4",
        "group_size": 64 if group == -1 else group,  # -1: one group per row, the smallest row is 64 inputs
        "modules_to_not_convert": ["model.embed_tokens", "lm_head"],
    }


@needs_quant_kernels
def test_kept_gptq_model_decodes_natively_like_its_dequantised_model(
    tiny_llama: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from microformers_quant import decoder_step

    model = AutoModelForCausalLM.from_pretrained(write_gptq_folder(tiny_llama, tmp_path / "gptq"))
    expected = AutoModelForCausalLM.from_pretrained(tmp_path / "gptq" / "expected")
    calls: list[int] = []
    original = decoder_step.QuantDecoderStep.__call__

    def counted(self: object, *args: object) -> torch.Tensor:
        calls.append(int(args[-1]))  # type: ignore[call-overload]
        return original(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(decoder_step.QuantDecoderStep, "__call__", counted)
    greedy = {"max_new_tokens": 8, "min_new_tokens": 8, "do_sample": False, "return_dict_in_generate": True}
    got = model.generate(IDS, **greedy)
    assert len(calls) == 8  # the prompt and every token after the first new one: the int4 kernels' native step
    reference = expected.generate(IDS, **greedy, output_scores=True)
    assert_similar_generation(got.sequences, reference.sequences, reference.scores, prompt_length=IDS.shape[1])


@pytest.mark.parametrize(
    ("bits", "group", "fmt", "shuffle"),
    [
        (4, 32, "gptq", True),
        (8, 32, "gptq", False),
        (2, 64, "gptq_v2", False),
    ],
)
def test_gptq_folder_loads_as_its_dequantised_model(
    tiny_llama: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, bits: int, group: int, fmt: str, shuffle: bool
) -> None:
    folder = write_gptq_folder(tiny_llama, tmp_path / "gptq", bits=bits, group=group, fmt=fmt, shuffle=shuffle)
    with caplog.at_level(logging.WARNING, logger="microformers"):
        model = AutoModelForCausalLM.from_pretrained(folder)
    # act-order 4-bit layers say why they are not int4; 2/8-bit ones are de-quantised by design (documented)
    assert ("act-order g_idx (desc_act) is not the plain group order" in caplog.text) is shuffle
    expected = AutoModelForCausalLM.from_pretrained(folder / "expected")
    float_model = AutoModelForCausalLM.from_pretrained(tiny_llama)
    layer = "model.layers.1.mlp.down_proj"
    weight = model.get_submodule(layer).weight
    assert isinstance(model.get_submodule(layer), torch.nn.Linear) and weight.dtype == torch.float32
    # exact: float16 scale x small integer is exact in float32, computed from the same integers both ways
    assert torch.equal(weight, expected.get_submodule(layer).weight)
    assert not torch.equal(weight, float_model.get_submodule(layer).weight)  # it really is the quantized weight
    assert_close(logits(model), logits(expected), atol=1e-5, rtol=1e-5)
    assert getattr(model.config, "quantization_config", None) is None  # a float model now: saving writes floats


def test_gptq_model_saves_and_reloads_as_float(tiny_llama: Path, tmp_path: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(write_gptq_folder(tiny_llama, tmp_path / "gptq", bits=8))
    model.save_pretrained(tmp_path / "saved")
    assert "quantization_config" not in json.loads((tmp_path / "saved" / "config.json").read_text())
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "saved")
    assert torch.equal(logits(reloaded), logits(model))  # exact: the same float weights, same kernels


def test_kept_gptq_model_saves_and_reloads_as_int4(tiny_llama: Path, tmp_path: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(write_gptq_folder(tiny_llama, tmp_path / "gptq"))
    model.save_pretrained(tmp_path / "saved")
    saved = json.loads((tmp_path / "saved" / "config.json").read_text())["quantization_config"]
    assert saved["quant_method"] == "int4"
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "saved")
    assert isinstance(reloaded.model.layers[0].mlp.down_proj, QuantLinear)
    assert isinstance(reloaded.model.embed_tokens, torch.nn.Embedding)  # left float, as loaded
    assert torch.equal(logits(reloaded), logits(model))  # exact: the same int4 tensors and float parts, same kernels


def test_bits_that_do_not_match_the_tensors_name_the_file_and_tensor(tiny_llama: Path, tmp_path: Path) -> None:
    folder = write_gptq_folder(tiny_llama, tmp_path / "gptq", bits=8)
    config = json.loads((folder / "config.json").read_text())
    config["quantization_config"]["bits"] = 4
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(
        CheckpointError, match=r"model\.safetensors: '[\w.]+_proj\.qweight' has shape .* at 4 bits.*\(bits\)"
    ):
        AutoModelForCausalLM.from_pretrained(folder)


def test_a_group_size_the_kernels_cannot_take_loads_dequantised_with_the_reason(
    tiny_llama: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = write_gptq_folder(tiny_llama, tmp_path / "gptq", group=16)
    with caplog.at_level(logging.WARNING, logger="microformers"):
        model = AutoModelForCausalLM.from_pretrained(folder)
    assert "group size 16 is not a multiple of 32" in caplog.text
    layer = "model.layers.0.self_attn.q_proj"
    assert torch.equal(  # exact: the same float32 products of the same integers
        model.get_submodule(layer).weight,
        AutoModelForCausalLM.from_pretrained(folder / "expected").get_submodule(layer).weight,
    )


def test_reference_gptq_config_dict_is_accepted(tiny_llama: Path, tmp_path: Path) -> None:
    """Every field the reference's GPTQConfig.to_dict() writes (calibration settings included) is understood."""
    transformers = pytest.importorskip("transformers")
    folder = write_gptq_folder(tiny_llama, tmp_path / "gptq", group=64)
    config = json.loads((folder / "config.json").read_text())
    reference = transformers.GPTQConfig(bits=4, group_size=64, sym=False).to_dict()
    config["quantization_config"] = json.loads(json.dumps(reference, default=str))
    config["quantization_config"]["quant_method"] = "gptq"
    (folder / "config.json").write_text(json.dumps(config))
    model = AutoModelForCausalLM.from_pretrained(folder)
    # int4 kept: min = -scale * zero rounded to float16 (test_gptq_4bit_folder_is_kept_packed_as_int4)
    assert_close(logits(model), logits(AutoModelForCausalLM.from_pretrained(folder / "expected")), **MIN_ROUNDING)


def test_gptq_config_class_passed_as_argument(tiny_llama: Path, tmp_path: Path) -> None:
    folder = write_gptq_folder(tiny_llama, tmp_path / "gptq", group=64, fmt="gptq_v2")
    config = json.loads((folder / "config.json").read_text())
    del config["quantization_config"]
    (folder / "config.json").write_text(json.dumps(config))
    model = AutoModelForCausalLM.from_pretrained(
        folder,
        quantization_config=microformers.GPTQConfig(bits=4, group_size=64, sym=False, checkpoint_format="gptq_v2"),
    )
    # int4 kept: min = -scale * zero rounded to float16 (test_gptq_4bit_folder_is_kept_packed_as_int4)
    assert_close(logits(model), logits(AutoModelForCausalLM.from_pretrained(folder / "expected")), **MIN_ROUNDING)


def test_inconsistent_group_size_names_the_layer(tiny_llama: Path, tmp_path: Path) -> None:
    folder = write_gptq_folder(tiny_llama, tmp_path / "gptq", group=32)
    with pytest.raises(CheckpointError, match=r"layer 'model\.layers\.\d\.\w+\.\w+_proj'.*group_size 64 .*scales"):
        AutoModelForCausalLM.from_pretrained(folder, quantization_config={"quant_method": "gptq", "group_size": 64})


def test_bad_gptq_tensors_are_refused(tiny_llama: Path, tmp_path: Path) -> None:
    folder = write_gptq_folder(tiny_llama, tmp_path / "gptq")
    state = load_file(folder / "model.safetensors")
    stem = "model.layers.0.self_attn.q_proj"
    broken = dict(state)
    del broken[f"{stem}.qzeros"]
    save_file(broken, str(folder / "model.safetensors"))
    with pytest.raises(CheckpointError, match=rf"'{stem}' has a qweight but no qzeros"):
        AutoModelForCausalLM.from_pretrained(folder)
    broken = dict(state)
    broken[f"{stem}.g_idx"] = torch.full_like(state[f"{stem}.g_idx"], 99)
    save_file(broken, str(folder / "model.safetensors"))
    with pytest.raises(CheckpointError, match=rf"'{stem}\.g_idx' must hold 64 group numbers in 0\.\.1"):
        AutoModelForCausalLM.from_pretrained(folder)
    broken = dict(state)
    broken[f"{stem}.qweight"] = state[f"{stem}.qweight"].float()
    save_file(broken, str(folder / "model.safetensors"))
    with pytest.raises(CheckpointError, match=rf"'{stem}\.qweight' is torch.float32"):
        AutoModelForCausalLM.from_pretrained(folder)


@pytest.mark.parametrize(
    ("config", "match"),
    [
        ({"bits": 3}, "bits=3: GPTQ checkpoints of 2, 4, 8 bits"),
        ({"group_size": 0}, "group_size must be a positive integer or -1"),
        ({"checkpoint_format": "marlin"}, "checkpoint_format='marlin'"),
        ({"desc_act": "yes"}, "desc_act must be true or false"),
        ({"bogus": 1}, r"unknown field\(s\) \['bogus'\]"),
    ],
)
def test_bad_gptq_settings_are_refused(config: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        GptqQuantizer({"quant_method": "gptq", **config})


def test_gptq_on_a_float_checkpoint_names_what_works(tiny_llama: Path) -> None:
    with pytest.raises(ConfigError, match=r"holds no '\*\.qweight'.*Int4Config"):
        AutoModelForCausalLM.from_pretrained(tiny_llama, quantization_config=microformers.GPTQConfig(dataset="c4"))


@pytest.mark.parametrize(
    ("config_class", "match"),
    [
        ("QuantoConfig", "'quanto'"),
        ("TorchAoConfig", "'torchao'"),
        ("HqqConfig", "'hqq'"),
    ],
)
def test_other_backends_are_refused_with_what_works(tiny_llama: Path, config_class: str, match: str) -> None:
    config = getattr(microformers, config_class)()
    with pytest.raises(ConfigError, match=rf"{match}.*Int8Config\(\).*Int4Config"):
        AutoModelForCausalLM.from_pretrained(tiny_llama, quantization_config=config)


def test_bitsandbytes_8bit_is_microformers_int8(
    tiny_llama: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        bnb = AutoModelForCausalLM.from_pretrained(
            tiny_llama, quantization_config=microformers.BitsAndBytesConfig(load_in_8bit=True)
        )
    assert "llm_int8_threshold=6.0" in caplog.text  # the part with no counterpart is said, not dropped silently
    int8 = AutoModelForCausalLM.from_pretrained(tiny_llama, quantization_config=Int8Config())
    assert isinstance(bnb.model.layers[0].mlp.up_proj, QuantLinear)
    assert torch.equal(logits(bnb), logits(int8))  # exact: the same int8 weights and kernels
    bnb.save_pretrained(tmp_path / "saved")
    saved = json.loads((tmp_path / "saved" / "config.json").read_text())["quantization_config"]
    assert saved["quant_method"] == "int8"


@pytest.mark.parametrize("kind", ["nf4", "fp4"])
def test_bitsandbytes_4bit_is_refused_naming_int4(tiny_llama: Path, kind: str) -> None:
    config = microformers.BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=kind)
    with pytest.raises(ConfigError, match=rf"{kind.upper()} codebook has no kernel here.*Int4Config"):
        AutoModelForCausalLM.from_pretrained(tiny_llama, quantization_config=config)


def test_bitsandbytes_saved_checkpoint_is_refused(tiny_llama: Path, tmp_path: Path) -> None:
    folder = tmp_path / "bnb"
    folder.mkdir()
    state = load_file(tiny_llama / "model.safetensors")
    state["model.layers.0.mlp.up_proj.SCB"] = torch.ones(128)
    save_file(state, str(folder / "model.safetensors"))
    (folder / "config.json").write_text((tiny_llama / "config.json").read_text())
    with pytest.raises(CheckpointError, match=r"saved by bitsandbytes.*up_proj\.SCB"):
        AutoModelForCausalLM.from_pretrained(
            folder, quantization_config=microformers.BitsAndBytesConfig(load_in_8bit=True)
        )


@pytest.mark.parametrize("group", [32, 64])
def test_awq_folder_is_kept_packed_as_int4(tiny_llama: Path, tmp_path: Path, group: int) -> None:
    folder = write_awq_folder(tiny_llama, tmp_path / "awq", group)
    model = AutoModelForCausalLM.from_pretrained(folder)
    expected = AutoModelForCausalLM.from_pretrained(folder / "expected")
    bound = min_rounding_bound(model)
    for layer in ("model.layers.0.self_attn.k_proj", "model.layers.1.mlp.down_proj"):
        module = model.get_submodule(layer)
        assert isinstance(module, QuantLinear) and (module.bits, module.group) == (4, group), layer
        # AWQ's interleaved columns land in place: only min = -scale * zero is rounded (to float16)
        assert_close(module.dequantize(), expected.get_submodule(layer).weight, atol=bound, rtol=0, msg=layer)
    assert_close(logits(model), logits(dequantised(model, folder / "expected")), atol=1e-5, rtol=1e-5)
    assert_close(logits(model), logits(expected), **MIN_ROUNDING)
    assert model.config.quantization_config["quant_method"] == "int4"


def test_awq_group_size_the_kernels_cannot_take_loads_dequantised(
    tiny_llama: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = write_awq_folder(tiny_llama, tmp_path / "awq", 16)
    with caplog.at_level(logging.WARNING, logger="microformers"):
        model = AutoModelForCausalLM.from_pretrained(folder)
    assert "AWQ layer(s)" in caplog.text and "group size 16 is not a multiple of 32" in caplog.text
    expected = AutoModelForCausalLM.from_pretrained(folder / "expected")
    layer = "model.layers.1.mlp.down_proj"
    # exact: float16 scale x small integer is exact in float32, from the same integers both ways
    assert torch.equal(model.get_submodule(layer).weight, expected.get_submodule(layer).weight)
    assert getattr(model.config, "quantization_config", None) is None


def test_reference_awq_config_is_accepted_and_other_packings_refused(tiny_llama: Path, tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    folder = write_awq_folder(tiny_llama, tmp_path / "awq", 64)
    reference = json.loads(json.dumps(transformers.AwqConfig(bits=4, group_size=64).to_dict(), default=str))
    reference["quant_method"] = "awq"
    model = AutoModelForCausalLM.from_pretrained(folder, quantization_config=reference)
    # int4 kept: min = -scale * zero rounded to float16 (test_gptq_4bit_folder_is_kept_packed_as_int4)
    assert_close(logits(model), logits(AutoModelForCausalLM.from_pretrained(folder / "expected")), **MIN_ROUNDING)
    with pytest.raises(ConfigError, match=r"\['gemv'\]: AWQ checkpoints packed for the 'gemm' kernel"):
        AutoModelForCausalLM.from_pretrained(folder, quantization_config=microformers.AwqConfig(version="gemv"))
    with pytest.raises(CheckpointError, match=r"with group_size 32 it needs scales"):
        AutoModelForCausalLM.from_pretrained(folder, quantization_config=microformers.AwqConfig(group_size=32))
