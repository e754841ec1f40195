"""FSDP2 (``TrainingArguments(fsdp=...)``): torchrun --nproc_per_node 2 on CPU (gloo) ends with the weights of
one process with the whole batch; the final save and the checkpoints are normal folders (or, with
SHARDED_STATE_DICT, torch.distributed.checkpoint folders of each process's shards, swapped in whole); a resumed
run ends where the uninterrupted one does. Settings that are not implemented are refused by name."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
import torch
from fsdp_script import file_digests, main
from safetensors.torch import load_file
from trainer_helpers import lm_rows, tiny_llama

import microformers
from microformers import CheckpointError, ConfigError, Trainer, TrainingArguments
from microformers_sdk.testing.distributed import run_torchrun
from microformers_trainer.checkpointing import get_last_checkpoint

SCRIPT = Path(__file__).parent / "fsdp_script.py"
needs_distributed = pytest.mark.skipif(
    not torch.distributed.is_available(), reason="this torch build has no torch.distributed"
)


def max_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


@pytest.fixture(scope="module")
def fsdp_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, torch.Tensor]]:
    """The torchrun runs of fsdp_script.py (one launch for every test here) and the single-process weights."""
    root = tmp_path_factory.mktemp("fsdp_runs")
    out = root / "fsdp"
    run_torchrun(SCRIPT, out, "2")
    single = main(str(root / "single"), 4)
    return out, {k: v.detach() for k, v in single.model.state_dict().items()}


@needs_distributed
def test_two_fsdp_processes_match_one_process_with_the_whole_batch(
    fsdp_runs: tuple[Path, dict[str, torch.Tensor]],
) -> None:
    out, theirs = fsdp_runs
    initial = tiny_llama().state_dict()
    for run in ("full_shard", "shard_grad_op", "resumed"):
        ours = load_file(out / run / "model.safetensors")
        worst = max_difference(ours, {k: theirs[k] for k in ours})
        assert worst <= 1e-5, f"fsdp {run} weights differ from the single-process run by {worst:.3g}"
    ours = load_file(out / "full_shard" / "model.safetensors")
    assert max_difference(ours, {k: initial[k] for k in ours}) > 1e-3, "training did not move the weights"

    # each process held half of the parameters while training
    held = [json.loads((out / f"elements_rank{rank}.json").read_text()) for rank in (0, 1)]
    assert sum(h["local"] for h in held) == held[0]["total"]
    assert all(h["local"] < 0.6 * h["total"] for h in held)

    # a normal folder: it loads in one process, under the model's own class name
    loaded = microformers.AutoModelForCausalLM.from_pretrained(out / "full_shard")
    assert type(loaded).__name__ == "LlamaForCausalLM"
    assert json.loads((out / "full_shard" / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]
    assert max_difference({k: loaded.state_dict()[k] for k in ours}, ours) == 0.0

    checkpoint = out / "stopped" / "checkpoint-2"
    optimizer_state = torch.load(checkpoint / "optimizer.pt", weights_only=True)
    assert "model.layers.0.self_attn.q_proj.weight" in optimizer_state["state"]  # full, keyed by parameter name
    stopped = load_file(checkpoint / "model.safetensors")
    assert max_difference(stopped, ours) > 1e-4, "the resumed run did not train after the checkpoint"


@needs_distributed
def test_sharded_checkpoints_hold_each_process_shards_and_resume_where_the_run_ends(
    fsdp_runs: tuple[Path, dict[str, torch.Tensor]],
) -> None:
    out, theirs = fsdp_runs
    checkpoint = out / "sharded" / "checkpoint-2"
    for folder in ("pytorch_model_fsdp_0", "optimizer_0"):  # torch.distributed.checkpoint: one file a process
        names = {p.name for p in (checkpoint / folder).iterdir()}
        assert names == {".metadata", "__0_0.distcp", "__1_0.distcp"}, f"{folder}: {sorted(names)}"
    assert not (checkpoint / "model.safetensors").exists() and not (checkpoint / "optimizer.pt").exists()
    for name in ("scheduler.pt", "rng_state_0.pth", "rng_state_1.pth", "trainer_state.json"):
        assert (checkpoint / name).is_file(), name
    assert json.loads((checkpoint / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]
    assert get_last_checkpoint(out / "sharded") == str(checkpoint)

    # the resumed run ends where the uninterrupted one does, and its final save is a normal safetensors folder
    ours = load_file(out / "resumed_sharded" / "model.safetensors")
    worst = max_difference(ours, {k: theirs[k] for k in ours})
    assert worst <= 1e-5, f"resuming a sharded checkpoint ends {worst:.3g} away from the uninterrupted run"
    initial = tiny_llama().state_dict()
    assert max_difference(ours, {k: initial[k] for k in ours}) > 1e-3, "training did not move the weights"


@needs_distributed
def test_a_sharded_save_failing_in_one_process_leaves_the_old_checkpoints_whole(
    fsdp_runs: tuple[Path, dict[str, torch.Tensor]],
) -> None:
    out, _ = fsdp_runs
    root = out / "sharded"
    for rank in (0, 1):  # every process stops with the failed process's error
        failure = (root / f"failure_rank{rank}.txt").read_text()
        assert failure.startswith("CheckpointError") and "process 1 (OSError" in failure, failure
    # checkpoint-4 was never swapped in, no staging folder is left, and checkpoint-2 is byte for byte what it was
    assert sorted(p.name for p in root.iterdir() if p.is_dir()) == ["checkpoint-2"]
    before = json.loads((root / "before_failure.json").read_text())
    assert file_digests(root / "checkpoint-2") == before


@needs_distributed
def test_a_sharded_checkpoint_resumed_without_fsdp_names_the_setting(
    fsdp_runs: tuple[Path, dict[str, torch.Tensor]], tmp_path: Path
) -> None:
    out, _ = fsdp_runs
    args = TrainingArguments(output_dir=str(tmp_path), report_to="none", max_steps=1)
    trainer = Trainer(model=tiny_llama(), args=args, train_dataset=lm_rows(4))
    with pytest.raises(CheckpointError, match=r"sharded FSDP checkpoint .*TrainingArguments\(fsdp=\.\.\.\)"):
        trainer.train(resume_from_checkpoint=str(out / "sharded" / "checkpoint-2"))


@pytest.mark.parametrize(
    ("fsdp", "fsdp_config", "message"),
    [
        ("full_shard", {"state_dict_type": "LOCAL_STATE_DICT"}, "LOCAL_STATE_DICT is FSDP1's"),
        ("zero_shard", None, "unknown option 'zero_shard'"),
        ("full_shard offload", None, "'offload' is refused"),
        ("hybrid_shard", None, "FSDP1"),
        ("full_shard shard_grad_op", None, "pick one"),
        ("full_shard", {"version": 1}, "only FSDP2"),
        ("full_shard", {"fsdp_cpu_offload": True}, "CPU offload"),
        ("full_shard", {"sync_everything": True}, "'sync_everything'"),
        ("full_shard", {"transformer_layer_cls_to_wrap": [3]}, "layer class names"),
        ("", {"reshard_after_forward": False}, "fsdp is off"),
    ],
)
def test_fsdp_settings_that_are_not_implemented_are_refused(fsdp: str, fsdp_config: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        TrainingArguments(output_dir="unused", fsdp=fsdp, fsdp_config=fsdp_config)


def test_fsdp_strings_and_config_are_normalised(tmp_path: Path) -> None:
    args = TrainingArguments(output_dir=str(tmp_path), fsdp="shard_grad_op auto_wrap")
    assert args.fsdp == ["shard_grad_op", "auto_wrap"]
    assert args.fsdp_config["reshard_after_forward"] is False
    config_file = tmp_path / "fsdp.json"
    config_file.write_text(json.dumps({"fsdp_transformer_layer_cls_to_wrap": "LlamaDecoderLayer"}))
    args = TrainingArguments(output_dir=str(tmp_path), fsdp=True, fsdp_config=str(config_file))
    assert args.fsdp == ["full_shard"]
    assert args.fsdp_config["reshard_after_forward"] is True
    assert args.fsdp_config["transformer_layer_cls_to_wrap"] == ["LlamaDecoderLayer"]
    assert args.fsdp_config["state_dict_type"] == "FULL_STATE_DICT"
    sharded = TrainingArguments(
        output_dir=str(tmp_path), fsdp=True, fsdp_config={"state_dict_type": "sharded_state_dict"}
    )
    assert sharded.fsdp_config["state_dict_type"] == "SHARDED_STATE_DICT"
    assert TrainingArguments(output_dir=str(tmp_path)).fsdp == []
    inline = TrainingArguments(
        output_dir=str(tmp_path), fsdp="full_shard", fsdp_config='{"reshard_after_forward": false}'
    )
    assert inline.fsdp_config["reshard_after_forward"] is False  # a command line's JSON object


def test_fsdp_from_the_command_line(tmp_path: Path) -> None:
    from microformers import HfArgumentParser

    parser = HfArgumentParser(TrainingArguments)
    (bare,) = parser.parse_args_into_dataclasses(["--output_dir", str(tmp_path), "--fsdp"])
    assert bare.fsdp == ["full_shard"]
    (named,) = parser.parse_args_into_dataclasses(
        ["--output_dir", str(tmp_path), "--fsdp", "shard_grad_op auto_wrap", "--fsdp_config", '{"fsdp_version": 2}']
    )
    assert named.fsdp == ["shard_grad_op", "auto_wrap"] and named.fsdp_config["reshard_after_forward"] is False
    (off,) = parser.parse_args_into_dataclasses(["--output_dir", str(tmp_path)])
    assert off.fsdp == []


def test_fsdp_outside_torchrun_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("WORLD_SIZE", "MASTER_ADDR"):
        monkeypatch.delenv(key, raising=False)
    args = TrainingArguments(output_dir=str(tmp_path), fsdp="full_shard", report_to="none")
    with pytest.raises(ConfigError, match="torchrun"):
        Trainer(model=tiny_llama(), args=args, train_dataset=lm_rows(4))


class NoLayersDeclared(torch.nn.Module):
    """A model that names no layer classes (no ``_no_split_modules``)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(40, 8)
        self.head = torch.nn.Linear(8, 40)

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        logits = self.head(self.embed(input_ids))
        return {"loss": torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten()), "logits": logits}


@pytest.fixture
def one_process_group(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A torchrun-like environment of one process (the group is created by the Trainer, destroyed after)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for key, value in {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": "1", "RANK": "0"}.items():
        monkeypatch.setenv(key, value)
    yield
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


@needs_distributed
@pytest.mark.parametrize(
    ("model", "fsdp_config", "message"),
    [
        (NoLayersDeclared, None, "transformer_layer_cls_to_wrap"),
        (tiny_llama, {"transformer_layer_cls_to_wrap": ["NoSuchLayer"]}, "NoSuchLayer"),
    ],
)
def test_fsdp_without_layer_classes_names_the_setting(
    tmp_path: Path, one_process_group: Any, model: Any, fsdp_config: Any, message: str
) -> None:
    args = TrainingArguments(
        output_dir=str(tmp_path), fsdp="full_shard", fsdp_config=fsdp_config, report_to="none", max_steps=1
    )
    trainer = Trainer(model=model(), args=args, train_dataset=lm_rows(4))
    with pytest.raises(ConfigError, match=message):
        trainer.train()


def test_fsdp_refuses_an_optimizer_built_before_sharding(tmp_path: Path, one_process_group: Any) -> None:
    model = tiny_llama()
    args = TrainingArguments(output_dir=str(tmp_path), fsdp="full_shard", report_to="none")
    with pytest.raises(ConfigError, match="optimizers"):
        Trainer(model=model, args=args, optimizers=(torch.optim.SGD(model.parameters(), lr=0.1), None))


def _sharded_trainer(output_dir: Path, model: Any, max_steps: int) -> Trainer:
    args = TrainingArguments(
        output_dir=str(output_dir),
        fsdp="full_shard",
        fsdp_config={"state_dict_type": "SHARDED_STATE_DICT"},
        report_to="none",
        disable_tqdm=True,
        per_device_train_batch_size=2,
        max_steps=max_steps,
        save_steps=2,
    )
    return Trainer(model=model, args=args, train_dataset=lm_rows(8))


@needs_distributed
@pytest.mark.parametrize("damage", ["truncated shard file", "another model's checkpoint"])
def test_a_damaged_sharded_checkpoint_is_refused_naming_the_folder(
    tmp_path: Path, one_process_group: Any, damage: str
) -> None:
    _sharded_trainer(tmp_path, tiny_llama(), max_steps=2).train()
    checkpoint = tmp_path / "checkpoint-2"
    model = tiny_llama()
    if damage == "truncated shard file":
        shard = checkpoint / "pytorch_model_fsdp_0" / "__0_0.distcp"
        shard.write_bytes(shard.read_bytes()[:64])
    else:
        model = tiny_llama(hidden_size=32, intermediate_size=48)
    with pytest.raises(CheckpointError, match=r"pytorch_model_fsdp_0 could not be loaded into the model"):
        _sharded_trainer(tmp_path, model, max_steps=4).train(resume_from_checkpoint=str(checkpoint))
