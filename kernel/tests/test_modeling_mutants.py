"""Behaviour of ``microformers.modeling`` that the mutation pass found unasserted (docs/reliability.md)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from microformers import AutoModelForCausalLM, ConfigError, MicroformersError, PretrainedConfig
from microformers import modeling as modeling_module
from microformers.plugins import Registry


def test_a_declared_size_larger_than_the_weights_is_refused_with_the_fix(saved_toy: Path) -> None:
    config_json = saved_toy / "config.json"
    config_json.write_text(json.dumps({**json.loads(config_json.read_text()), "vocab_size": 1_000_000}))
    with pytest.raises(ConfigError) as info:
        AutoModelForCausalLM.from_pretrained(saved_toy)
    message = str(info.value)
    assert message.startswith("vocab_size=1000000 in ") and "does not match the weights" in message
    assert message.endswith(
        "The configuration is corrupt or belongs to another checkpoint; fix the value or use the matching files."
    )


class _Quantizer:
    quant_method = "int8"
    description = "a stand-in"

    def __init__(self, spec: dict) -> None:
        self.spec = spec

    def to_dict(self) -> dict:
        return dict(self.spec)


def test_load_in_8bit_alone_picks_the_int8_quantizer_and_both_flags_are_refused(isolated_registry: Callable[..., Registry]) -> None:
    fresh = isolated_registry(modeling_module)
    fresh.add("quantizers", "int8", _Quantizer)
    config = PretrainedConfig()
    quantizer = modeling_module._quantizer(config, load_in_8bit=True)
    assert isinstance(quantizer, _Quantizer) and config.quantization_config == {"quant_method": "int8"}
    with pytest.raises(ConfigError, match=r"^pass one of quantization_config, load_in_8bit=True or load_in_4bit=True$"):
        modeling_module._quantizer(PretrainedConfig(), load_in_8bit=True, load_in_4bit=True)


def test_from_config_accepts_attn_implementation_none(toy_model: torch.nn.Module) -> None:
    model = type(toy_model).from_config(toy_model.config, attn_implementation=None)  # the reference's default
    assert type(model) is type(toy_model)


# -- second pass: the survivors and "no tests" mutants of the seeded modeling.py sample ----------------


class _BufferFromEmpty(torch.nn.Module):
    """A buffer made with ``torch.empty`` and then filled: it needs real factories, so the meta build falls back."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(3))
        self.register_buffer("table", torch.empty(4).copy_(torch.arange(4.0)), persistent=False)


def test_build_on_meta_builds_again_with_real_factories_when_a_buffer_came_out_on_meta() -> None:
    model = modeling_module.build_on_meta(_BufferFromEmpty)
    assert not model.table.is_meta
    # exact: a copy of constant values
    assert torch.equal(model.table, torch.arange(4.0))


class _Layer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.seen: list[object] = []

    def forward(self, hidden: torch.Tensor, cache: object) -> torch.Tensor:
        self.seen.append(cache)
        return self.linear(hidden).tanh()


class _Stack(modeling_module.PreTrainedModel):
    config_class = PretrainedConfig
    supports_gradient_checkpointing = True

    def __init__(self, config: PretrainedConfig) -> None:
        super().__init__(config)
        self.layer = _Layer()

    def forward(self, hidden: torch.Tensor, cache: object = None) -> torch.Tensor:
        return self._call_layer(self.layer, hidden, cache)


class _Cache:
    def get_seq_length(self) -> int:
        return 0


def test_gradient_checkpointing_recomputes_the_layer_in_backward_without_the_cache() -> None:
    torch.manual_seed(0)
    model = _Stack(PretrainedConfig())
    hidden = torch.randn(2, 4)
    model.train()
    model(hidden, _Cache()).sum().backward()
    plain = [p.grad.clone() for p in model.parameters()]
    assert len(model.layer.seen) == 1 and isinstance(model.layer.seen[0], _Cache)  # no checkpointing: once
    model.zero_grad()
    model.layer.seen.clear()
    model.gradient_checkpointing_enable()
    assert model.is_gradient_checkpointing
    model(hidden, _Cache()).sum().backward()
    assert model.layer.seen == [None, None]  # forward, then recomputed in backward; the cache replaced by None
    for param, expected in zip(model.parameters(), plain):
        torch.testing.assert_close(param.grad, expected)
    model.eval()  # not training: checkpointing does not apply
    model.layer.seen.clear()
    model(hidden, cache := _Cache())
    assert model.layer.seen == [cache]


class _RecordingQuantizer:
    quant_method = "recording"
    description = "records what it is handed"
    prepared: list = []

    def __init__(self, spec: dict) -> None:
        self.spec = spec

    def to_dict(self) -> dict:
        return dict(self.spec)

    def prepare(self, model: torch.nn.Module, fmt: object, files: list, dtype: torch.dtype) -> object:
        _RecordingQuantizer.prepared.append(model)
        return fmt.load(files, dtype=dtype)

    def finish(self, model: torch.nn.Module) -> None:
        _RecordingQuantizer.prepared.append(("finish", model))


def test_a_quantizer_prepares_the_model_being_loaded(saved_toy: Path, monkeypatch: pytest.MonkeyPatch, isolated_registry: Callable[..., Registry]) -> None:
    fresh = isolated_registry(modeling_module)
    fresh.add("quantizers", "recording", _RecordingQuantizer)
    monkeypatch.setattr(_RecordingQuantizer, "prepared", [])
    model = AutoModelForCausalLM.from_pretrained(saved_toy, quantization_config={"quant_method": "recording"})
    assert _RecordingQuantizer.prepared == [model, ("finish", model)]
    assert model.config.quantization_config == {"quant_method": "recording"}


class _AdapterManager:
    """Stands in for an adapter plugin's per-model manager and records every call."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.calls: list[tuple] = []

    def add_adapter(self, config: object, name: str | None) -> None:
        self.calls.append(("add", name))

    def load_adapter(self, peft_model_id: object, adapter_name: str | None, **kwargs: object) -> str:
        self.calls.append(("load", peft_model_id, adapter_name, kwargs))
        return "loaded"

    def save_pretrained(self, save_directory: object, **kwargs: object) -> None:
        self.calls.append(("save", save_directory, sorted(kwargs)))

    def set_adapter(self, name: str) -> None:
        self.calls.append(("set", name))


@pytest.fixture
def adapter_registry(isolated_registry: Callable[..., Registry]) -> Registry:
    fresh = isolated_registry(modeling_module)
    fresh.add("adapters", "LORA", _AdapterManager)
    return fresh


def test_adapters_go_to_one_manager_per_model(toy_model: torch.nn.Module, adapter_registry: Registry, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^No adapter loaded: add one with add_adapter\(config\) or load_adapter"):
        toy_model.set_adapter("a")
    toy_model.add_adapter({"peft_type": "LORA"}, "a")
    manager = toy_model._adapter_manager
    toy_model.add_adapter({"peft_type": "LORA"}, "b")  # the second adapter joins the first one's manager
    toy_model.set_adapter("a")
    assert toy_model._adapter_manager is manager
    toy_model.save_pretrained(tmp_path / "adapter", safe_serialization=True)  # adapter files only
    assert manager.calls == [
        ("add", "a"), ("add", "b"), ("set", "a"),
        ("save", tmp_path / "adapter", ["max_shard_size", "safe_serialization", "state_dict"]),
    ]
    assert not (tmp_path / "adapter" / "config.json").exists()


def test_load_adapter_reads_the_config_with_adapter_kwargs_and_hands_on_every_argument(
    toy_model: torch.nn.Module, adapter_registry: Registry, tmp_path: Path
) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA"}))
    result = toy_model.load_adapter(tmp_path, "mine", adapter_kwargs={"subfolder": "sub"}, device_map="cpu")
    assert result == "loaded"
    assert toy_model._adapter_manager.calls == [
        ("load", tmp_path, "mine", {"adapter_kwargs": {"subfolder": "sub"}, "device_map": "cpu"})
    ]


def test_adapters_without_an_adapter_plugin_name_the_plugin_to_install(
    toy_model: torch.nn.Module, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = modeling_module.registry
    names = registry.names
    monkeypatch.setattr(registry, "names", lambda kind: [] if kind == "adapters" else names(kind))
    with pytest.raises(MicroformersError) as info:
        toy_model.set_adapter("a")
    message = str(info.value)
    assert message.startswith("No installed plugin provides adapter type (peft_type) 'LORA'.")
    assert "pip install microformers-peft" in message


def test_num_parameters_counts_trainable_and_embedding_parameters(toy_model: torch.nn.Module) -> None:
    total = sum(p.numel() for p in toy_model.parameters())
    embedding = toy_model.get_input_embeddings().weight.numel()
    assert toy_model.num_parameters() == total
    assert toy_model.num_parameters(exclude_embeddings=True) == total - embedding
    toy_model.get_input_embeddings().weight.requires_grad_(False)
    assert toy_model.num_parameters(only_trainable=True) == total - embedding


def test_resize_token_embeddings_is_handed_to_the_sdk(toy_model: torch.nn.Module) -> None:
    assert toy_model.resize_token_embeddings() is toy_model.get_input_embeddings()  # nothing asked: unchanged
    with pytest.raises(ConfigError, match=r"ToyForCausalLM has an output head but no set_output_embeddings\(\)$"):
        toy_model.resize_token_embeddings(45, pad_to_multiple_of=8)
