"""``microformers serve``'s memory, measured on the server process (issue #42 items 2 and 3).

One long request costs the server what its own cache holds, not a cache for every batch row, and gives it back
when it ends; a 4 MB prompt is refused before it is tokenized, so it costs next to nothing.

The checkpoint is a tiny Llama whose cache is large for its compute (8 layers of 8 key/value heads of 256
dimensions: 128 KiB per position), so one 512-position request holds 64 MiB of cache while its prefill takes a
fraction of a second. Peak RSS is read from ``/proc/PID/status`` (``VmHWM``, reset through ``clear_refs``), so
these tests run on Linux only.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

httpx = pytest.importorskip("httpx", reason="httpx is a test extra (requirements-test.txt)")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "plugins" / "serve" / "tests"))
from serve_helpers import ServerProcess, build_tiny_llama  # noqa: E402

import microformers  # noqa: E402

if not Path("/proc/self/clear_refs").exists():
    pytest.skip("peak RSS is read from /proc (Linux)", allow_module_level=True)

LAYERS, KV_HEADS, HEAD_DIM = 8, 8, 256
KV_BYTES_PER_TOKEN = LAYERS * 2 * KV_HEADS * HEAD_DIM * 4
MIB = 2**20


def _status(pid: int, field: str) -> int:
    """A ``/proc/PID/status`` size in bytes (``VmRSS``: now, ``VmHWM``: the peak since the last reset)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def _reset_peak(pid: int) -> None:
    with open(f"/proc/{pid}/clear_refs", "w", encoding="ascii") as clear:
        clear.write("5")  # the peak RSS (VmHWM) starts again from the current RSS


@pytest.fixture(scope="module")
def wide_cache_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = build_tiny_llama(tmp_path_factory.mktemp("serve-memory") / "wide-cache")  # its tokenizer, our model
    config = microformers.AutoConfig.for_model(
        "llama", vocab_size=json.loads((folder / "config.json").read_text())["vocab_size"], hidden_size=64,
        intermediate_size=64, num_hidden_layers=LAYERS, num_attention_heads=KV_HEADS, num_key_value_heads=KV_HEADS,
        head_dim=HEAD_DIM, max_position_embeddings=2048, eos_token_id=2, bos_token_id=1,
    )  # fmt: skip
    torch.manual_seed(0)
    microformers.AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def wide_cache(wide_cache_folder: Path) -> Iterator[ServerProcess]:
    # the default request limits (a 4 MiB body), and a batch of 16 rows, as in the issue
    server = ServerProcess(wide_cache_folder, "--max-batch-size", "16")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def wide_cache_native(wide_cache_folder: Path) -> Iterator[ServerProcess]:
    """The same, int8, decoded by the native quantized step over a slab (a copy of the rows' caches)."""
    kernels = pytest.importorskip("microformers_quant.kernels")
    if not kernels.native_available():
        pytest.skip("the microformers-quant kernels cannot be built here")
    server = ServerProcess(wide_cache_folder, "--max-batch-size", "16", "--quantize", "int8")
    yield server
    server.stop()


def _model(server: ServerProcess) -> str:
    return httpx.get(f"{server.base_url}/v1/models", timeout=10).json()["data"][0]["id"]


@pytest.mark.parametrize("path", ["batched", "native"])
def test_one_long_request_peaks_at_its_own_cache_and_gives_it_back(path: str, request: pytest.FixtureRequest) -> None:
    server: ServerProcess = request.getfixturevalue("wide_cache" if path == "batched" else "wide_cache_native")
    pid = server.process.pid
    model = _model(server)
    httpx.post(
        f"{server.base_url}/v1/completions", json={"model": model, "prompt": [5, 6], "max_tokens": 2}, timeout=60
    )  # a first request: the lazily made parts of the server exist before the baseline
    time.sleep(0.5)
    idle = _status(pid, "VmRSS")
    _reset_peak(pid)
    prompt, new = [5 + i % 400 for i in range(500)], 12
    response = httpx.post(
        f"{server.base_url}/v1/completions",
        json={"model": model, "prompt": prompt, "max_tokens": new, "temperature": 0},
        timeout=120,
    )
    assert response.status_code == 200, response.text
    own_cache = (len(prompt) + new) * KV_BYTES_PER_TOKEN  # 64 MiB
    peak = _status(pid, "VmHWM")
    # the measure: within 1.5x of what the server held before (weights and runtime) plus its own cache
    assert peak <= 1.5 * (idle + own_cache), f"peak RSS {peak / MIB:.0f} MiB, idle {idle / MIB:.0f} MiB"
    # and by itself: its cache plus the prefill's activations (the activations of a 500-token forward are as large
    # as the cache), and for the native step its slab, a second copy of the cache; a cache for each of the 16
    # batch rows would be 16x. Measured on a Zen 4: batched 2.3x with MKL's products, 2.4-2.6x with the SDK's
    # 16-lane ones (the same allocations by torch's profiler; the first long request after start-up peaks
    # highest), native 2.7x. On an Intel Xeon (Emerald Rapids), where the prompt's products take MKL's AVX-512
    # sgemm: batched 2.9-3.2x (MKL's own memory manager keeps buffers: 2.7-3.0x with MKL_DISABLE_FAST_MM=1),
    # 2.6x with the SDK's products; native 2.6x
    grew = peak - idle
    assert grew <= 3.5 * own_cache, f"the peak RSS grew by {grew / MIB:.0f} MiB"
    assert grew >= 0.5 * own_cache  # the measure sees the cache at all
    time.sleep(0.5)
    kept = _status(pid, "VmRSS") - idle
    # measured: 1-5 MiB batched, 10-21 MiB native (its step's own workspace); before the fix the cache stayed (35x)
    assert kept <= 0.5 * own_cache, f"{kept / MIB:.0f} MiB still held after the request ended"
    assert httpx.get(f"{server.base_url}/health", timeout=10).json()["kv_tokens_reserved"] == 0


@pytest.mark.parametrize("route", ["/v1/completions", "/v1/chat/completions"])
def test_a_four_megabyte_prompt_is_refused_before_it_is_tokenized(wide_cache: ServerProcess, route: str) -> None:
    server, pid = wide_cache, wide_cache.process.pid
    text = "hello world " * 333_334  # 4 MB: under the 4 MiB body limit, far over what 2,048 tokens can hold
    body: dict[str, object] = {"model": _model(server), "max_tokens": 4}
    if route == "/v1/completions":
        body["prompt"] = text
    else:
        body["messages"] = [{"role": "user", "content": text}]
    _reset_peak(pid)
    idle = _status(pid, "VmRSS")
    response = httpx.post(f"{server.base_url}{route}", json=body, timeout=60)
    assert response.status_code == 400 and "characters" in response.json()["error"]["message"], response.text
    # the body and its parsed text (a few copies of 4 MB); tokenizing it would take hundreds of MiB
    grew = _status(pid, "VmHWM") - idle
    assert grew <= 48 * MIB, f"refusing the prompt raised the peak RSS by {grew / MIB:.0f} MiB"
