"""Values of the wrong type in config.json's quantization_config and in trainer_state.json are clear microformers
errors naming the file or argument, not raw TypeErrors/AttributeErrors from deep inside the loader."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import microformers
from microformers import ConfigError


def tiny_llama_folder(folder: Path, quantization_config: object) -> Path:
    import torch

    torch.manual_seed(0)
    config = microformers.AutoConfig.for_model(
        "llama", vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2
    )
    microformers.AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    data = json.loads((folder / "config.json").read_text())
    data["quantization_config"] = quantization_config
    (folder / "config.json").write_text(json.dumps(data))
    return folder


@pytest.mark.parametrize(
    ("quantization_config", "message"),
    [
        ({"quant_method": 5}, "'quant_method' is 5"),
        ({"quant_method": ["int8"]}, "'quant_method' is \\['int8'\\]"),
        (["int8"], "config.json's quantization_config is a list"),
        ("int8", "config.json's quantization_config is a str"),
    ],
)
def test_a_quantization_config_of_the_wrong_type_names_config_json(
    tmp_path: Path, quantization_config: object, message: str
) -> None:
    folder = tiny_llama_folder(tmp_path / "model", quantization_config)
    with pytest.raises(ConfigError, match=message):
        microformers.AutoModelForCausalLM.from_pretrained(folder)


def test_a_quantization_config_argument_of_the_wrong_type_names_the_argument(tmp_path: Path) -> None:
    folder = tiny_llama_folder(tmp_path / "model", None)
    with pytest.raises(ConfigError, match="the quantization_config argument is a list"):
        microformers.AutoModelForCausalLM.from_pretrained(folder, quantization_config=["int8"])


def test_an_unknown_registry_name_of_any_type_gets_the_registry_error() -> None:
    error = microformers.registry.missing_error("quantizers", 5, what="quantization method")
    assert "quantization method '5'" in str(error)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "is not valid JSON"),
        ("[1, 2]", "holds a list"),
        ("null", "holds a NoneType"),
        (json.dumps({"global_step": 3, "epoch": float("nan")}), "'epoch' is nan"),
        (json.dumps({"global_step": 3, "logging_steps": "often"}), "'logging_steps' is 'often'"),
        (json.dumps({"global_step": 3, "save_steps": 0}), "'save_steps' is 0"),
        (json.dumps({"global_step": 3, "stateful_callbacks": [1]}), "'stateful_callbacks' is \\[1\\]"),
        (json.dumps({"global_step": 3, "is_hyper_param_search": "yes"}), "'is_hyper_param_search' is 'yes'"),
    ],
)
def test_a_damaged_trainer_state_json_is_a_checkpoint_error_naming_it(
    tmp_path: Path, content: str, message: str
) -> None:
    pytest.importorskip("microformers_trainer", reason="the Trainer is the microformers-trainer distribution")
    from microformers_trainer.trainer_callback import TrainerState

    path = tmp_path / "trainer_state.json"
    path.write_text(content)
    with pytest.raises(microformers.CheckpointError, match=message) as caught:
        TrainerState.load_from_json(path)
    assert str(path) in str(caught.value)


def test_a_valid_trainer_state_json_still_loads(tmp_path: Path) -> None:
    pytest.importorskip("microformers_trainer", reason="the Trainer is the microformers-trainer distribution")
    from microformers_trainer.trainer_callback import TrainerState

    path = tmp_path / "trainer_state.json"
    TrainerState(global_step=4, epoch=1.5, logging_steps=2).save_to_json(path)
    state = TrainerState.load_from_json(path)
    assert (state.global_step, state.epoch, state.logging_steps) == (4, 1.5, 2)


@pytest.mark.parametrize(("peft_type", "message"), [(5, "'peft_type' is 5"), (None, "'peft_type' is None")])
def test_an_adapter_config_without_a_peft_type_name_names_the_file(
    tmp_path: Path, peft_type: object, message: str
) -> None:
    model = microformers.AutoModelForCausalLM.from_pretrained(tiny_llama_folder(tmp_path / "model", None))
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"peft_type": peft_type, "r": 2}))
    with pytest.raises(ConfigError, match=message) as caught:
        model.load_adapter(str(adapter))
    assert "adapter_config.json" in str(caught.value)


def test_an_unknown_peft_type_names_the_adapter_file(tmp_path: Path) -> None:
    model = microformers.AutoModelForCausalLM.from_pretrained(tiny_llama_folder(tmp_path / "model", None))
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"peft_type": "NOT_A_TYPE", "r": 2}))
    with pytest.raises(Exception, match="NOT_A_TYPE") as caught:
        model.load_adapter(str(adapter))
    assert "adapter_config.json" in str(caught.value)
