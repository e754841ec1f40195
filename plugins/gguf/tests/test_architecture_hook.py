"""The ``register_gguf_architectures`` hook: a third-party plugin maps its own GGUF files.

``tests/plugins/toygguf`` (installed into .test-plugins) maps ``general.architecture: toy`` files onto
the toy test model; microformers-gguf has no code for it. In-process registrations exercise the
tensor targets no installed architecture uses yet (fused parts, stacked experts, reshapes).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import attrs
import gguf
import numpy as np
import pytest
import torch

import microformers
from microformers import registry
from microformers.errors import CheckpointError, ConfigError
from microformers_gguf.format import GGUF_FORMAT
from microformers_sdk.gguf import Experts, GGUFArchitecture, Meta, Part, Reshape, Target

VOCAB, HIDDEN, LAYERS = 40, 8, 2


def _write(path: Path, arch: str, metadata: dict[str, object], tensors: dict[str, np.ndarray]) -> Path:
    writer = gguf.GGUFWriter(str(path), arch)
    for key, value in metadata.items():
        if isinstance(value, str):
            writer.add_string(key, value)
        else:
            writer.add_uint32(key, int(value))  # type: ignore[arg-type]
    for name, array in tensors.items():
        writer.add_tensor(name, np.ascontiguousarray(array, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _toy_file(path: Path, model: torch.nn.Module, **metadata: object) -> Path:
    """The toy model as the toy plugin's invented converter writes it: norms as 1 + w, proj transposed."""
    tensors = {"embed.weight": model.model.embed.weight.detach().numpy()}
    for i, block in enumerate(model.model.blocks):
        tensors[f"blk.{i}.norm.weight"] = block.norm.weight.detach().numpy() + 1.0
        tensors[f"blk.{i}.norm.bias"] = block.norm.bias.detach().numpy()
        tensors[f"blk.{i}.proj.weight"] = block.proj.weight.detach().numpy().T
        tensors[f"blk.{i}.proj.bias"] = block.proj.bias.detach().numpy()
    return _write(path, "toy", {"toy.width": HIDDEN, "toy.depth": LAYERS, **metadata}, tensors)


@pytest.fixture
def toy_model() -> torch.nn.Module:
    config = microformers.AutoConfig.for_model("toy", vocab_size=VOCAB, hidden_size=HIDDEN, num_layers=LAYERS)
    torch.manual_seed(0)
    model = microformers.AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        for param in model.parameters():
            param.normal_()
    return model


def test_a_third_party_plugin_maps_its_own_architecture(tmp_path: Path, toy_model: torch.nn.Module) -> None:
    assert registry.get("gguf_architectures", "toy").plugin == "toygguf"
    _toy_file(tmp_path / "toy.gguf", toy_model, **{"toy.flavour": "spicy"})
    loaded = microformers.AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file="toy.gguf")
    assert type(loaded).__name__ == "ToyForCausalLM"
    assert (loaded.config.hidden_size, loaded.config.num_layers, loaded.config.vocab_size) == (HIDDEN, LAYERS, VOCAB)
    assert loaded.config.flavour == "spicy"  # set by the mapping's adjust_config
    assert loaded.config.embed_norm == pytest.approx(float(toy_model.model.embed.weight.detach().norm()))
    assert loaded.config.tie_word_embeddings is True
    expected = toy_model.state_dict()
    for name, tensor in loaded.state_dict().items():
        # (w + 1) - 1 rounds in float32; everything else comes back bit for bit
        torch.testing.assert_close(tensor, expected[name], rtol=0, atol=1e-6 if ".norm.weight" in name else 0)
    ids = torch.tensor([[1, 5, 9, 3]])
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, toy_model(ids).logits, rtol=0, atol=1e-5)


def test_third_party_checks_and_required_keys(tmp_path: Path, toy_model: torch.nn.Module) -> None:
    path = _toy_file(tmp_path / "wide.gguf", toy_model, **{"toy.width": HIDDEN * 2})
    with pytest.raises(ConfigError, match=r"toy\.width=16, but embed\.weight has shape \(40, 8\)") as info:
        GGUF_FORMAT.load_config([path])
    assert str(path) in str(info.value)
    bare = _write(tmp_path / "bare.gguf", "toy", {"toy.width": HIDDEN}, {})
    with pytest.raises(ConfigError, match=r"lacks the metadata key 'toy\.depth'"):
        GGUF_FORMAT.load_config([bare])


def test_a_registration_that_is_not_a_mapping_is_refused_naming_the_plugin(tmp_path: Path) -> None:
    path = _write(tmp_path / "odd.gguf", "toy-not-a-mapping", {}, {"embed.weight": np.zeros((4, 4))})
    with pytest.raises(
        CheckpointError,
        match=r"plugin 'toygguf' registered GGUF architecture 'toy-not-a-mapping'.*"
        r"not a microformers_sdk\.gguf\.GGUFArchitecture",
    ):
        GGUF_FORMAT.load_config([path])


@pytest.fixture
def fused_arch() -> Iterator[str]:
    """An in-process mapping onto llama that fuses, splits and reshapes (what MoE and Phi-3 files need)."""
    arch = GGUFArchitecture(
        gguf_name="fusetest",
        model_type="llama",
        architectures=("LlamaForCausalLM",),
        config={"hidden_size": Meta("embedding_length"), "num_hidden_layers": Meta("block_count")},
        tensors={
            "blk.{bid}.q.weight": Part("layer.{bid}.qkv.weight", 0, 3),
            "blk.{bid}.k.weight": Part("layer.{bid}.qkv.weight", 1, 3),
            "blk.{bid}.v.weight": Part("layer.{bid}.qkv.weight", 2, 3),
            "blk.{bid}.exps.weight": Experts("layer.{bid}.experts.{expert}.weight"),
            "blk.{bid}.gate.weight": Target("layer.{bid}.gate.weight", (Reshape((1, -1)),)),
        },
        rope=False,
    )
    registry.add("gguf_architectures", "fusetest", arch)
    yield "fusetest"
    registry._entries.pop(("gguf_architectures", "fusetest"), None)


def test_fused_parts_stacked_experts_and_reshapes(tmp_path: Path, fused_arch: str) -> None:
    rng = np.random.default_rng(0)
    q, k, v = rng.normal(size=(8, 4)), rng.normal(size=(2, 4)), rng.normal(size=(2, 4))
    experts, gate = rng.normal(size=(3, 5, 4)), rng.normal(size=(4,))
    tensors = {
        "blk.0.v.weight": v,
        "blk.0.q.weight": q,
        "blk.0.k.weight": k,
        "blk.0.exps.weight": experts,
        "blk.0.gate.weight": gate,
        "token_embd.weight": rng.normal(size=(6, 4)),
    }
    path = _write(tmp_path / "f.gguf", fused_arch, {"fusetest.embedding_length": 4, "fusetest.block_count": 1}, tensors)
    with pytest.warns(UserWarning, match="token_embd.weight"):  # unmapped tensors are named, not silently dropped
        state = GGUF_FORMAT.load([path])
    assert set(state) == {
        "layer.0.qkv.weight",
        "layer.0.gate.weight",
        *(f"layer.0.experts.{e}.weight" for e in range(3)),
    }
    # exact: F32 tensors are copied (and concatenated), not computed
    assert torch.equal(state["layer.0.qkv.weight"], torch.from_numpy(np.concatenate([q, k, v]).astype(np.float32)))
    for e in range(3):
        # exact: F32 tensors are copied (and concatenated), not computed
        assert torch.equal(state[f"layer.0.experts.{e}.weight"], torch.from_numpy(experts[e].astype(np.float32)))
    assert state["layer.0.gate.weight"].shape == (1, 4)
    shapes = GGUF_FORMAT.shapes([path])
    assert shapes == {name: tuple(t.shape) for name, t in state.items()}

    del tensors["blk.0.k.weight"]
    broken = _write(
        tmp_path / "broken.gguf", fused_arch, {"fusetest.embedding_length": 4, "fusetest.block_count": 1}, tensors
    )
    with pytest.raises(CheckpointError, match=r"'layer\.0\.qkv\.weight' is built from 3 tensors.*blk\.0\.q\.weight"):
        GGUF_FORMAT.load([broken])


def test_an_unmapped_architecture_names_the_distribution_that_maps_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Provider hints are data (providers.json / MICROFORMERS_PROVIDES), as for model types."""
    assert registry.provider_of("gguf_architectures", "gemma3") == "microformers-gemma"
    monkeypatch.setitem(registry.providers, ("gguf_architectures", "mamba"), "microformers-mamba")
    path = _write(tmp_path / "m.gguf", "mamba", {}, {"token_embd.weight": np.zeros((4, 4))})
    with pytest.raises(microformers.UnknownModelTypeError, match=r"'mamba' model.*pip install microformers-mamba"):
        GGUF_FORMAT.load_config([path])


def test_a_tensor_that_does_not_fit_its_transform_names_the_file(tmp_path: Path, fused_arch: str) -> None:
    """A reshape (or rotary split) that the tensor's size cannot satisfy is a ConfigError, not a torch error."""
    tensors = {"blk.0.gate.weight": np.zeros((3, 5))}  # 15 values cannot be reshaped to (2, -1)
    arch = registry.get("gguf_architectures", fused_arch).load()
    odd = attrs.evolve(
        arch, gguf_name="oddtest", tensors={"blk.{bid}.gate.weight": Target("g.weight", (Reshape((2, -1)),))}
    )
    registry.add("gguf_architectures", "oddtest", odd)
    try:
        path = _write(
            tmp_path / "odd.gguf", "oddtest", {"oddtest.embedding_length": 4, "oddtest.block_count": 1}, tensors
        )
        with pytest.raises(ConfigError, match=r"tensor 'blk\.0\.gate\.weight' \(shape \(3, 5\)\) does not fit") as info:
            GGUF_FORMAT.load([path])
        assert str(path) in str(info.value)
    finally:
        registry._entries.pop(("gguf_architectures", "oddtest"), None)
