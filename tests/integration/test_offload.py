"""Big-model loading (issue 37 item 6): ``device_map="auto"`` with ``max_memory`` places layers GPU(s) -> CPU -> disk,
modules on disk run with their weights read just in time, and the outputs equal the in-memory model's."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

import microformers
from microformers.errors import ConfigError, DeviceError
from microformers.offload import parse_size
from microformers_sdk.testing.numeric import assert_close, assert_similar_generation

LLAMA = dict(
    vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
    num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=True,
)  # fmt: skip
EMBED = 96 * 32 * 4  # bytes of the embedding (float32), tied to the head
LAYER = (2 * 32 * 32 + 2 * 32 * 16 + 3 * 32 * 64 + 2 * 32) * 4  # q, o / k, v / the MLP / two norms
IDS = torch.tensor([[1, 17, 5, 42, 8, 90, 3], [9, 2, 30, 11, 6, 7, 64]])
# room for the embedding and one layer on the CPU, plus the layer reserved for running those on disk
TWO_LAYERS_OF_ROOM = EMBED + 2 * LAYER + 100


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    config = microformers.AutoConfig.for_model("llama", **LLAMA)
    model = microformers.AutoModelForCausalLM.from_config(config)
    with torch.no_grad():  # spread the weights so that greedy tokens vary
        for param in model.parameters():
            param.mul_(4.0)
    folder = tmp_path_factory.mktemp("offload") / "llama"
    model.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def in_memory(checkpoint: Path) -> Any:
    return microformers.AutoModelForCausalLM.from_pretrained(checkpoint)


def _offloaded(checkpoint: Path, folder: Path, **kwargs: Any) -> Any:
    options: dict[str, Any] = {
        "device_map": "auto",
        "max_memory": {"cpu": TWO_LAYERS_OF_ROOM},
        "offload_folder": folder,
    }
    return microformers.AutoModelForCausalLM.from_pretrained(checkpoint, **{**options, **kwargs})


def _assert_same_outputs(model: Any, reference: Any) -> None:
    with torch.no_grad():
        assert_close(model(IDS).logits, reference(IDS).logits, msg="logits")
    settings = {"max_new_tokens": 6, "do_sample": False, "output_scores": True, "return_dict_in_generate": True}
    got = model.generate(IDS, **settings)
    want = reference.generate(IDS, **settings)
    assert_similar_generation(got.sequences, want.sequences, want.scores, prompt_length=IDS.shape[1])


# -- placement -----------------------------------------------------------------------------------------------
def test_max_memory_places_layers_in_order_on_the_cpu_then_on_disk(checkpoint: Path, tmp_path: Path) -> None:
    model = _offloaded(checkpoint, tmp_path / "offload")
    assert model.hf_device_map == {
        "model.embed_tokens": "cpu",
        "model.layers.0": "cpu",
        "model.layers.1": "disk",
        "model.layers.2": "disk",
        "model.layers.3": "disk",
        "model.norm": "disk",
        "model.rotary_emb": "disk",
        "lm_head": "cpu",  # tied to the embedding: where it is
    }
    # between forwards the disk layers hold no weights
    assert all(p.is_meta for p in model.model.layers[2].parameters())
    assert not any(p.is_meta for p in model.model.layers[0].parameters())


def test_a_model_that_fits_is_reported_on_one_device(checkpoint: Path, tmp_path: Path) -> None:
    model = microformers.AutoModelForCausalLM.from_pretrained(
        checkpoint, device_map="auto", max_memory={"cpu": "1GiB"}, offload_folder=tmp_path / "unused"
    )
    assert model.hf_device_map == {"": "cpu"}
    assert not any(p.is_meta for p in model.parameters())


def test_more_memory_keeps_more_layers_in_memory(checkpoint: Path, tmp_path: Path) -> None:
    model = _offloaded(checkpoint, tmp_path / "offload", max_memory={"cpu": TWO_LAYERS_OF_ROOM + 2 * LAYER})
    on_cpu = [
        name for name, device in model.hf_device_map.items() if name.startswith("model.layers") and device == "cpu"
    ]
    assert on_cpu == ["model.layers.0", "model.layers.1", "model.layers.2"]


# -- outputs -------------------------------------------------------------------------------------------------
def test_offloaded_logits_and_greedy_tokens_equal_the_in_memory_model(
    checkpoint: Path, in_memory: Any, tmp_path: Path
) -> None:
    model = _offloaded(checkpoint, tmp_path / "offload")
    _assert_same_outputs(model, in_memory)
    assert all(p.is_meta for p in model.model.layers[3].parameters())  # dropped again after the forward


def test_a_model_entirely_on_disk_runs_and_reports_where_it_runs(
    checkpoint: Path, in_memory: Any, tmp_path: Path
) -> None:
    # room for the layer being run and nothing else: every module (the tied head too) is read from disk
    model = _offloaded(checkpoint, tmp_path / "offload", max_memory={"cpu": LAYER + 100})
    assert model.hf_device_map == {"": "disk"}
    assert all(p.is_meta for p in model.parameters())
    assert model.device == torch.device("cpu")  # where its modules run, not meta
    _assert_same_outputs(model, in_memory)  # generate too: its weights are read in, not missing


def test_disk_weights_are_read_from_the_safetensors_checkpoint_through_the_index(
    checkpoint: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "offload"
    _offloaded(checkpoint, folder)
    index = json.loads((folder / "index.json").read_text())
    assert "model.layers.3.mlp.down_proj.weight" in index
    assert {Path(entry["file"]).name for entry in index.values()} == {"model.safetensors"}
    assert not list(folder.glob("*.dat"))


def test_offload_state_dict_copies_disk_weights_into_the_folder(
    checkpoint: Path, in_memory: Any, tmp_path: Path
) -> None:
    folder = tmp_path / "offload"
    model = _offloaded(checkpoint, folder, offload_state_dict=True)
    assert (folder / "model.layers.3.mlp.down_proj.weight.dat").is_file()
    _assert_same_outputs(model, in_memory)


def test_a_legacy_bin_checkpoint_is_offloaded_as_copies(checkpoint: Path, in_memory: Any, tmp_path: Path) -> None:
    legacy = tmp_path / "legacy"
    in_memory.save_pretrained(legacy, safe_serialization=False)
    folder = tmp_path / "offload"
    model = _offloaded(legacy, folder)
    assert (folder / "model.layers.2.self_attn.q_proj.weight.dat").is_file()
    _assert_same_outputs(model, in_memory)


def test_a_bfloat16_load_casts_the_disk_weights_when_they_are_loaded(checkpoint: Path, tmp_path: Path) -> None:
    reference = microformers.AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.bfloat16)
    model = _offloaded(checkpoint, tmp_path / "offload", dtype=torch.bfloat16)
    with torch.no_grad():
        got = model(IDS).logits
        assert got.dtype == torch.bfloat16
        assert_close(got, reference(IDS).logits)


def test_a_dict_device_map_with_disk_entries(checkpoint: Path, in_memory: Any, tmp_path: Path) -> None:
    device_map = {"": "cpu", "model.layers.1": "disk", "model.layers.3": "disk"}
    model = microformers.AutoModelForCausalLM.from_pretrained(
        checkpoint, device_map=device_map, offload_folder=tmp_path / "offload"
    )
    assert model.hf_device_map == device_map
    assert all(p.is_meta for p in model.model.layers[1].parameters())
    assert not any(p.is_meta for p in model.model.layers[2].parameters())
    _assert_same_outputs(model, in_memory)


def test_a_sharded_safetensors_checkpoint_is_read_in_place_from_its_shards(in_memory: Any, tmp_path: Path) -> None:
    in_memory.save_pretrained(tmp_path / "sharded", max_shard_size=60_000)
    assert len(list((tmp_path / "sharded").glob("model-*.safetensors"))) > 1
    model = _offloaded(tmp_path / "sharded", tmp_path / "offload")
    index = json.loads((tmp_path / "offload" / "index.json").read_text())
    assert len({entry["file"] for entry in index.values()}) > 1
    _assert_same_outputs(model, in_memory)


@pytest.mark.parametrize("container", ["model.layers", ""])
def test_a_container_put_on_disk_is_loaded_one_layer_at_a_time(
    checkpoint: Path, in_memory: Any, tmp_path: Path, container: str
) -> None:
    model = microformers.AutoModelForCausalLM.from_pretrained(
        checkpoint, device_map={"": "cpu", container: "disk"} if container else {"": "disk"},
        offload_folder=tmp_path / "offload",
    )  # fmt: skip
    seen: list[bool] = []  # while layer 1 runs, layer 2 holds no weights
    model.model.layers[1].mlp.register_forward_hook(
        lambda *_: seen.append(model.model.layers[2].mlp.up_proj.weight.is_meta)
    )
    with torch.no_grad():
        assert_close(model(IDS).logits, in_memory(IDS).logits)
    assert seen == [True]


def test_low_cpu_mem_usage_false_gives_the_same_model(checkpoint: Path, in_memory: Any) -> None:
    model = microformers.AutoModelForCausalLM.from_pretrained(checkpoint, low_cpu_mem_usage=False)
    with torch.no_grad():
        assert_close(model(IDS).logits, in_memory(IDS).logits)


# -- on a GPU ----------------------------------------------------------------------------------------------------
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@needs_cuda
def test_max_memory_places_layers_on_the_gpu_then_the_cpu_then_disk(
    checkpoint: Path, in_memory: Any, tmp_path: Path
) -> None:
    # GPU 0: the embedding, one layer and the room to run a disk layer; the CPU: one layer
    budget = {0: EMBED + 2 * LAYER + 100, "cpu": LAYER + 100}
    model = _offloaded(checkpoint, tmp_path / "offload", max_memory=budget)
    assert model.hf_device_map == {
        "model.embed_tokens": 0,
        "model.layers.0": 0,
        "model.layers.1": "cpu",
        "model.layers.2": "disk",
        "model.layers.3": "disk",
        "model.norm": "disk",
        "model.rotary_emb": "disk",
        "lm_head": 0,
    }
    assert model.model.layers[0].mlp.up_proj.weight.device.type == "cuda"
    assert model.model.layers[1].mlp.up_proj.weight.device.type == "cpu"
    assert model.model.layers[2].mlp.up_proj.weight.is_meta
    ids = IDS.cuda()
    with torch.no_grad():
        got = model(ids).logits
        assert got.device.type == "cuda"  # back on the input's device
        assert_close(got.cpu(), in_memory(IDS).logits, rtol=1e-4, atol=1e-4)
    settings = {"max_new_tokens": 6, "do_sample": False, "output_scores": True, "return_dict_in_generate": True}
    want = in_memory.generate(IDS, **settings)
    got_ids = model.generate(ids, **settings).sequences.cpu()
    assert_similar_generation(got_ids, want.sequences, want.scores, prompt_length=IDS.shape[1])


@needs_cuda
def test_auto_without_max_memory_puts_a_small_model_on_the_gpu(checkpoint: Path) -> None:
    model = microformers.AutoModelForCausalLM.from_pretrained(checkpoint, device_map="auto")
    assert model.hf_device_map == {"": 0}
    assert all(p.device.type == "cuda" for p in model.parameters())


# -- sizes and bad input -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "size"),
    [("12GiB", 12 * 2**30), ("12 GiB", 12 * 2**30), ("300MB", 300 * 10**6), ("300mib", 300 * 2**20),
     ("1.5GB", 1_500_000_000), ("8Mb", 10**6), (123456, 123456)],
)  # fmt: skip
def test_sizes_are_parsed_as_the_reference_writes_them(text: Any, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("bad", ["12 potatoes", "GiB", "", "-3MB", -1, True, None, 1.5])
def test_an_unparseable_size_is_refused_naming_max_memory(checkpoint: Path, tmp_path: Path, bad: Any) -> None:
    with pytest.raises(ConfigError, match=r"max_memory\['cpu'\]"):
        _offloaded(checkpoint, tmp_path / "offload", max_memory={"cpu": bad})


def test_max_memory_smaller_than_one_layer_is_refused_with_the_layer_size(checkpoint: Path, tmp_path: Path) -> None:
    layer = rf"one layer \('model.layers.0', {LAYER} bytes\)"
    with pytest.raises(ConfigError, match=rf"max_memory\['cpu'\]=1000 bytes is smaller than {layer}"):
        _offloaded(checkpoint, tmp_path / "offload", max_memory={"cpu": 1000})


@pytest.mark.parametrize("key", ["gpu0", "cuda:x", -1, "tpu", 1.0])
def test_an_unknown_device_key_is_refused(checkpoint: Path, tmp_path: Path, key: Any) -> None:
    with pytest.raises(DeviceError, match="max_memory"):
        _offloaded(checkpoint, tmp_path / "offload", max_memory={key: "1GiB", "cpu": "1GiB"})


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
def test_a_gpu_key_on_a_machine_without_one_is_refused(checkpoint: Path, tmp_path: Path) -> None:
    with pytest.raises(DeviceError, match=r"max_memory has the key 0, but this machine has no GPU"):
        _offloaded(checkpoint, tmp_path / "offload", max_memory={0: "1GiB", "cpu": "1GiB"})


def test_disk_without_offload_folder_is_refused_naming_it(checkpoint: Path) -> None:
    with pytest.raises(ConfigError, match="no offload_folder was given; pass offload_folder="):
        microformers.AutoModelForCausalLM.from_pretrained(
            checkpoint, device_map="auto", max_memory={"cpu": TWO_LAYERS_OF_ROOM}
        )
    with pytest.raises(ConfigError, match="offload_folder"):
        microformers.AutoModelForCausalLM.from_pretrained(checkpoint, device_map={"": "cpu", "model.layers.1": "disk"})


def test_an_offload_folder_that_is_a_file_is_refused(checkpoint: Path, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="offload_folder=.* is a file"):
        _offloaded(checkpoint, tmp_path / "file")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_memory": {"cpu": "1GiB"}}, "only apply.* device_map"),
        ({"offload_folder": "x"}, "offload_folder only apply.* device_map"),
        ({"device_map": {"": "cpu"}, "max_memory": {"cpu": "1GiB"}}, "max_memory applies to an automatic device_map"),
        ({"device_map": "cpu", "offload_folder": "x"}, "places nothing on disk"),
        ({"device_map": "auto", "low_cpu_mem_usage": False}, "low_cpu_mem_usage=False cannot be combined"),
        ({"low_cpu_mem_usage": "yes"}, "low_cpu_mem_usage='yes' must be True or False"),
        ({"device_map": "auto", "offload_buffers": True}, "offload_buffers=True is not supported"),
        ({"device_map": "auto", "max_memory": ["1GiB"]}, "max_memory=.* must be a dict"),
        ({"device_map": "auto", "device": "cpu"}, "device='cpu' and device_map='auto'.* pass one of them"),
        ({"device_map": {"": "cpu", "model.nope": "disk"}, "offload_folder": "x"}, "'model.nope', which the model"),
    ],
)
def test_contradictory_or_malformed_arguments_are_refused(
    checkpoint: Path, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        microformers.AutoModelForCausalLM.from_pretrained(checkpoint, **kwargs)


# -- memory ---------------------------------------------------------------------------------------------------
_CHILD = textwrap.dedent(
    """
    import json, sys
    import torch
    import microformers

    def rss(field):
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) * 1024 for line in status if line.startswith(field))

    torch.set_num_threads(1)
    folder, offload, limit = sys.argv[1], sys.argv[2], int(sys.argv[3])
    # the runtime: torch, the kernel and the plugins imported, a forward and a generate run once (a tiny model)
    tiny = microformers.AutoConfig.for_model("llama", vocab_size=64, hidden_size=16, intermediate_size=32,
                                             num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2)
    microformers.AutoModelForCausalLM.from_config(tiny).generate(torch.tensor([[1, 2]]), max_new_tokens=2)
    runtime = rss("VmRSS:")
    kwargs = {"device_map": "auto", "max_memory": {"cpu": limit}, "offload_folder": offload} if limit else {}
    model = microformers.AutoModelForCausalLM.from_pretrained(folder, **kwargs)
    tokens = model.generate(torch.tensor([[1, 2, 3, 4]]), max_new_tokens=3, do_sample=False)
    print(json.dumps({"runtime": runtime, "peak": rss("VmHWM:"), "tokens": tokens.tolist()}))
    """
)


def _child(folder: Path, offload: Path, limit: int) -> dict[str, Any]:
    """Load ``folder`` in a fresh process (``limit`` bytes of max_memory, 0: whole) and generate 3 tokens."""
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(folder), str(offload), str(limit)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_peak_memory_stays_under_max_memory_plus_the_runtime(tmp_path: Path) -> None:
    """~200 MB of float32 weights loaded with max_memory at 40%: the process's peak resident memory stays within
    the runtime's plus that limit (plus a small margin for activations), far below the in-memory load's."""
    torch.manual_seed(0)
    config = microformers.AutoConfig.for_model(
        "llama", vocab_size=4096, hidden_size=512, intermediate_size=1536, num_hidden_layers=16,
        num_attention_heads=8, num_key_value_heads=8, max_position_embeddings=64, tie_word_embeddings=True,
    )  # fmt: skip
    folder = tmp_path / "big"
    microformers.AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    size = (folder / "model.safetensors").stat().st_size
    assert size > 200 * 2**20
    limit = int(size * 0.4)
    offloaded = _child(folder, tmp_path / "offload", limit)
    margin = 24 * 2**20  # activations, the allocator's slack (about 14 MiB measured)
    assert offloaded["peak"] - offloaded["runtime"] <= limit + margin, (offloaded, limit)
    assert offloaded["peak"] - offloaded["runtime"] >= limit // 2  # the measurement sees the weights kept in memory
    whole = microformers.AutoModelForCausalLM.from_pretrained(folder)
    ids = torch.tensor([[1, 2, 3, 4]])
    want = whole.generate(ids, max_new_tokens=3, do_sample=False, output_scores=True, return_dict_in_generate=True)
    assert_similar_generation(offloaded["tokens"], want.sequences, want.scores, prompt_length=4)
