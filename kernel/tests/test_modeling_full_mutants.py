"""Behaviour of ``microformers.modeling`` that the full mutation run (workspace hmod) found unasserted.

See docs/reliability.md, "Mutation testing": each test here fails with at least one mutant of
``kernel/src/microformers/modeling.py`` that the other judging tests let survive, and passes on the real code.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from microformers import CheckpointError, ConfigError, PretrainedConfig
from microformers import modeling as modeling_module
from microformers.plugins import Registry

# -- num_parameters, get_memory_footprint ---------------------------------------------------------------


def test_num_parameters_counts_frozen_parameters_by_default(toy_model: torch.nn.Module) -> None:
    total = sum(p.numel() for p in toy_model.parameters())
    toy_model.get_input_embeddings().weight.requires_grad_(False)
    assert toy_model.num_parameters() == total


def test_memory_footprint_counts_parameters_and_buffers_unless_told_not_to(toy_model: torch.nn.Module) -> None:
    params = sum(p.numel() * p.element_size() for p in toy_model.parameters())
    buffers = sum(b.numel() * b.element_size() for b in toy_model.buffers())
    assert buffers > 0  # the toy's blocks hold a (non-persistent) scale buffer each
    assert toy_model.get_memory_footprint() == params + buffers
    assert toy_model.get_memory_footprint(return_buffers=True) == params + buffers
    assert toy_model.get_memory_footprint(return_buffers=False) == params
    toy_model.half()
    assert toy_model.get_memory_footprint(return_buffers=False) == params // 2


# -- push_to_hub ----------------------------------------------------------------------------------------


def test_push_to_hub_is_refused_with_how_to_upload(toy_model: torch.nn.Module) -> None:
    with pytest.raises(ConfigError, match=r"^push_to_hub=True: microformers does not upload to the Hub\. "):
        toy_model.push_to_hub("me/my-model")


# -- gradient checkpointing -----------------------------------------------------------------------------


class _Inner(modeling_module.PreTrainedModel):
    config_class = PretrainedConfig
    supports_gradient_checkpointing = True

    def __init__(self, config: PretrainedConfig) -> None:
        super().__init__(config)
        self.linear = torch.nn.Linear(3, 3)


class _Outer(modeling_module.PreTrainedModel):
    config_class = PretrainedConfig
    supports_gradient_checkpointing = True

    def __init__(self, config: PretrainedConfig) -> None:
        super().__init__(config)
        self.inner = _Inner(config)


def test_gradient_checkpointing_disable_turns_it_off_everywhere_and_is_harmless_when_off() -> None:
    model = _Outer(PretrainedConfig())
    model.gradient_checkpointing_disable()  # never enabled: nothing to do, no error
    assert not model.is_gradient_checkpointing
    model.gradient_checkpointing_enable()
    assert model.is_gradient_checkpointing and model.inner.is_gradient_checkpointing
    model.gradient_checkpointing_disable()
    assert not model.is_gradient_checkpointing and not model.inner.is_gradient_checkpointing


# -- adapters: every call goes to the adapter plugin's manager, arguments and results unchanged ---------------


class _Manager:
    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.calls: list[tuple[Any, ...]] = []

    def add_adapter(self, config: object, name: str | None) -> None:
        self.calls.append(("add", config, name))

    def __getattr__(self, method: str) -> Callable[..., Any]:
        if method.startswith("_"):
            raise AttributeError(method)

        def record(*args: Any, **kwargs: Any) -> tuple[Any, ...]:
            self.calls.append((method, args, kwargs))
            return (method, args, kwargs)

        return record


def test_each_adapter_method_is_handed_to_the_manager_with_its_arguments(
    toy_model: torch.nn.Module, isolated_registry: Callable[..., Registry]
) -> None:
    isolated_registry(modeling_module).add("adapters", "LORA", _Manager)
    toy_model.add_adapter({"peft_type": "LORA"}, "a")
    manager = toy_model._adapter_manager
    state = {"w": torch.zeros(1)}
    assert toy_model.active_adapters() == ("active_adapters", (), {})
    assert toy_model.get_adapter_state_dict("a", state) == ("get_adapter_state_dict", ("a", state), {})
    assert toy_model.merge_and_unload(progressbar=False) == ("merge_and_unload", (), {"progressbar": False})
    toy_model.disable_adapters()
    toy_model.enable_adapters()
    toy_model.delete_adapter(["a"])
    toy_model.merge_adapter(["a"])
    toy_model.unmerge_adapter()
    toy_model.print_trainable_parameters()
    assert manager.calls[4:] == [
        ("disable_adapters", (), {}),
        ("enable_adapters", (), {}),
        ("delete_adapter", (["a"],), {}),
        ("merge_adapter", (["a"],), {}),
        ("unmerge_adapter", (), {}),
        ("print_trainable_parameters", (), {}),
    ]


def test_load_adapter_with_a_peft_config_needs_no_folder_and_without_either_is_refused(
    toy_model: torch.nn.Module, isolated_registry: Callable[..., Registry]
) -> None:
    isolated_registry(modeling_module).add("adapters", "LORA", _Manager)
    with pytest.raises(
        ConfigError, match=r"^load_adapter needs the adapter folder, or peft_config= and adapter_state_dict=$"
    ):
        toy_model.load_adapter(adapter_name="a")
    config, state = {"peft_type": "LORA"}, {"w": torch.zeros(1)}
    result = toy_model.load_adapter(adapter_name="a", peft_config=config, adapter_state_dict=state)
    assert result == ("load_adapter", (None, "a"), {"peft_config": config, "adapter_state_dict": state})


class _PeftType(enum.Enum):
    LORA = "LORA"
    IA3 = "IA3"


class _PeftConfig:
    """A peft-style config object (not a mapping): its ``peft_type`` is an enum whose value names the type."""

    def __init__(self, peft_type: _PeftType) -> None:
        self.peft_type = peft_type


def test_an_adapter_config_object_picks_the_manager_by_its_peft_type_value_and_is_handed_on(
    toy_model: torch.nn.Module, isolated_registry: Callable[..., Registry]
) -> None:
    isolated_registry(modeling_module).add("adapters", "LORA", _Manager)
    config = _PeftConfig(_PeftType.LORA)
    toy_model.add_adapter(config, "a")
    assert toy_model._adapter_manager.calls == [("add", config, "a")]
    assert toy_model._adapter_manager.model is toy_model


def test_an_adapter_type_no_plugin_provides_is_named_in_the_error(
    toy_model: torch.nn.Module, isolated_registry: Callable[..., Registry]
) -> None:
    isolated_registry(modeling_module).add("adapters", "LORA", _Manager)
    with pytest.raises(Exception, match=r"^No installed plugin provides adapter type \(peft_type\) 'IA3'\. "):
        toy_model.add_adapter(_PeftConfig(_PeftType.IA3), "a")
    assert "_adapter_manager" not in toy_model.__dict__
    with pytest.raises(Exception, match=r"^No installed plugin provides adapter type \(peft_type\) 'None'\. "):
        toy_model.add_adapter(object(), "a")  # no peft_type at all


def test_a_malformed_adapter_config_is_named_as_such(
    toy_model: torch.nn.Module, isolated_registry: Callable[..., Registry], tmp_path: Path
) -> None:
    isolated_registry(modeling_module).add("adapters", "LORA", _Manager)
    (tmp_path / "adapter_config.json").write_text("{not json")
    with pytest.raises(ConfigError, match=r"adapter_config\.json \(adapter configuration\) is not valid JSON"):
        toy_model.load_adapter(tmp_path, "a")


# -- from_config, gradient_checkpointing_enable ------------------------------------------------------------


def test_from_config_takes_dtype_or_torch_dtype_and_attn_implementation(toy_model: torch.nn.Module) -> None:
    cls, config = type(toy_model), toy_model.config
    assert {p.dtype for p in cls.from_config(config).parameters()} == {torch.float32}
    assert type(cls.from_config(config, attn_implementation=None)) is cls  # None: the default, as in the reference
    assert {p.dtype for p in cls.from_config(config, dtype="bfloat16").parameters()} == {torch.bfloat16}
    assert {p.dtype for p in cls.from_config(config, torch_dtype=torch.float16).parameters()} == {torch.float16}
    model = cls.from_config(config, attn_implementation="eager")
    assert model.config._attn_implementation == "eager"
    with pytest.raises(Exception, match=r"attention implementation \(attn_implementation\) 'nope'") as info:
        cls.from_config(config, attn_implementation="nope")
    assert re.search(r"Installed: (.*, )?eager, sdpa\b", str(info.value))  # the registered ones are listed


def test_from_config_refuses_other_arguments_naming_them(toy_model: torch.nn.Module) -> None:
    with pytest.raises(
        ConfigError, match=r"^from_config\(\) does not take hidden_size, num_layers; set such values on the config$"
    ):
        type(toy_model).from_config(toy_model.config, num_layers=2, hidden_size=8)


def test_gradient_checkpointing_enable_refuses_a_model_without_support(toy_model: torch.nn.Module) -> None:
    with pytest.raises(ConfigError, match=r"^ToyForCausalLM does not support gradient checkpointing$"):
        toy_model.gradient_checkpointing_enable()


def test_gradient_checkpointing_hands_its_options_to_torch_checkpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch.utils.checkpoint

    seen: list[dict[str, Any]] = []

    def recording(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:  # records, then runs the layer once
        seen.append(kwargs)
        return fn(*args)

    monkeypatch.setattr(torch.utils.checkpoint, "checkpoint", recording)
    model = _Outer(PretrainedConfig()).train()
    hidden = torch.randn(2, 3)
    model.gradient_checkpointing_enable()
    torch.testing.assert_close(model.inner._call_layer(model.inner.linear, hidden), model.inner.linear(hidden))
    model.gradient_checkpointing_enable({"use_reentrant": True, "preserve_rng_state": False})
    torch.testing.assert_close(model._call_layer(model.inner.linear, hidden), model.inner.linear(hidden))
    assert seen == [{"use_reentrant": False}, {"use_reentrant": True, "preserve_rng_state": False}]


# -- loading: which missing tensors are errors --------------------------------------------------------------


class _Flat(modeling_module.PreTrainedModel):
    """No base-model prefix; a top-level parameter, a submodule and a persistent buffer."""

    config_class = PretrainedConfig

    def __init__(self, config: PretrainedConfig) -> None:
        super().__init__(config)
        self.scale = torch.nn.Parameter(torch.ones(3))
        self.inner = torch.nn.Linear(3, 3)
        self.register_buffer("table", torch.arange(3.0))
        self.post_init()


def test_a_missing_top_level_parameter_or_persistent_buffer_is_an_error_unless_not_strict(tmp_path: Path) -> None:
    model = _Flat(PretrainedConfig())
    model.save_pretrained(tmp_path, state_dict={k: v for k, v in model.state_dict().items() if k.startswith("inner.")})
    with pytest.raises(CheckpointError, match=r"is missing 2 tensor\(s\) the model needs: scale, table\. "):
        _Flat.from_pretrained(tmp_path, config=PretrainedConfig())
    loaded, info = _Flat.from_pretrained(tmp_path, config=PretrainedConfig(), strict=False, output_loading_info=True)
    assert info["missing_keys"] == ["scale", "table"]
    torch.testing.assert_close(loaded.inner.weight, model.inner.weight)


def test_a_base_model_missing_its_own_tensors_is_an_error_but_a_head_model_missing_its_head_is_not(
    toy_model: torch.nn.Module, tmp_path: Path
) -> None:
    from microformers_test_toy.modeling_toy import ToyConfig, ToyForCausalLM, ToyModel

    config = ToyConfig(vocab_size=40, hidden_size=24, num_layers=2, tie_word_embeddings=False)
    base = ToyModel(config)
    state = base.state_dict()
    base.save_pretrained(tmp_path / "base")
    base.save_pretrained(tmp_path / "holed", state_dict={k: v for k, v in state.items() if k != "blocks.1.proj.weight"})
    with pytest.raises(CheckpointError, match=r"is missing 1 tensor\(s\) the model needs: blocks\.1\.proj\.weight\. "):
        ToyModel.from_pretrained(tmp_path / "holed")
    head, info = ToyForCausalLM.from_pretrained(tmp_path / "base", output_loading_info=True)  # untied head: new
    assert info["missing_keys"] == ["lm_head.weight"]
    torch.testing.assert_close(head.model.embed.weight, base.embed.weight)
    assert not head.lm_head.weight.is_meta


def test_get_input_embeddings_of_a_model_without_them_says_so() -> None:
    with pytest.raises(NotImplementedError, match=r"^_Flat does not define get_input_embeddings\(\)$"):
        _Flat(PretrainedConfig()).get_input_embeddings()


# -- a format that carries the configuration in its weights file (as GGUF does) ----------------------------


@pytest.fixture
def onefile_folder(toy_model: torch.nn.Module, tmp_path: Path, one_file_format: Any) -> Path:
    config = {"model_type": "toy", "vocab_size": 40, "hidden_size": 24, "num_layers": 3}
    tensors = {k: v.tolist() for k, v in toy_model.state_dict().items() if k != "lm_head.weight"}
    (tmp_path / "model.onefile").write_text(json.dumps({"config": config, "tensors": tensors}))
    return tmp_path


def test_a_format_that_carries_the_config_is_read_with_the_overrides(
    toy_model: torch.nn.Module, onefile_folder: Path
) -> None:
    assert not (onefile_folder / "config.json").exists()
    model = type(toy_model).from_pretrained(onefile_folder, flavour="spicy")
    assert (model.config.hidden_size, model.config.num_layers, model.config.flavour) == (24, 3, "spicy")
    torch.testing.assert_close(model.model.embed.weight, toy_model.model.embed.weight)


def test_a_bad_config_in_the_weights_file_names_that_file(toy_model: torch.nn.Module, onefile_folder: Path) -> None:
    path = onefile_folder / "model.onefile"
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "config": {**data["config"], "id2label": [1]}}))
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))} holds a value ToyConfig cannot use"):
        type(toy_model).from_pretrained(onefile_folder)
    path.write_text(json.dumps({**data, "config": {**data["config"], "num_layers": -2}}))
    with pytest.raises(ConfigError, match=rf"^num_layers=-2 in {re.escape(str(path))} must be a non-negative integer"):
        type(toy_model).from_pretrained(onefile_folder)


def test_a_model_class_without_config_class_needs_a_config(tmp_path: Path) -> None:
    class _NoConfigClass(_Flat):
        config_class = None

    _Flat(PretrainedConfig()).save_pretrained(tmp_path)
    with pytest.raises(
        ConfigError, match=r"^_NoConfigClass has no config_class; pass config=\.\.\. to from_pretrained$"
    ):
        _NoConfigClass.from_pretrained(tmp_path)


def test_config_settings_passed_to_from_pretrained_reach_the_config(
    toy_model: torch.nn.Module, saved_toy: Path
) -> None:
    model = type(toy_model).from_pretrained(saved_toy, flavour="spicy", output_hidden_states=True)
    assert model.config.flavour == "spicy" and model.config.output_hidden_states is True


# -- construction: the config check, meta parameters, tying ------------------------------------------------


def test_a_model_built_from_something_else_than_a_config_says_what_to_build(toy_model: torch.nn.Module) -> None:
    with pytest.raises(
        ConfigError,
        match=r"^ToyForCausalLM\(config\) needs a PretrainedConfig, got dict; build one with ToyConfig\(\.\.\.\)$",
    ):
        type(toy_model)({"vocab_size": 4})

    class _Bare(modeling_module.PreTrainedModel):
        pass

    with pytest.raises(
        ConfigError, match=r"^_Bare\(config\) needs a PretrainedConfig, got str; build one with AutoConfig"
    ):
        _Bare("gpt2")
    model = _Bare(PretrainedConfig(name_or_path="me/bare"))
    assert model.name_or_path == "me/bare" and model.config.name_or_path == "me/bare"


def test_a_loaded_model_knows_where_it_came_from(toy_model: torch.nn.Module, saved_toy: Path) -> None:
    assert type(toy_model).from_pretrained(saved_toy).name_or_path == str(saved_toy)


class _Frozen(modeling_module.PreTrainedModel):
    """A parameter made from values and frozen at construction, beside trainable ones."""

    config_class = PretrainedConfig

    def __init__(self, config: PretrainedConfig) -> None:
        super().__init__(config)
        self.fixed = torch.nn.Parameter(torch.ones(3), requires_grad=False)
        self.norm = torch.nn.LayerNorm(3)
        self.post_init()


def test_loading_keeps_which_parameters_are_trainable(tmp_path: Path) -> None:
    model = _Frozen(PretrainedConfig())
    with torch.no_grad():
        model.fixed.mul_(2.0)
    model.save_pretrained(tmp_path)
    loaded = _Frozen.from_pretrained(tmp_path, config=PretrainedConfig())
    assert {n: p.requires_grad for n, p in loaded.named_parameters()} == {
        "fixed": False,
        "norm.weight": True,
        "norm.bias": True,
    }
    torch.testing.assert_close(loaded.fixed, torch.full((3,), 2.0))


class _Tied(modeling_module.PreTrainedModel):
    """Two tied targets: a nested one, and one whose module the model does not have."""

    config_class = PretrainedConfig
    _tied_weights_keys = {"absent.head.weight": "embed.weight", "out.head.weight": "embed.weight"}

    def __init__(self, config: PretrainedConfig) -> None:
        super().__init__(config)
        self.embed = torch.nn.Embedding(5, 3)
        self.out = torch.nn.Module()
        self.out.head = torch.nn.Linear(3, 5, bias=False)
        self.post_init()


def test_tied_targets_are_tied_at_any_depth_and_an_absent_one_is_skipped() -> None:
    model = _Tied(PretrainedConfig())
    assert model.out.head.weight is model.embed.weight
    assert model.tied_parameter_names() == {"absent.head.weight", "out.head.weight"}
    untied = _Tied(PretrainedConfig(tie_word_embeddings=False))
    assert untied.out.head.weight is not untied.embed.weight
    assert untied.tied_parameter_names() == set()


# -- dtypes ----------------------------------------------------------------------------------------------------


def test_dtype_names_and_objects_and_a_wrong_one(toy_model: torch.nn.Module, saved_toy: Path) -> None:
    cls = type(toy_model)
    assert cls.from_pretrained(saved_toy, dtype=torch.float64).dtype == torch.float64
    toy_model.to(torch.bfloat16).save_pretrained(saved_toy)
    assert cls.from_pretrained(saved_toy).dtype == torch.bfloat16  # "auto": the saved dtype
    assert cls.from_pretrained(saved_toy, dtype="torch.bfloat16").dtype == torch.bfloat16
    assert cls.from_pretrained(saved_toy, dtype=None).dtype == torch.float32
    assert cls.from_pretrained(saved_toy, torch_dtype="float16").dtype == torch.float16
    with pytest.raises(
        ConfigError, match=r"^dtype='float77' is not a torch dtype; use e\.g\. 'float32', 'bfloat16' or 'auto'$"
    ):
        cls.from_config(toy_model.config, dtype="float77")
    with pytest.raises(ConfigError, match=r"^dtype='' is not a torch dtype"):
        cls.from_config(toy_model.config, dtype="")


# -- quantizer choice ------------------------------------------------------------------------------------------


class _StandInQuantizer:
    description = "a stand-in"

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.quant_method = spec["quant_method"]

    def to_dict(self) -> dict[str, Any]:
        return {**self.spec, "checked": True}


class _SpecObject:
    """A quantization config object (as ``BitsAndBytesConfig`` is): not a mapping, has ``to_dict()``."""

    def to_dict(self) -> dict[str, Any]:
        return {"quant_method": "int4", "group_size": 32}


@pytest.fixture
def quantizers(isolated_registry: Callable[..., Registry]) -> Registry:
    fresh = isolated_registry(modeling_module)
    fresh.add("quantizers", "int8", _StandInQuantizer)
    fresh.add("quantizers", "int4", _StandInQuantizer)
    return fresh


def test_no_quantization_asked_means_no_quantizer(quantizers: Registry) -> None:
    config = PretrainedConfig()
    assert modeling_module._quantizer(config) is None
    assert modeling_module._quantizer(config, None, False, False) is None
    assert getattr(config, "quantization_config", None) is None


def test_load_in_flags_pick_their_quantizer_and_say_so(quantizers: Registry, caplog: pytest.LogCaptureFixture) -> None:
    for flag, method in (("load_in_4bit", "int4"), ("load_in_8bit", "int8")):
        config = PretrainedConfig()
        caplog.clear()
        with caplog.at_level("WARNING", logger="microformers"):
            quantizer = modeling_module._quantizer(config, **{flag: True})
        assert quantizer.spec == {"quant_method": method}
        assert config.quantization_config == {"quant_method": method, "checked": True}
        assert [r.getMessage() for r in caplog.records] == [f"{flag}=True: quantizing with '{method}' (a stand-in)"]
    with pytest.raises(ConfigError, match=r"^pass one of quantization_config, load_in_8bit=True or load_in_4bit=True$"):
        modeling_module._quantizer(PretrainedConfig(), {"quant_method": "int8"}, load_in_4bit=True)


def test_a_quantization_config_from_the_argument_or_the_config_file(
    quantizers: Registry, caplog: pytest.LogCaptureFixture
) -> None:
    config = PretrainedConfig()
    with caplog.at_level("WARNING", logger="microformers"):
        quantizer = modeling_module._quantizer(config, _SpecObject())
    assert quantizer.spec == {"quant_method": "int4", "group_size": 32} and not caplog.records  # no flag: no warning
    assert config.quantization_config == {"quant_method": "int4", "group_size": 32, "checked": True}
    saved = PretrainedConfig(quantization_config={"quant_method": "int8", "bits": 8})
    assert modeling_module._quantizer(saved).spec == {"quant_method": "int8", "bits": 8}
    assert modeling_module._quantizer(saved, {"quant_method": "int4"}).spec == {"quant_method": "int4"}  # argument wins


def test_a_quantization_config_without_a_known_method_is_refused(quantizers: Registry) -> None:
    with pytest.raises(
        ConfigError,
        match=r"^quantization_config \{'bits': 4\} has no 'quant_method' \(e\.g\. 'int8', 'int4', 'gguf'\)$",
    ):
        modeling_module._quantizer(PretrainedConfig(), {"bits": 4})
    with pytest.raises(Exception, match=r"^No installed plugin provides quantization method 'int3'\. "):
        modeling_module._quantizer(PretrainedConfig(), {"quant_method": "int3"})


# -- saving --------------------------------------------------------------------------------------------------


def test_a_save_records_class_dtype_and_format_and_writes_one_file_by_default(
    toy_model: torch.nn.Module, tmp_path: Path
) -> None:
    from safetensors import safe_open

    toy_model.to(torch.float16).save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["architectures"] == ["ToyForCausalLM"] and config["dtype"] == "float16"
    with safe_open(tmp_path / "model.safetensors", "pt") as f:
        assert f.metadata() == {"format": "pt"}
        assert "lm_head.weight" not in set(f.keys())  # tied: saved once


def test_save_arguments_not_main_process_push_token_unknown_and_a_file_target(
    toy_model: torch.nn.Module, tmp_path: Path
) -> None:
    toy_model.save_pretrained(tmp_path / "other", is_main_process=False)
    assert not (tmp_path / "other").exists()
    with pytest.raises(ConfigError, match=r"^push_to_hub=True: microformers does not upload"):
        toy_model.save_pretrained(tmp_path / "pushed", push_to_hub=True)
    toy_model.save_pretrained(tmp_path / "tok", token="hf_x", push_to_hub=False)  # token only uploads: ignored
    assert (tmp_path / "tok" / "model.safetensors").is_file()
    with pytest.raises(
        ConfigError, match=r"^save_pretrained\(\) does not take safe, variant2; drop it or check the spelling$"
    ):
        toy_model.save_pretrained(tmp_path / "typo", variant2="x", safe=True)
    (tmp_path / "file").write_text("")
    with pytest.raises(
        ConfigError, match=rf"^save_pretrained: {re.escape(str(tmp_path / 'file'))} is a file; pass a folder$"
    ):
        toy_model.save_pretrained(tmp_path / "file")


def test_a_given_state_dict_is_saved_without_its_tied_copies(toy_model: torch.nn.Module, tmp_path: Path) -> None:
    from safetensors.torch import load_file

    state = {k: torch.zeros_like(v) for k, v in toy_model.state_dict().items()}
    toy_model.save_pretrained(tmp_path / "given", state_dict=state)
    saved = load_file(tmp_path / "given" / "model.safetensors")
    assert set(saved) == set(state) - {"lm_head.weight"} and all(not t.any() for t in saved.values())
    without = {k: v for k, v in state.items() if k != "lm_head.weight"}
    toy_model.save_pretrained(tmp_path / "untied", state_dict=without)  # no tied copy to drop: fine
    assert set(load_file(tmp_path / "untied" / "model.safetensors")) == set(without)


def test_a_save_in_another_format_replaces_the_old_weights(toy_model: torch.nn.Module, tmp_path: Path) -> None:
    toy_model.save_pretrained(tmp_path, safe_serialization=False)
    assert (tmp_path / "pytorch_model.bin").is_file() and not (tmp_path / "model.safetensors").exists()
    toy_model.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").is_file() and not (tmp_path / "pytorch_model.bin").exists()


class _WithExtraFile(_Flat):
    def _save_extra_files(self, folder: Path) -> None:
        (folder / "extra.txt").write_text("hello")


def test_extra_files_of_a_model_are_saved_with_it(tmp_path: Path) -> None:
    _WithExtraFile(PretrainedConfig()).save_pretrained(tmp_path)
    assert (tmp_path / "extra.txt").read_text() == "hello" and (tmp_path / "config.json").is_file()


def test_a_model_with_adapters_saves_them_through_the_manager_with_the_save_arguments(
    toy_model: torch.nn.Module, isolated_registry: Callable[..., Registry], tmp_path: Path
) -> None:
    isolated_registry(modeling_module).add("adapters", "LORA", _Manager)
    toy_model.add_adapter({"peft_type": "LORA"}, "a")
    state = {"w": torch.zeros(1)}
    toy_model.save_pretrained(tmp_path, state_dict=state, safe_serialization=False, max_shard_size="1MB", token="t")
    assert toy_model._adapter_manager.calls[-1] == (
        "save_pretrained",
        (tmp_path,),
        {"state_dict": state, "safe_serialization": False, "max_shard_size": "1MB", "token": "t"},
    )
    assert not (tmp_path / "config.json").exists()


# -- second full run (workspace imod): what the first run did not judge ------------------------------------------


def test_a_model_class_registered_for_an_auto_class_saves_its_code_and_auto_map(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code = tmp_path / "code"
    code.mkdir()
    (code / "modeling_imod_custom.py").write_text(
        "import torch\nfrom microformers import PretrainedConfig, PreTrainedModel\n\n\n"
        "class ImodCustomModel(PreTrainedModel):\n    config_class = PretrainedConfig\n\n"
        "    def __init__(self, config):\n        super().__init__(config)\n"
        "        self.linear = torch.nn.Linear(2, 2)\n        self.post_init()\n"
    )
    monkeypatch.syspath_prepend(str(code))
    from modeling_imod_custom import ImodCustomModel  # type: ignore[import-not-found]

    ImodCustomModel.register_for_auto_class("AutoModelForCausalLM")
    ImodCustomModel(PretrainedConfig()).save_pretrained(tmp_path / "saved")
    saved = json.loads((tmp_path / "saved" / "config.json").read_text())
    assert saved["auto_map"] == {"AutoModelForCausalLM": "modeling_imod_custom.ImodCustomModel"}
    assert (tmp_path / "saved" / "modeling_imod_custom.py").read_text() == (
        code / "modeling_imod_custom.py"
    ).read_text()


class _Initialised(modeling_module.PreTrainedModel):
    """Modules whose reference initialisation differs from torch's own."""

    config_class = PretrainedConfig

    def __init__(self, config: PretrainedConfig) -> None:
        super().__init__(config)
        self.linear = torch.nn.Linear(64, 64)
        self.embed = torch.nn.Embedding(8, 64, padding_idx=1)
        self.post_init()


def test_a_fresh_model_gets_the_reference_initialisation_with_the_configs_range() -> None:
    torch.manual_seed(0)
    model = _Initialised(PretrainedConfig(initializer_range=0.5))
    assert abs(model.linear.weight.std().item() - 0.5) < 0.05  # torch's own init would give about 0.07
    assert not model.linear.bias.any()
    assert not model.embed.weight[1].any() and abs(model.embed.weight.std().item() - 0.5) < 0.1


class _Mixed(modeling_module.PreTrainedModel):
    """A trainable linear layer, a frozen float parameter and an integer parameter (e.g. a quantized table)."""

    config_class = PretrainedConfig

    def __init__(self, config: PretrainedConfig) -> None:
        super().__init__(config)
        self.linear = torch.nn.Linear(4, 4)
        self.frozen = torch.nn.Parameter(torch.ones(4), requires_grad=False)
        self.codes = torch.nn.Parameter(torch.arange(4, dtype=torch.int32), requires_grad=False)
        self.post_init()


def test_an_integer_parameter_loads_as_saved_and_frozen(tmp_path: Path) -> None:
    model = _Mixed(PretrainedConfig())
    with torch.no_grad():
        model.codes.add_(3)
    model.save_pretrained(tmp_path)
    loaded = _Mixed.from_pretrained(tmp_path, config=PretrainedConfig(), dtype=torch.bfloat16)
    assert loaded.codes.dtype == torch.int32 and not loaded.codes.requires_grad
    assert loaded.codes.tolist() == [3, 4, 5, 6]
    assert loaded.linear.weight.dtype == torch.bfloat16 and loaded.linear.weight.requires_grad


def test_an_integer_parameter_stored_in_another_dtype_is_cast_to_its_own_as_the_reference_does(
    tmp_path: Path,
) -> None:
    for stored in (torch.tensor([3.0, 4.0, 5.0, 6.0]), torch.tensor([3, 4, 5, 6], dtype=torch.int64)):
        state = {**_Mixed(PretrainedConfig()).state_dict(), "codes": stored}
        _Mixed(PretrainedConfig()).save_pretrained(tmp_path / str(stored.dtype), state_dict=state)
        loaded = _Mixed.from_pretrained(tmp_path / str(stored.dtype), config=PretrainedConfig())
        assert loaded.codes.dtype == torch.int32 and loaded.codes.tolist() == [3, 4, 5, 6]


def test_an_integer_parameter_whose_stored_values_its_dtype_cannot_hold_is_refused(tmp_path: Path) -> None:
    # The reference truncates 3.5 to 3 and wraps 2**40 silently.
    for stored in (torch.tensor([3.5, 4.0, 5.0, 6.0]), torch.tensor([2**40, 4, 5, 6], dtype=torch.int64)):
        state = {**_Mixed(PretrainedConfig()).state_dict(), "codes": stored}
        folder = tmp_path / str(stored.dtype)
        _Mixed(PretrainedConfig()).save_pretrained(folder, state_dict=state)
        with pytest.raises(CheckpointError) as info:
            _Mixed.from_pretrained(folder, config=PretrainedConfig())
        assert str(info.value) == (
            f"tensor 'codes' in {folder / 'model.safetensors'} is stored as {stored.dtype} with values that "
            "torch.int32, the dtype of the model's 'codes', cannot hold exactly; the checkpoint is corrupt or was "
            "converted wrongly. Re-save it with torch.int32 values."
        )


class _Bytes(modeling_module.PreTrainedModel):
    """A persistent uint8 buffer (e.g. packed quantized weights)."""

    config_class = PretrainedConfig

    def __init__(self, config: PretrainedConfig) -> None:
        super().__init__(config)
        self.register_buffer("packed", torch.zeros(2, dtype=torch.uint8))
        self.post_init()


def test_signed_values_stored_for_an_unsigned_buffer_load_only_when_they_are_not_negative(tmp_path: Path) -> None:
    _Bytes(PretrainedConfig()).save_pretrained(
        tmp_path / "ok", state_dict={"packed": torch.tensor([1, 2], dtype=torch.int8)}
    )
    loaded = _Bytes.from_pretrained(tmp_path / "ok", config=PretrainedConfig())
    assert loaded.packed.dtype == torch.uint8 and loaded.packed.tolist() == [1, 2]
    state = {"packed": torch.tensor([-1, 2], dtype=torch.int8)}  # -1 would wrap to 255
    _Bytes(PretrainedConfig()).save_pretrained(tmp_path / "bad", state_dict=state)
    with pytest.raises(CheckpointError, match="stored as torch.int8 with values that torch.uint8"):
        _Bytes.from_pretrained(tmp_path / "bad", config=PretrainedConfig())


def test_missing_parameters_are_made_in_the_load_dtype_keeping_their_kind_and_trainability(tmp_path: Path) -> None:
    _Mixed(PretrainedConfig()).save_pretrained(tmp_path, state_dict={"linear.bias": torch.zeros(4)})
    loaded, info = _Mixed.from_pretrained(
        tmp_path, config=PretrainedConfig(), dtype=torch.bfloat16, strict=False, output_loading_info=True
    )
    assert info["missing_keys"] == ["frozen", "codes", "linear.weight"]
    kinds = {n: (p.dtype, p.requires_grad, p.is_meta) for n, p in loaded.named_parameters()}
    assert kinds == {
        "linear.weight": (torch.bfloat16, True, False),
        "linear.bias": (torch.bfloat16, True, False),
        "frozen": (torch.bfloat16, False, False),
        "codes": (torch.int32, False, False),
    }


def test_a_persistent_buffer_loads_its_saved_values_in_its_own_dtype(tmp_path: Path) -> None:
    model = _Flat(PretrainedConfig())
    model.table.add_(10.0)
    model.save_pretrained(tmp_path)
    loaded = _Flat.from_pretrained(tmp_path, config=PretrainedConfig(), dtype=torch.bfloat16)
    # exact: a save/load round trip copies bytes (small integers)
    assert loaded.table.dtype == torch.float32 and loaded.table.tolist() == [10.0, 11.0, 12.0]
    assert "table" in dict(loaded.named_buffers()) and loaded.scale.dtype == torch.bfloat16


# -- check_declared_sizes: config sizes the checkpoint's tensors cannot back ---------------------------------


class _Shapes:
    """A checkpoint format that reports its tensors' shapes without loading them."""

    def __init__(self, shapes: dict[str, tuple[int, ...]]) -> None:
        self._shapes = shapes

    def shapes(self, files: list[Path]) -> dict[str, tuple[int, ...]]:
        return self._shapes


_TWO_LAYERS = {"model.layers.0.w": (8, 4), "model.layers.1.w": (8, 4), "lm_head.weight": (10, 8)}
_CORRUPT = "The configuration is corrupt or belongs to another checkpoint; fix the value or use the matching files."


def _refusal(config: PretrainedConfig, fmt: object, files: list[Path], strict: bool = True) -> str | None:
    try:
        modeling_module.check_declared_sizes(config, fmt, files, strict)
    except ConfigError as exc:
        return str(exc)
    return None


def test_declared_layer_counts_may_exceed_the_checkpoints_layers_by_at_most_64(tmp_path: Path) -> None:
    files, fmt = [tmp_path / "model.safetensors"], _Shapes(_TWO_LAYERS)
    source = tmp_path / "config.json"
    for field in ("num_hidden_layers", "num_layers", "n_layer"):
        assert _refusal(PretrainedConfig(**{field: 66}), fmt, files) is None
        assert _refusal(PretrainedConfig(**{field: 67}), fmt, files) == (
            f"{field}=67 in {source} does not match the weights: its tensors have layer indices up to 1. {_CORRUPT}"
        )
    # strict=False: only the absolute limit
    assert _refusal(PretrainedConfig(num_hidden_layers=4096), fmt, files, strict=False) is None
    assert _refusal(PretrainedConfig(num_hidden_layers=4097), fmt, files, strict=False) == (
        f"num_hidden_layers=4097 in {source} does not match the weights: at most 4096. {_CORRUPT}"
    )
    # no layer index in any tensor name: up to 64 layers
    no_layers = _Shapes({"embed.weight": (10, 8)})
    assert _refusal(PretrainedConfig(num_layers=64), no_layers, files) is None
    assert _refusal(PretrainedConfig(num_layers=65), no_layers, files) == (
        f"num_layers=65 in {source} does not match the weights: its tensors have layer indices up to -1. {_CORRUPT}"
    )


def test_declared_sizes_without_shape_information_are_bounded_only_for_layers(tmp_path: Path) -> None:
    files, fmt = [tmp_path / "model.safetensors"], object()  # a format that cannot list shapes
    assert _refusal(PretrainedConfig(num_layers=4096, hidden_size=10**9), fmt, files) is None
    assert _refusal(PretrainedConfig(n_layer=4097), fmt, files) == (
        f"n_layer=4097 in {tmp_path / 'config.json'} does not match the weights: at most 4096. {_CORRUPT}"
    )


def test_declared_dimensions_may_not_exceed_the_largest_tensor_dimension(tmp_path: Path) -> None:
    files, fmt = [tmp_path / "model.safetensors"], _Shapes(_TWO_LAYERS)
    fields = (
        "hidden_size",
        "intermediate_size",
        "vocab_size",
        "head_dim",
        "num_attention_heads",
        "num_key_value_heads",
    )
    for field in fields:
        assert _refusal(PretrainedConfig(**{field: 10}), fmt, files) is None
        assert _refusal(PretrainedConfig(**{field: 0}), fmt, files) is None
        assert _refusal(PretrainedConfig(**{field: 11}), fmt, files) == (
            f"{field}=11 in {tmp_path / 'config.json'} does not match the weights: the largest tensor dimension in "
            f"the checkpoint is 10. {_CORRUPT}"
        )


def test_declared_sizes_must_be_non_negative_integers(tmp_path: Path) -> None:
    files, fmt = [tmp_path / "model.safetensors"], _Shapes(_TWO_LAYERS)
    for value in (-1, True, 2.0, "4"):
        assert _refusal(PretrainedConfig(num_key_value_heads=value), fmt, files) == (
            f"num_key_value_heads={value!r} in {tmp_path / 'config.json'} must be a non-negative integer; fix the file"
        )


# -- _materialise: shapes, kinds, what is missing or unused, and where it is reported ---------------------


def _save_state(folder: Path, state: dict[str, torch.Tensor], safe: bool = True, sharded: bool = False) -> Path:
    """Saves ``state``; returns the file that holds ``scale``."""
    _Flat(PretrainedConfig()).save_pretrained(
        folder, state_dict=state, safe_serialization=safe, max_shard_size=40 if sharded else "50GB"
    )
    if sharded:
        weight_map = json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"]
        assert len(set(weight_map.values())) > 1
        return folder / weight_map["scale"]
    return folder / ("model.safetensors" if safe else "pytorch_model.bin")


def _flat_state(**changes: torch.Tensor) -> dict[str, torch.Tensor]:
    return {**_Flat(PretrainedConfig()).state_dict(), **changes}


def test_a_tensor_of_the_wrong_shape_is_refused_naming_file_and_shapes_or_reinitialised(tmp_path: Path) -> None:
    state = _flat_state(scale=torch.ones(4))
    for safe, sharded in ((True, False), (True, True), (False, False)):  # safetensors names the tensor's own file
        file = _save_state(tmp_path / f"{safe}{sharded}", state, safe, sharded)
        with pytest.raises(Exception) as info:
            _Flat.from_pretrained(file.parent, config=PretrainedConfig())
        assert str(info.value) == (
            f"tensor 'scale' in {file} has shape (4,), but the model built from config.json expects (3,) for it. "
            "The config does not match the weights; fix config.json, or pass ignore_mismatched_sizes=True to "
            "re-initialise this tensor."
        )
    loaded, info = _Flat.from_pretrained(
        tmp_path / "TrueFalse", config=PretrainedConfig(), ignore_mismatched_sizes=True, output_loading_info=True
    )
    assert info == {"missing_keys": ["scale"], "unexpected_keys": [], "mismatched_keys": [("scale", (4,), (3,))]}
    assert loaded.scale.shape == (3,) and not loaded.scale.is_meta
    torch.testing.assert_close(loaded.state_dict()["inner.weight"], state["inner.weight"])  # the rest still loads
    torch.testing.assert_close(loaded.state_dict()["table"], state["table"])


def test_integers_stored_for_a_floating_point_parameter_are_refused_naming_the_file(tmp_path: Path) -> None:
    for safe, sharded in ((True, False), (True, True), (False, False)):
        file = _save_state(tmp_path / f"{safe}{sharded}", _flat_state(scale=torch.arange(3)), safe, sharded)
        with pytest.raises(CheckpointError) as info:
            _Flat.from_pretrained(file.parent, config=PretrainedConfig())
        assert str(info.value) == (
            f"tensor 'scale' in {file} is stored as torch.int64, but the model's 'scale' holds floating-point "
            "values; the checkpoint is corrupt or was converted wrongly. Re-save it with floating-point weights."
        )


class _Wide(modeling_module.PreTrainedModel):
    """Twenty-one small parameters: more than the messages list."""

    config_class = PretrainedConfig

    def __init__(self, config: PretrainedConfig) -> None:
        super().__init__(config)
        for i in range(21):
            self.register_parameter(f"p{i:02d}", torch.nn.Parameter(torch.ones(2)))
        self.post_init()


def test_the_missing_tensor_error_lists_eight_names_and_counts_the_rest(tmp_path: Path) -> None:
    state = _Wide(PretrainedConfig()).state_dict()
    for kept, suffix in ((13, ""), (12, " and 1 more")):
        folder = tmp_path / str(kept)
        _Wide(PretrainedConfig()).save_pretrained(folder, state_dict=dict(list(state.items())[:kept]))
        shown = ", ".join(f"p{i:02d}" for i in range(kept, kept + 8))
        with pytest.raises(CheckpointError) as info:
            _Wide.from_pretrained(folder, config=PretrainedConfig())
        assert str(info.value) == (
            f"checkpoint {folder / 'model.safetensors'} is missing {21 - kept} tensor(s) the model needs: {shown}"
            f"{suffix}. The checkpoint is incomplete or for a different architecture; pass strict=False to "
            "initialise them randomly instead."
        )


def test_unused_and_newly_initialised_weights_are_logged_twenty_at_most_and_returned_in_full(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state = {f"extra{i:02d}": torch.zeros(1) for i in range(21)}
    file = _save_state(tmp_path, state)
    with caplog.at_level("WARNING", logger="microformers"):
        _, info = _Wide.from_pretrained(tmp_path, config=PretrainedConfig(), strict=False, output_loading_info=True)
    names = [f"p{i:02d}" for i in range(21)]
    assert info == {"missing_keys": names, "unexpected_keys": sorted(state), "mismatched_keys": []}
    assert [r.getMessage() for r in caplog.records] == [
        f"Unused weights in {file}: " + ", ".join(sorted(state)[:20]),
        f"Newly initialised weights (not in {file}): " + ", ".join(names[:20]),
    ]


def test_a_sharded_checkpoint_is_reported_by_its_folder(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    model = _Wide(PretrainedConfig())
    state = {**dict(list(model.state_dict().items())[:20]), "unused": torch.zeros(1)}
    model.save_pretrained(tmp_path, state_dict=state, max_shard_size=40)
    assert len(list(tmp_path.glob("*.safetensors"))) > 1
    with caplog.at_level("WARNING", logger="microformers"):
        _Wide.from_pretrained(tmp_path, config=PretrainedConfig(), strict=False)
    assert [r.getMessage() for r in caplog.records] == [
        f"Unused weights in {tmp_path}: unused",
        f"Newly initialised weights (not in {tmp_path}): p20",
    ]
    with pytest.raises(CheckpointError, match=rf"^checkpoint {re.escape(str(tmp_path))} is missing 1 tensor"):
        _Wide.from_pretrained(tmp_path, config=PretrainedConfig())


class _Lenient(_Wide):
    _keys_to_ignore_on_load_missing = [r"^p0[0-4]$"]
    _keys_to_ignore_on_load_unexpected = [r"^old\."]


def test_keys_the_model_ignores_are_neither_reported_nor_errors(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state = {**dict(list(_Wide(PretrainedConfig()).state_dict().items())[5:]), "old.a": torch.zeros(1)}
    state["new.b"] = torch.zeros(1)
    file = _save_state(tmp_path, state)
    with caplog.at_level("WARNING", logger="microformers"):
        loaded, info = _Lenient.from_pretrained(tmp_path, config=PretrainedConfig(), output_loading_info=True)
    assert info == {"missing_keys": [], "unexpected_keys": ["new.b"], "mismatched_keys": []}
    assert [r.getMessage() for r in caplog.records] == [f"Unused weights in {file}: new.b"]
    assert not loaded.p00.is_meta


def test_weights_missing_from_the_checkpoint_get_the_reference_initialisation(tmp_path: Path) -> None:
    _Initialised(PretrainedConfig()).save_pretrained(tmp_path, state_dict={"embed.weight": torch.zeros(8, 64)})
    torch.manual_seed(0)
    config = PretrainedConfig(initializer_range=0.5)
    loaded = _Initialised.from_pretrained(tmp_path, config=config, strict=False)
    assert abs(loaded.linear.weight.std().item() - 0.5) < 0.05 and not loaded.linear.bias.any()
    assert not loaded.embed.weight.any()  # loaded, not initialised


class _HeadFirst(modeling_module.PreTrainedModel):
    """The tied head is registered before the embedding it shares its weight with, and before other layers."""

    config_class = PretrainedConfig
    _tied_weights_keys = {"head.weight": "embed.weight"}

    def __init__(self, config: PretrainedConfig) -> None:
        super().__init__(config)
        self.head = torch.nn.Linear(3, 5, bias=False)
        self.embed = torch.nn.Embedding(5, 3)
        self.norm = torch.nn.LayerNorm(3)
        self.post_init()


def test_a_tied_weight_listed_first_does_not_stop_the_others_loading(tmp_path: Path) -> None:
    model = _HeadFirst(PretrainedConfig())
    with torch.no_grad():
        model.norm.weight.fill_(3.0)
    model.save_pretrained(tmp_path)
    loaded = _HeadFirst.from_pretrained(tmp_path, config=PretrainedConfig())
    torch.testing.assert_close(loaded.embed.weight, model.embed.weight)
    torch.testing.assert_close(loaded.norm.weight, model.norm.weight)
    assert loaded.head.weight is loaded.embed.weight


def test_a_buffer_stored_in_another_float_dtype_is_cast_to_the_models(tmp_path: Path) -> None:
    _save_state(tmp_path, _flat_state(table=torch.tensor([1.5, 2.5, 3.5], dtype=torch.float16)))
    loaded = _Flat.from_pretrained(tmp_path, config=PretrainedConfig())
    # exact: float16 to float32 is exact
    assert loaded.table.dtype == torch.float32 and loaded.table.tolist() == [1.5, 2.5, 3.5]


def test_inside_meta_parameters_uninitialised_and_random_tensors_take_no_memory() -> None:
    with modeling_module.meta_parameters():
        empty, noise, layer = torch.empty(2, 3), torch.randn(4), torch.nn.Linear(2, 2)
        values = torch.ones(2)
    assert empty.is_meta and noise.is_meta and layer.weight.is_meta and layer.bias.is_meta
    assert not values.is_meta and not torch.empty(2).is_meta  # made from values / outside the block: real
