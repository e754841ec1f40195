"""Bounded sizes: construction on meta allocates nothing and patches nothing other threads see; declared sizes
that the checkpoint's tensors cannot back are refused before anything is built."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
import torch
from torch import nn

import microformers
from microformers.errors import ConfigError
from microformers.modeling import meta_parameters

from ._build import llama_folder, llama_gguf, patch_gguf_u32


def test_meta_construction_is_thread_local() -> None:
    entered, release = threading.Event(), threading.Event()
    built: list[nn.Module] = []

    def construct() -> None:
        with meta_parameters():
            entered.set()
            release.wait(10)
            built.append(nn.Linear(8, 8))

    originals = (nn.Module.register_parameter, nn.init.normal_, nn.init.kaiming_uniform_)
    worker = threading.Thread(target=construct)
    worker.start()
    try:
        assert entered.wait(10)
        # while the other thread is inside meta_parameters, this thread builds and initialises real modules
        assert (nn.Module.register_parameter, nn.init.normal_, nn.init.kaiming_uniform_) == originals
        real = nn.Linear(8, 8)
        assert real.weight.device.type == "cpu" and real.weight.abs().sum() > 0
        nn.init.ones_(real.weight)
        assert torch.equal(real.weight, torch.ones(8, 8))
    finally:
        release.set()
        worker.join()
    assert built[0].weight.is_meta


def test_meta_construction_allocates_no_parameter_memory() -> None:
    # 2**40 float32 values per matrix: any real allocation (even lazy) of these would fail or take minutes
    with meta_parameters():
        huge = nn.Sequential(nn.Embedding(2**20, 2**20), nn.Linear(2**20, 2**20), nn.LayerNorm(2**20))
    assert all(p.is_meta for p in huge.parameters())


@pytest.mark.parametrize(
    "field, value",
    [
        ("num_hidden_layers", 10**6),
        ("hidden_size", 10**9),
        ("intermediate_size", 10**9),
        ("vocab_size", 10**9),
        ("head_dim", 10**9),
        ("num_attention_heads", 10**8),
        ("num_hidden_layers", -1),
        ("hidden_size", "32"),
    ],
)
def test_declared_sizes_the_tensors_cannot_back_are_refused(tmp_path: Path, field: str, value: object) -> None:
    folder = llama_folder(tmp_path / "m")
    config = json.loads((folder / "config.json").read_text())
    config[field] = value
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError) as info:
        microformers.AutoModelForCausalLM.from_pretrained(folder)
    assert field in str(info.value) and str(folder / "config.json") in str(info.value)


def test_a_few_missing_layers_still_get_the_missing_tensor_error(tmp_path: Path) -> None:
    folder = llama_folder(tmp_path / "m")
    config = json.loads((folder / "config.json").read_text())
    config["num_hidden_layers"] = 3
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(microformers.CheckpointError, match=r"model\.layers\.2\."):
        microformers.AutoModelForCausalLM.from_pretrained(folder)


@pytest.mark.parametrize(
    "key, value",
    [
        ("llama.block_count", 10**6),
        ("llama.embedding_length", 10**9),
        ("llama.feed_forward_length", 10**9),
        ("llama.attention.head_count", 2**20),
        ("llama.rope.dimension_count", 10**6),
    ],
)
def test_gguf_sizes_that_disagree_with_the_tensors_are_refused(tmp_path: Path, key: str, value: int) -> None:
    good = llama_gguf(tmp_path / "good.gguf")
    microformers.AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file="good.gguf")  # the unpatched file loads
    (tmp_path / "bad.gguf").write_bytes(patch_gguf_u32(good.read_bytes(), key, value))
    with pytest.raises(ConfigError) as info:
        microformers.AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file="bad.gguf")
    message = str(info.value)
    assert str(tmp_path / "bad.gguf") in message and "config.json" not in message
    assert key.split(".", 1)[1].split(".")[-1] in message or key in message


def test_config_errors_of_a_gguf_checkpoint_name_the_gguf_file(tmp_path: Path) -> None:
    llama_gguf(tmp_path / "m.gguf", strings={"llama.rope.scaling.type": "bogus"})
    for load in (microformers.AutoConfig.from_pretrained, microformers.AutoModelForCausalLM.from_pretrained):
        with pytest.raises(ConfigError) as info:
            load(tmp_path, gguf_file="m.gguf")
        assert str(tmp_path / "m.gguf") in str(info.value) and "config.json" not in str(info.value)


def test_buffers_made_with_uninitialised_or_random_factories_keep_their_values(tmp_path: Path) -> None:
    """Built on meta first; a buffer or tensor attribute that came out on meta makes a second, real build."""
    from microformers import PretrainedConfig, PreTrainedModel

    class BufferConfig(PretrainedConfig):
        model_type = "robustness-buffers"

    class BufferModel(PreTrainedModel):
        config_class = BufferConfig

        def __init__(self, config: BufferConfig) -> None:
            super().__init__(config)
            self.lin = nn.Linear(4, 4)
            self.register_buffer("noise", torch.randn(4), persistent=False)
            self.register_buffer("filled", torch.empty(3).fill_(2.0), persistent=False)
            self.table = torch.empty(2).fill_(5.0)
            self.post_init()

    model = BufferModel(BufferConfig())
    model.save_pretrained(tmp_path / "m")
    loaded = BufferModel.from_pretrained(tmp_path / "m")
    assert not loaded.noise.is_meta and torch.equal(loaded.filled, torch.full((3,), 2.0))
    assert torch.equal(loaded.table, torch.full((2,), 5.0)) and torch.equal(loaded.lin.weight, model.lin.weight)
