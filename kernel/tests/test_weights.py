"""Weights: round trips, sharding, no random init on load, bad checkpoints, atomic saves."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch

import microformers
from microformers import CheckpointError, FileMissingError, PluginError, ShapeMismatchError, UnknownModelTypeError
from microformers import weights as weights_module
from microformers.modeling import PreTrainedModel
from microformers.plugins import Registry
from microformers.weights import (
    METADATA_PATTERNS,
    Checkpoint,
    FormatRefused,
    format_arguments,
    formats,
    open_checkpoint,
    resolve_source,
    save_format,
)


def assert_same_state(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for key in sa:
        # exact: a save/load round trip copies bytes
        assert torch.equal(sa[key], sb[key]), key


def test_round_trip_identical_tensors(toy_model, saved_toy):
    loaded = microformers.AutoModelForCausalLM.from_pretrained(saved_toy)
    assert type(loaded) is type(toy_model)
    assert_same_state(toy_model, loaded)
    assert loaded.lm_head.weight is loaded.model.embed.weight  # tied again after load
    files = set(os.listdir(saved_toy)) - {"generation_config.json"}
    assert files == {"config.json", "model.safetensors"}


def test_sharded_save_loads_back(toy_model, tmp_path):
    toy_model.save_pretrained(tmp_path, max_shard_size="2KB")
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    shards = set(index["weight_map"].values())
    assert len(shards) > 2 and all((tmp_path / s).is_file() for s in shards)
    assert "lm_head.weight" not in index["weight_map"]  # tied, saved once
    assert_same_state(toy_model, microformers.AutoModelForCausalLM.from_pretrained(tmp_path))
    # re-saving unsharded removes the stale shards
    toy_model.save_pretrained(tmp_path)
    assert set(os.listdir(tmp_path)) - {"generation_config.json"} == {"config.json", "model.safetensors"}


def test_load_builds_on_meta_and_never_random_inits(saved_toy, monkeypatch):
    from microformers_test_toy.modeling_toy import ToyForCausalLM

    devices_after_construction = []
    original_init = ToyForCausalLM.__init__

    def recording_init(self, config):
        original_init(self, config)
        devices_after_construction.extend(p.device.type for p in self.parameters())

    def forbidden(self, module):
        raise AssertionError("random init during from_pretrained")

    monkeypatch.setattr(ToyForCausalLM, "__init__", recording_init)
    monkeypatch.setattr(PreTrainedModel, "_init_weights", forbidden)
    model = microformers.AutoModelForCausalLM.from_pretrained(saved_toy)
    assert devices_after_construction and set(devices_after_construction) == {"meta"}
    assert all(p.device.type == "cpu" for p in model.parameters())
    # exact: a constant buffer, nothing computed
    assert model.model.blocks[0].scale.item() == 0.5  # buffers are built normally


def test_dtype_auto_and_explicit(toy_model, tmp_path):
    toy_model.to(torch.bfloat16).save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["dtype"] == "bfloat16"
    assert microformers.AutoModelForCausalLM.from_pretrained(tmp_path).dtype == torch.bfloat16
    assert microformers.AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).dtype == torch.float32
    assert microformers.AutoModelForCausalLM.from_pretrained(tmp_path, dtype="float16").dtype == torch.float16
    with pytest.raises(microformers.ConfigError, match="dtype"):
        microformers.AutoModelForCausalLM.from_pretrained(tmp_path, dtype="float77")


def test_base_checkpoint_into_head_model_and_back(toy_model, tmp_path):
    toy_model.model.save_pretrained(tmp_path / "base")
    head = microformers.AutoModelForCausalLM.from_pretrained(tmp_path / "base")
    # exact: a save/load round trip copies bytes
    assert torch.equal(head.model.embed.weight, toy_model.model.embed.weight)
    toy_model.save_pretrained(tmp_path / "full")
    base = microformers.AutoModel.from_pretrained(tmp_path / "full")
    # exact: a save/load round trip copies bytes
    assert torch.equal(base.blocks[0].proj.weight, toy_model.model.blocks[0].proj.weight)


def test_truncated_safetensors(saved_toy):
    path = saved_toy / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"model\.safetensors.*truncated or corrupted"):
        microformers.AutoModelForCausalLM.from_pretrained(saved_toy)


def test_corrupted_safetensors_header(saved_toy):
    path = saved_toy / "model.safetensors"
    data = bytearray(path.read_bytes())
    data[8:20] = b"not json!!!!"
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"model\.safetensors"):
        microformers.AutoModelForCausalLM.from_pretrained(saved_toy)


def test_shape_mismatch_names_tensor(saved_toy):
    config = json.loads((saved_toy / "config.json").read_text())
    config["hidden_size"] = 32
    (saved_toy / "config.json").write_text(json.dumps(config))
    with pytest.raises(ShapeMismatchError, match=r"model\.embed\.weight.*model\.safetensors.*\(40, 24\)"):
        microformers.AutoModelForCausalLM.from_pretrained(saved_toy)


def test_missing_tensor_names_it(toy_model, tmp_path):
    state = {k: v for k, v in toy_model.state_dict().items() if not k.startswith("model.blocks.2.")}
    toy_model.save_pretrained(tmp_path, state_dict=state)
    with pytest.raises(CheckpointError, match=r"missing .*model\.blocks\.2\.proj\.weight"):
        microformers.AutoModelForCausalLM.from_pretrained(tmp_path)
    model = microformers.AutoModelForCausalLM.from_pretrained(tmp_path, strict=False)
    assert model.model.blocks[2].proj.weight.device.type == "cpu"


def test_missing_shard_named_in_index(toy_model, tmp_path):
    toy_model.save_pretrained(tmp_path, max_shard_size="2KB")
    victim = sorted(tmp_path.glob("model-*.safetensors"))[1]
    victim.unlink()
    with pytest.raises(FileMissingError, match=victim.name):
        microformers.AutoModelForCausalLM.from_pretrained(tmp_path)


def test_no_weights_at_all(saved_toy):
    (saved_toy / "model.safetensors").unlink()
    with pytest.raises(FileMissingError, match="no model weights found"):
        microformers.AutoModelForCausalLM.from_pretrained(saved_toy)


def test_interrupted_save_leaves_no_partial_checkpoint(toy_model, tmp_path, monkeypatch):
    from microformers.formats import safetensors_format

    target = tmp_path / "ckpt"
    toy_model.save_pretrained(target)
    before = {p.name: p.read_bytes() for p in target.iterdir()}

    real_save = safetensors_format.SafetensorsFormat.save

    def exploding_save(self, state_dict, folder, max_shard_size, metadata):
        real_save(self, dict(list(state_dict.items())[:2]), folder, max_shard_size, metadata)
        raise KeyboardInterrupt("power cut")

    monkeypatch.setattr(safetensors_format.SafetensorsFormat, "save", exploding_save)
    with torch.no_grad():
        toy_model.model.embed.weight.add_(1.0)
    with pytest.raises(KeyboardInterrupt):
        toy_model.save_pretrained(target, max_shard_size="1KB")
    after = {p.name: p.read_bytes() for p in target.iterdir()}
    assert after == before  # old checkpoint intact, nothing half-written, no temp files left

    fresh = tmp_path / "fresh"
    with pytest.raises(KeyboardInterrupt):
        toy_model.save_pretrained(fresh)
    assert list(fresh.iterdir()) == []


def test_legacy_bin_loads_unless_safetensors_required(toy_model, tmp_path):
    toy_model.config.save_pretrained(tmp_path)
    torch.save(toy_model.state_dict(), tmp_path / "pytorch_model.bin")
    with pytest.raises(FileMissingError, match="use_safetensors=True"):
        microformers.AutoModelForCausalLM.from_pretrained(tmp_path, use_safetensors=True)
    assert_same_state(toy_model, microformers.AutoModelForCausalLM.from_pretrained(tmp_path))
    assert_same_state(toy_model, microformers.AutoModelForCausalLM.from_pretrained(tmp_path, use_safetensors=False))


def test_safetensors_wins_over_legacy_bin(toy_model, tmp_path):
    toy_model.save_pretrained(tmp_path)
    torch.save({k: torch.zeros_like(v) for k, v in toy_model.state_dict().items()}, tmp_path / "pytorch_model.bin")
    assert_same_state(toy_model, microformers.AutoModelForCausalLM.from_pretrained(tmp_path))


def test_model_outputs_behave_like_the_reference():
    from microformers.outputs import ModelOutput

    class CausalLMOutput(ModelOutput):  # as the SDK declares it
        loss: torch.Tensor
        logits: torch.Tensor

    out = CausalLMOutput(logits=torch.ones(1))
    assert out.loss is None and out["logits"] is out.logits and out[0] is out.logits
    assert list(out.keys()) == ["logits"] and len(out.to_tuple()) == 1
    out.loss = torch.zeros(())  # the reference appends a field set later, keeping the original order
    assert list(out.keys()) == ["logits", "loss"] and out[0] is out.logits and out[1] is out.loss
    assert len(out.to_tuple()) == 2 and out["loss"] is out.loss
    both = CausalLMOutput(logits=torch.ones(1), loss=torch.zeros(()))
    assert list(both.keys()) == ["loss", "logits"] and both[0] is both.loss  # field order when given at once
    both.logits = torch.zeros(2)  # setting an attribute updates the dict view and the tuple view
    assert both["logits"].shape == (2,) and both.to_tuple()[1].shape == (2,)


def test_save_pretrained_refuses_arguments_it_does_not_use(toy_model, tmp_path):
    for typo in ({"variant": "fp16"}, {"max_shard_sizes": "1KB"}, {"safe_serialisation": False}):
        with pytest.raises(microformers.ConfigError, match=next(iter(typo))):
            toy_model.save_pretrained(tmp_path / "out", **typo)
    assert not (tmp_path / "out").exists()
    toy_model.save_pretrained(tmp_path / "out", token="unused-without-push_to_hub")
    assert (tmp_path / "out" / "model.safetensors").is_file()


def test_safe_serialization_false_writes_legacy_bin_sharded_and_loads_back(toy_model, tmp_path):
    toy_model.save_pretrained(tmp_path, safe_serialization=False, max_shard_size="2KB")
    index = json.loads((tmp_path / "pytorch_model.bin.index.json").read_text())
    shards = set(index["weight_map"].values())
    assert len(shards) > 2 and all(name.startswith("pytorch_model-000") for name in shards)
    assert "lm_head.weight" not in index["weight_map"]  # tied, saved once
    assert index["metadata"]["total_size"] == sum(
        t.numel() * t.element_size() for k, t in toy_model.state_dict().items() if k != "lm_head.weight"
    )
    for shard in shards:  # plain tensors, readable without running pickled code
        assert all(isinstance(t, torch.Tensor) for t in torch.load(tmp_path / shard, weights_only=True).values())
    loaded = microformers.AutoModelForCausalLM.from_pretrained(tmp_path, use_safetensors=False)
    assert_same_state(toy_model, loaded)


# From test_weights_mutants.py: Behaviour of ``microformers.weights`` that the mutation pass found unasserted
# (docs/reliability.md). The checkpoint-format dispatch is exercised against a private registry holding stand-in
# formats, so priorities, ``selected_by`` arguments, refusals and the messages can be checked one by one.


class Format:
    """A stand-in checkpoint format: finds ``*.<suffix>`` files."""

    def __init__(self, suffix: str, **attributes: Any) -> None:
        self.suffix = suffix
        self.calls: list[dict[str, Any]] = []
        for key, value in attributes.items():
            setattr(self, key, value)

    def find(self, folder: Path, **kwargs: Any) -> list[Path]:
        self.calls.append(kwargs)
        return sorted(folder.glob(f"*.{self.suffix}"))


class Refusing:
    expected = "refusing files"

    def find(self, folder: Path, **kwargs: Any) -> list[Path]:
        raise FormatRefused(f"{folder.name} holds refused files; pass allow=True.")


@pytest.fixture
def reg(monkeypatch: pytest.MonkeyPatch) -> Registry:
    registry = Registry()
    registry._discovered = True  # only what a test adds
    monkeypatch.setattr(weights_module, "registry", registry)
    return registry


def test_formats_are_ordered_by_priority_and_loaded(reg: Registry) -> None:
    low, high, none = Format("a"), Format("b"), Format("c")
    reg.add("checkpoint_formats", "low", low, priority=1)
    reg.add("checkpoint_formats", "high", high, priority="5")
    reg.add("checkpoint_formats", "none", none)
    reg.add("checkpoint_formats", "negative", Format("d"), priority=-2)
    assert [(r.name, type(f).__name__) for r, f in formats()][:3] == [
        ("high", "Format"),
        ("low", "Format"),
        ("none", "Format"),
    ]
    assert [r.name for r, _ in formats()] == ["high", "low", "none", "negative"]
    assert formats()[0][1] is high


def test_format_arguments_are_the_union(reg: Registry) -> None:
    reg.add("checkpoint_formats", "x", Format("x", arguments=("gguf_file", "other")))
    reg.add("checkpoint_formats", "y", Format("y", arguments=["use_x"]))
    reg.add("checkpoint_formats", "z", Format("z"))
    assert format_arguments() == {"gguf_file", "other", "use_x"}


def test_aliases_resolve_unless_a_path_exists(reg: Registry, tmp_path: Path) -> None:
    target = tmp_path / "real"
    reg.add("model_sources", "my-alias", lambda: (target, {"revision": "a", "dtype": "x"}))
    path, kwargs = resolve_source("my-alias", {"dtype": "mine"})
    assert path == target and kwargs == {"revision": "a", "dtype": "mine"}
    path, kwargs = resolve_source(Path("my-alias"), {})
    assert path == target and kwargs == {"revision": "a", "dtype": "x"}
    assert resolve_source("unknown-alias", {"a": 1}) == ("unknown-alias", {"a": 1})
    existing = tmp_path / "my-alias"
    existing.mkdir()
    reg.add("model_sources", str(existing), lambda: (target, {}))
    assert resolve_source(existing, {}) == (existing, {})
    assert resolve_source(5, {}) == (5, {})


def test_open_checkpoint_splits_arguments_and_honours_selected_by(reg: Registry, tmp_path: Path) -> None:
    plain = Format("safetensors")
    chosen = Format("gguf", arguments=("gguf_file",), selected_by=("gguf_file",))
    flagged = Format("bin", arguments=("use_bin", "bin_opt"), selected_by=("use_bin",))
    reg.add("checkpoint_formats", "plain", plain, priority=10)
    reg.add("checkpoint_formats", "chosen", chosen)
    reg.add("checkpoint_formats", "flagged", flagged)
    ckpt, rest = open_checkpoint(tmp_path, {"gguf_file": "m.gguf", "revision": "main", "dtype": "x"})
    assert rest == {"dtype": "x"} and ckpt.hub_kwargs == {"revision": "main"}
    assert ckpt.format_kwargs == {"gguf_file": "m.gguf"} and ckpt.explicit is True
    assert [fmt for _, fmt in ckpt.candidates] == [chosen]
    assert str(ckpt) == str(tmp_path) and ckpt.source == tmp_path
    # a selecting argument set to None or False selects nothing: every format, by priority
    ckpt, rest = open_checkpoint(tmp_path, {"use_bin": False, "bin_opt": 1, "gguf_file": None})
    assert ckpt.explicit is False and [fmt for _, fmt in ckpt.candidates] == [plain, chosen, flagged]
    assert ckpt.format_kwargs == {"use_bin": False, "bin_opt": 1, "gguf_file": None} and rest == {}
    ckpt2, rest2 = open_checkpoint(ckpt, {"gguf_file": "other.gguf", "dtype": "y"})
    assert ckpt2 is ckpt and rest2 == {"dtype": "y"}
    assert ckpt.format_kwargs == {"use_bin": False, "bin_opt": 1, "gguf_file": None}


def test_open_checkpoint_resolves_an_alias_before_opening(reg: Registry, tmp_path: Path) -> None:
    target = tmp_path / "real"
    reg.add("checkpoint_formats", "plain", Format("safetensors"))
    reg.add("model_sources", "my-alias", lambda: (target, {"revision": "v1", "dtype": "x"}))
    ckpt, rest = open_checkpoint("my-alias", {"dtype": "mine"})
    assert ckpt.source == target and ckpt.hub_kwargs == {"revision": "v1"} and rest == {"dtype": "mine"}


def test_resolve_asks_for_metadata_and_every_candidates_patterns_once(
    reg: Registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "w.safetensors").write_text("")
    calls: list[tuple[Any, list[str], dict[str, Any]]] = []

    def fake_resolve_folder(source: Any, patterns: list[str], **kwargs: Any) -> Path:
        calls.append((source, patterns, kwargs))
        return tmp_path

    monkeypatch.setattr(weights_module, "resolve_folder", fake_resolve_folder)
    fmt = Format("safetensors", arguments=("variant",), patterns=lambda variant=None: [f"*{variant}.safetensors"])
    reg.add("checkpoint_formats", "st", fmt, priority=1)
    reg.add("checkpoint_formats", "plain", Format("bin"))
    ckpt, _ = open_checkpoint("some/repo", {"variant": "fp16", "revision": "r"})
    folder, found_reg, files = ckpt.resolve()
    assert calls == [("some/repo", [*METADATA_PATTERNS, "*fp16.safetensors"], {"revision": "r"})]
    assert METADATA_PATTERNS == ("*.json", "*.jinja")
    assert folder == tmp_path and found_reg.name == "st" and files == [tmp_path / "w.safetensors"]
    assert fmt.calls == [{"variant": "fp16"}]
    assert ckpt.resolve() == (folder, found_reg, files) and len(calls) == 1 and len(fmt.calls) == 1


def test_carried_asks_the_format_only_when_chosen_or_found(reg: Registry, tmp_path: Path) -> None:
    (tmp_path / "m.gguf").write_text("")
    (tmp_path / "w.safetensors").write_text("")
    gguf = Format("gguf", arguments=("gguf_file",), selected_by=("gguf_file",))
    gguf.load_config = lambda files: {"from": [f.name for f in files]}
    plain = Format("safetensors")
    reg.add("checkpoint_formats", "gguf", gguf)
    reg.add("checkpoint_formats", "plain", plain, priority=5)
    explicit, _ = open_checkpoint(tmp_path, {"gguf_file": "m.gguf"})
    assert explicit.carried("config") == {"from": ["m.gguf"]}
    assert explicit.carried("tokenizer_files") is None  # the format carries no tokenizer
    ordinary, _ = open_checkpoint(tmp_path, {})
    assert ordinary.carried("config") is None and ordinary._found is None  # nothing looked up
    ordinary.resolve()
    assert ordinary.carried("config") is None  # found: asked, and the plain format carries nothing
    ordinary._found = (tmp_path, reg.get("checkpoint_formats", "gguf"), [tmp_path / "m.gguf"])
    assert ordinary.carried("config") == {"from": ["m.gguf"]}


def test_find_takes_the_first_format_with_files_and_explains_refusals(reg: Registry, tmp_path: Path) -> None:
    (tmp_path / "w.bin").write_text("")
    reg.add("checkpoint_formats", "st", Format("safetensors", expected="model.safetensors"), priority=3)
    reg.add("checkpoint_formats", "bin", Format("bin"), priority=2)
    ckpt, _ = open_checkpoint(tmp_path, {})
    assert ckpt.resolve()[1].name == "bin"
    (tmp_path / "w.bin").unlink()
    with pytest.raises(FileMissingError) as info:
        open_checkpoint(tmp_path, {})[0].resolve()
    assert str(info.value) == f"no model weights found in {tmp_path}. Expected: model.safetensors; bin."
    reg.add("checkpoint_formats", "refusing", Refusing(), priority=1)
    reg.add("checkpoint_formats", "refusing2", Refusing())
    with pytest.raises(FileMissingError) as info:
        open_checkpoint(tmp_path, {})[0].resolve()
    name = tmp_path.name
    assert str(info.value) == (
        f"no model weights found in {tmp_path}. {name} holds refused files; pass allow=True. "
        f"{name} holds refused files; pass allow=True."
    )
    # refused first, then found by a later format: found wins
    (tmp_path / "w.safetensors").write_text("")
    assert open_checkpoint(tmp_path, {})[0].resolve()[1].name == "st"


def test_find_with_no_formats_at_all(reg: Registry, tmp_path: Path) -> None:
    with pytest.raises(FileMissingError) as info:
        open_checkpoint(tmp_path, {})[0].resolve()
    assert str(info.value) == f"no model weights found in {tmp_path}. Expected: an installed checkpoint format."


def test_save_format_picks_by_safety_then_priority(reg: Registry) -> None:
    class Saving(Format):
        def save(self) -> None: ...

    safe_low = Saving("st", replaces=("*.safetensors", "*.index.json"))
    safe_high = Saving("st2", safe=1)
    pickle = Saving("bin", safe=False, replaces=["*.bin"])
    reader = Format("gguf", replaces=("*.gguf",))  # cannot save
    reg.add("checkpoint_formats", "safe_low", safe_low, priority=1)
    reg.add("checkpoint_formats", "safe_high", safe_high, priority=9)
    reg.add("checkpoint_formats", "pickle", pickle)
    reg.add("checkpoint_formats", "reader", reader, priority=20)
    fmt, replaces = save_format()
    assert fmt is safe_high and replaces == ["*.gguf", "*.safetensors", "*.index.json", "*.bin"]
    assert save_format(safe=True)[0] is safe_high
    assert save_format(safe=False)[0] is pickle
    assert save_format(safe=0)[0] is pickle


def test_save_format_missing_names_the_argument(reg: Registry) -> None:
    reg.add("checkpoint_formats", "reader", Format("gguf"))
    with pytest.raises(UnknownModelTypeError) as info:
        save_format()
    assert (
        str(info.value)
        == "No installed plugin provides checkpoint format that can save 'safetensors'. Installed: reader."
    )
    reg.providers[("checkpoint_formats", "safetensors")] = "microformers-sdk"
    with pytest.raises(PluginError) as info:
        save_format()
    assert str(info.value).startswith(
        "No installed plugin provides checkpoint format that can save 'safetensors'. "
        "Install it with: pip install microformers-sdk"
    )
    reg.providers[("checkpoint_formats", "pytorch_bin")] = "microformers-sdk"
    with pytest.raises(PluginError) as info:
        save_format(safe=False)
    assert str(info.value).startswith(
        "No installed plugin provides checkpoint format that can save without safe_serialization 'pytorch_bin'."
    )


def test_checkpoint_str_is_its_source() -> None:
    assert str(Checkpoint("a/b", {}, {}, [], False)) == "a/b"
