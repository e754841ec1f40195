"""Weights: round trips, sharding, no random init on load, bad checkpoints, atomic saves."""

from __future__ import annotations

import json
import os

import pytest
import torch

import microformers
from microformers import CheckpointError, FileMissingError, ShapeMismatchError
from microformers.modeling import PreTrainedModel


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
