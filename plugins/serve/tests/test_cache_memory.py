"""Where the engine's caches live: rows' keys and values (and the native step's slab) in mappings of their own, given
back when freed; freed heap memory kept between bursts only up to a bound."""

from __future__ import annotations

import mmap
import random
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from serve_helpers import Collector, assert_similar_tokens, scored_greedy

import microformers
from microformers_serve import engine as engine_module
from microformers_serve.engine import Engine, GenerationRequest

MIB = 2**20


def _rss() -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(1, 3, 200, 64), (1, 2, 5, 8)])  # 150 KiB or more: a mapping; 320 bytes: the heap
def test_cache_buffers_are_zeros_of_the_asked_shape_and_dtype(shape: tuple[int, ...], dtype: torch.dtype) -> None:
    like = torch.ones(2, dtype=dtype)
    buffer = engine_module._cache_buffer(like, *shape)
    assert buffer.shape == shape and buffer.dtype == dtype and buffer.is_contiguous()
    assert torch.equal(buffer, torch.zeros(shape, dtype=dtype))
    buffer[0, -1, -1, -1] = 3  # writable
    assert buffer.sum().item() == 3


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="the resident size is read from /proc (Linux)")
def test_a_mapped_cache_buffer_gives_its_memory_back_when_freed() -> None:
    before = _rss()
    buffer = engine_module._cache_buffer(torch.zeros(1), 1, 8, 4096, 512)  # 64 MiB
    assert _rss() - before < 8 * MIB  # no page is touched before it is written
    buffer.fill_(1.0)
    assert _rss() - before > 56 * MIB
    del buffer  # no malloc_trim: the mapping goes with the tensor
    assert _rss() - before < 8 * MIB


def test_a_cache_buffer_falls_back_to_the_heap_when_no_mapping_can_be_made(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> mmap.mmap:
        raise OSError(12, "Cannot allocate memory")  # as the system's limit on mappings refuses

    monkeypatch.setattr(engine_module.mmap, "mmap", refuse)
    buffer = engine_module._cache_buffer(torch.zeros(1), 1, 3, 200, 64)
    assert torch.equal(buffer, torch.zeros(1, 3, 200, 64))


class _FakeGlibc:
    def __init__(self, free: int | None) -> None:
        self.trims: list[int] = []
        if free is not None:
            self.mallinfo2 = lambda: engine_module._HeapInfo(fordblks=free)

    def malloc_trim(self, pad: int) -> int:
        self.trims.append(pad)
        return 1


@pytest.mark.parametrize(
    "free,kept,trims", [(10 * MIB, 64 * MIB, []), (100 * MIB, 64 * MIB, [0]), (1, 0, [0]), (None, 64 * MIB, [0])]
)
def test_freed_heap_memory_is_given_back_only_past_what_is_kept(
    free: int | None, kept: int, trims: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Up to ``kept`` free bytes stay on the heap; more, or a glibc that cannot say how much (before 2.33), and
    everything free goes back."""
    glibc = _FakeGlibc(free)
    monkeypatch.setattr(engine_module, "_glibc", lambda: glibc)
    engine_module._return_freed_memory(kept)
    assert glibc.trims == trims


def test_requests_decoded_from_mapped_cache_buffers_equal_generate_alone(
    tiny_llama: Path, reference: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every row buffer and slab in a mapping (the tiny model's would otherwise all be on the heap), rows growing
    past their first buffers and joining and leaving the batch: the same tokens as ``generate`` alone."""
    monkeypatch.setattr(engine_module, "MAPPED_CACHE_BYTES", 0)
    tokenizer = microformers.AutoTokenizer.from_pretrained(tiny_llama)
    model = microformers.AutoModelForCausalLM.from_pretrained(tiny_llama)
    rng = random.Random(1)
    prompts = [[rng.randrange(3, 500) for _ in range(rng.randrange(1, 40))] for _ in range(6)]
    lengths = [rng.randrange(3, 40) for _ in range(5)] + [engine_module.ROW_GROWTH + 20]  # one row grows
    engine = Engine(model, tokenizer, max_batch_size=3)
    jobs = []
    for i, (prompt, new) in enumerate(zip(prompts, lengths, strict=True)):
        collector = Collector()
        job = GenerationRequest(prompt_ids=prompt, max_new_tokens=new, emit=collector)
        jobs.append((job, collector))
        engine.submit(job)
        time.sleep(0.002 * (i % 3))
    for _, collector in jobs:
        assert collector.done.wait(120)
    for (job, _), prompt, new in zip(jobs, prompts, lengths, strict=True):
        assert len(job.output_ids) == new or job.output_ids[-1] == 2  # eos
        assert_similar_tokens(job.output_ids, *scored_greedy(reference[1], prompt, new))
    engine.drain()
    assert engine.join(10)
