"""Tensor parallelism (``from_pretrained(..., tp_plan="auto")``) across 2 CPU processes (torchrun, gloo):
weights are split by the family's declared plan, and logits and greedy tokens equal one process's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import microformers
from microformers.errors import ConfigError
from microformers_sdk.testing.distributed import run_torchrun
from microformers_sdk.testing.numeric import assert_close, assert_similar_generation

WORKER = Path(__file__).parent / "tp_scripts" / "tp_worker.py"
IDS = torch.tensor([[3, 17, 5, 42, 8, 1], [9, 2, 30, 11, 6, 7]])  # the worker's prompt


def _save(model_class: type, config: object, folder: Path, safe: bool = True) -> str:
    torch.manual_seed(0)
    model_class(config).save_pretrained(folder, safe_serialization=safe)
    return str(folder)


def _tiny(model_type: str, **overrides: object) -> object:
    sizes = dict(
        vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64,
    )  # fmt: skip
    return microformers.AutoConfig.for_model(model_type, **{**sizes, **overrides})


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("tp_models")
    made = {}
    for model_type, extra in (
        ("llama", {}),
        ("qwen3", {"head_dim": 8}),
        ("qwen2", {}),
        ("gemma2", {"head_dim": 8}),
        ("gemma3_text", {"head_dim": 8}),
    ):
        config = _tiny(model_type, **extra)
        made[model_type] = _save(
            microformers.AutoModelForCausalLM.from_config(config).__class__, config, root / model_type
        )
    llama = _tiny("llama")  # pytorch_model.bin: no memory-mapped slices, each tensor read whole then sliced
    made["llama_bin"] = _save(
        type(microformers.AutoModelForCausalLM.from_config(llama)), llama, root / "llama_bin", False
    )
    three = _tiny("llama", hidden_size=24, num_attention_heads=3, num_key_value_heads=3)
    made["bad_three_heads"] = _save(
        microformers.AutoModelForCausalLM.from_config(three).__class__, three, root / "bad_three_heads"
    )
    gpt2 = microformers.AutoConfig.for_model("gpt2", vocab_size=64, n_embd=16, n_layer=1, n_head=2, n_positions=32)
    made["bad_no_plan"] = _save(
        microformers.AutoModelForCausalLM.from_config(gpt2).__class__, gpt2, root / "bad_no_plan"
    )
    return made


@pytest.fixture(scope="module")
def run(folders: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict, Path]:
    output = tmp_path_factory.mktemp("tp_run")
    run_torchrun(WORKER, output, *folders.values())
    results = torch.load(output / "results.pt", weights_only=False)
    return results, json.loads((output / "errors.json").read_text()), output


@pytest.mark.parametrize("model_type", ["llama", "qwen2", "qwen3", "gemma2", "gemma3_text", "llama_bin"])
def test_two_ranks_give_the_single_process_logits_and_tokens(run, folders, model_type):
    results = run[0]
    got = results[model_type]
    single = microformers.AutoModelForCausalLM.from_pretrained(folders[model_type])
    with torch.no_grad():
        assert_close(got["logits"], single(input_ids=IDS).logits, msg=f"{model_type} logits")
        want = single.generate(input_ids=IDS, max_new_tokens=8, do_sample=False, pad_token_id=0)
    assert_similar_generation(got["sequences"], want, got["scores"], prompt_length=IDS.shape[1])


def test_each_rank_holds_its_slice_of_the_sharded_weights(run, folders):
    got = run[0]["llama"]
    assert got["tp_size"] == 2
    single = microformers.AutoModelForCausalLM.from_pretrained(folders["llama"])
    attention = single.model.layers[0].self_attn
    q_rows = attention.q_proj.weight.detach().chunk(2, dim=0)  # colwise: output rows split
    o_cols = attention.o_proj.weight.detach().chunk(2, dim=1)  # rowwise: input columns split
    for rank, held in enumerate(got["weights"]):
        # exact: a slice of the stored float32 weights, no arithmetic on them
        assert torch.equal(held["q_proj"], q_rows[rank])
        assert torch.equal(held["o_proj"], o_cols[rank])
        assert torch.equal(held["embed"], single.model.embed_tokens.weight.detach())  # not in the plan: whole
    assert got["global_shapes"]["q_proj"] == tuple(attention.q_proj.weight.shape)


def test_save_pretrained_writes_the_whole_weights_once(run, folders):
    saved = Path(run[2]) / "saved_llama"
    reloaded = microformers.AutoModelForCausalLM.from_pretrained(saved).state_dict()
    original = microformers.AutoModelForCausalLM.from_pretrained(folders["llama"]).state_dict()
    assert reloaded.keys() == original.keys()
    for key, value in original.items():
        assert torch.equal(reloaded[key], value), key  # exact: gathered copies of the stored floats, no arithmetic


@pytest.mark.parametrize(("label", "size"), [("tp_size_1", 1), ("device_mesh", 2)])
def test_tp_size_and_device_mesh_arguments_pick_the_split(run, folders, label, size):
    got = run[0][label]
    assert got["tp_size"] == size
    single = microformers.AutoModelForCausalLM.from_pretrained(folders[got["model"]])
    with torch.no_grad():
        assert_close(got["logits"], single(input_ids=IDS).logits, msg=label)


def test_kv_cache_holds_the_local_heads(run):
    # llama: 2 key/value heads in the config, 1 per rank of 2; (batch, heads, seq, head_dim)
    assert run[0]["llama"]["cached_key_shape"] == (2, 1, IDS.shape[1], 8)


@pytest.mark.parametrize(
    ("case", "names"),
    [
        ("tp_size_not_dividing", ("tp_size=3", "world size 2")),
        ("unknown_style", ("'diagonal'", "colwise", "model.layers.*.mlp.up_proj")),
        ("heads_not_divisible", ("num_attention_heads=3", "tp_size=2")),
        ("no_plan", ("base_model_tp_plan", "GPT2Config")),
        ("not_strict", ("strict=True", "would not be split")),
    ],
)
def test_bad_requests_under_torchrun_are_refused_naming_the_setting(run, case, names):
    message = run[1][case]
    assert message != "accepted", case
    for name in names:
        assert name in message, message


def test_tp_plan_outside_a_distributed_run_is_refused(folders, monkeypatch):
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(key, raising=False)
    with pytest.raises(ConfigError, match="torchrun --nproc-per-node"):
        microformers.AutoModelForCausalLM.from_pretrained(folders["llama"], tp_plan="auto")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"tp_plan": "sequence"}, "tp_plan='sequence'"),
        ({"tp_size": 2}, r"tp_size=\.\.\.\) needs tp_plan='auto'"),
        ({"tp_plan": "auto", "device_map": "cpu"}, "drop device_map"),
        ({"tp_plan": "auto", "tp_size": 0}, "tp_size must be a positive int"),
        ({"tp_plan": "auto", "device_mesh": "tp"}, "device_mesh must be a torch.distributed DeviceMesh"),
    ],
)
def test_bad_tensor_parallel_arguments_are_refused(folders, kwargs, match):
    with pytest.raises(ConfigError, match=match):
        microformers.AutoModelForCausalLM.from_pretrained(folders["llama"], **kwargs)


def test_a_rank_reads_only_its_slice_from_a_safetensors_file(folders, monkeypatch):
    from microformers.formats.safetensors_format import LazySafetensors
    from microformers.tensor_parallel import ShardedSource

    files = sorted(Path(folders["llama"]).glob("*.safetensors"))
    whole = LazySafetensors(files)["model.layers.0.mlp.down_proj.weight"]

    def refuse_whole_reads(self, name):
        raise AssertionError(f"{name} was read whole")

    monkeypatch.setattr(LazySafetensors, "__getitem__", refuse_whole_reads)
    source = ShardedSource(LazySafetensors(files), {}, mesh=None, device=torch.device("cpu"))
    columns = source._slice("model.layers.0.mlp.down_proj.weight", dim=1, start=24, stop=48)
    assert torch.equal(columns, whole[:, 24:48])  # exact: the stored floats, read from the file's bytes
