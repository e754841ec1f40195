"""How the engine decodes, and the startup arguments that memory or the device cannot honour.

A float32 or quantized model on the CPU decodes through the native step ``generate`` uses by default (all
running rows in one call over a slab of their caches) while up to ``native_rows`` rows run, batched and eager
with more; the engine says which in ``decode_path``. A big
``--max-batch-size`` costs nothing up front (rows get their cache as they run, under the KV budget), a KV
budget the free memory cannot hold is refused, and so are ``--threads 0``, ``--device meta`` and ``--quantize``
off the CPU (no kernels there: a slow fallback).
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from serve_helpers import Collector, assert_similar_tokens, one_thread, scored_greedy

import microformers
from microformers.errors import InputError
from microformers_serve import engine as engine_module
from microformers_serve.engine import CacheBudgetError, Engine, GenerationRequest


def _kernels_or_skip() -> None:
    kernels = pytest.importorskip("microformers_quant.kernels")
    if not kernels.native_available():
        pytest.skip("the microformers-quant kernels cannot be built here")


@pytest.fixture(scope="module")
def quantized(tiny_llama: Path) -> tuple[Any, Any]:
    _kernels_or_skip()
    tokenizer = microformers.AutoTokenizer.from_pretrained(tiny_llama)
    model = microformers.AutoModelForCausalLM.from_pretrained(tiny_llama, quantization_config={"quant_method": "int8"})
    return tokenizer, model


def _run(engine: Engine, jobs: list[tuple[list[int], int]]) -> list[GenerationRequest]:
    requests = []
    with one_thread():
        for prompt, new in jobs:
            collector = Collector()
            requests.append((GenerationRequest(prompt_ids=prompt, max_new_tokens=new, emit=collector), collector))
            engine.submit(requests[-1][0])
        for _request, collector in requests:
            assert collector.done.wait(60) and collector.final.kind == "done", collector.events[-1:]
    return [request for request, _ in requests]


def test_one_quantized_request_decodes_through_the_native_step_like_generate(quantized: Any) -> None:
    tokenizer, model = quantized
    engine = Engine(model, tokenizer, max_batch_size=4)
    assert "native decode step" in engine.decode_path
    (request,) = _run(engine, [([5, 6, 7, 8], 20)])
    assert engine.native_steps == engine.stats()["steps"] > 0
    # generate() decodes the quantized model through the same native step; the prefill differs in shape
    assert_similar_tokens(request.output_ids, *scored_greedy(model, [5, 6, 7, 8], 20))
    assert engine.cache_bytes() == 0  # the row's buffers, written in place by the native step, are freed
    engine.drain()


def test_more_rows_than_native_rows_decode_batched_and_still_equal_generate(quantized: Any) -> None:
    tokenizer, model = quantized
    engine = Engine(model, tokenizer, max_batch_size=4, native_rows=1)
    jobs = [([5, 6, 7], 30), ([8, 9], 12), ([10, 11, 12, 13], 6)]
    requests = _run(engine, jobs)
    steps = engine.stats()["steps"]
    assert 0 < engine.native_steps < steps  # batched while several ran, native once one was left
    for request, (prompt, new) in zip(requests, jobs, strict=True):
        assert_similar_tokens(request.output_ids, *scored_greedy(model, prompt, new))
    engine.drain()


@pytest.mark.parametrize("growth", [engine_module.ROW_GROWTH, 4])
def test_staggered_quantized_requests_decoded_together_natively_equal_generate_alone(
    quantized: Any, monkeypatch: pytest.MonkeyPatch, growth: int
) -> None:
    """Rows join and leave between steps: the slab the native step decodes is rebuilt around them (each row's
    positions right-aligned, a mask keeping it to its own), and every answer is what generate() makes alone.
    With a growth of 4 positions the slab also fills up and is rebuilt larger every few steps."""
    monkeypatch.setattr(engine_module, "ROW_GROWTH", growth)
    tokenizer, model = quantized
    rng = random.Random(1)
    jobs = [([rng.randrange(3, 500) for _ in range(rng.randrange(1, 40))], rng.randrange(3, 40)) for _ in range(9)]
    engine = Engine(model, tokenizer, max_batch_size=4, native_rows=4)
    requests = []
    with one_thread():
        for i, (prompt, new) in enumerate(jobs):
            collector = Collector()
            requests.append((GenerationRequest(prompt_ids=prompt, max_new_tokens=new, emit=collector), collector))
            engine.submit(requests[-1][0])
            time.sleep(0.003 * (i % 3))
        for _request, collector in requests:
            assert collector.done.wait(60) and collector.final.kind == "done", collector.events[-1:]
    assert engine.native_steps == engine.stats()["steps"] < sum(new for _, new in jobs)  # native, and batched
    for (request, _), (prompt, new) in zip(requests, jobs, strict=True):
        assert_similar_tokens(request.output_ids, *scored_greedy(model, prompt, new))
    assert engine.cache_bytes() == 0  # the rows' buffers and the slab are freed
    engine.drain()


def test_a_failing_native_batch_is_rerun_row_by_row_without_losing_any_rows_positions(quantized: Any) -> None:
    """A batched native step that raises is re-run one row at a time (each its own slab): every row's positions
    decoded so far, held only in the batch's slab, must come along, so the answers stay what generate() makes."""
    tokenizer, model = quantized
    engine = Engine(model, tokenizer, max_batch_size=4)
    native = engine._native
    assert native is not None
    real, batched = native.step, []

    class FailsOnce:
        def layers(self, embeds: torch.Tensor, *args: Any) -> torch.Tensor | None:
            if embeds.shape[0] > 1:
                batched.append(embeds.shape[0])
                if len(batched) == 6:
                    raise RuntimeError("a fault in the batched step")
            return real.layers(embeds, *args)

    native.step = FailsOnce()
    jobs = [([5, 6, 7], 20), ([8, 9], 18), ([10, 11, 12, 13], 16)]
    requests = _run(engine, jobs)
    assert len(batched) > 6 and engine.native_steps == engine.stats()["steps"]  # batched again after the re-run
    for request, (prompt, new) in zip(requests, jobs, strict=True):
        assert_similar_tokens(request.output_ids, *scored_greedy(model, prompt, new))
    engine.drain()


def test_rows_that_overflow_or_fail_in_the_native_step_are_retired_alone_and_the_rest_stay_native(
    quantized: Any,
) -> None:
    """Issue #42 item 1 on the native slab path: a request whose scores overflow (temperature 1e-36 with negative
    penalties, below what the HTTP layer admits), one whose rows of the native step come out NaN and one whose
    native step raises each end alone with an error; the others are decoded natively to what generate() makes
    alone, and every row's buffers and the slab are freed."""
    tokenizer, model = quantized
    engine = Engine(model, tokenizer, max_batch_size=8)
    native = engine._native
    assert native is not None
    real = native.step
    overflowing = GenerationRequest(
        prompt_ids=[40, 41], max_new_tokens=400, emit=Collector(), temperature=1e-36, frequency_penalty=-2.0,
        presence_penalty=-2.0, seed=0,
    )  # fmt: skip
    poisoned = GenerationRequest(prompt_ids=[50, 51, 52], max_new_tokens=60, emit=Collector())
    breaking = GenerationRequest(prompt_ids=[60, 61], max_new_tokens=60, emit=Collector())

    class Faulty:  # the real native step, with a fault in the poisoned and breaking rows after a few tokens
        def layers(self, embeds: torch.Tensor, *args: Any) -> torch.Tensor | None:
            rows = engine._stepping
            if any(r is breaking and len(r.output_ids) >= 6 for r in rows):
                raise RuntimeError("a fault in this row's native step")
            hidden = real.layers(embeds, *args)
            for index, row in enumerate(rows):
                if row is poisoned and len(row.output_ids) >= 4 and hidden is not None:
                    hidden = hidden.clone()
                    hidden[index] = float("nan")
            return hidden

    native.step = Faulty()
    mates = [([5, 6, 7], 40), ([8, 9], 30), ([10], 45)]
    mate_requests = [GenerationRequest(prompt_ids=p, max_new_tokens=n, emit=Collector()) for p, n in mates]
    everyone = [mate_requests[0], overflowing, mate_requests[1], poisoned, breaking, mate_requests[2]]
    with one_thread():
        for request in everyone:
            engine.submit(request)
        for request in everyone:
            assert request.emit.done.wait(120)
    native.step = real
    assert overflowing.emit.final.kind == "error" and "not finite" in overflowing.emit.final.text
    assert 1 < len(overflowing.output_ids) < 400  # it failed while decoding, not at admission
    assert poisoned.emit.final.kind == "error" and len(poisoned.output_ids) == 4  # its NaN step chose nothing
    assert breaking.emit.final.kind == "error" and "a fault in this row's native step" in breaking.emit.final.text
    assert engine.native_steps == engine.stats()["steps"] > 0  # every step, the failing ones too, was native
    for request, (prompt, new) in zip(mate_requests, mates, strict=True):
        assert request.emit.final.kind == "done", request.emit.final
        assert_similar_tokens(request.output_ids, *scored_greedy(model, prompt, new))
    assert engine.stats()["kv_tokens_reserved"] == 0 and engine.cache_bytes() == 0
    engine.drain()


def test_a_slab_beyond_the_unpromised_kv_budget_is_not_built(quantized: Any) -> None:
    """The slab is memory beside the rows' own buffers: with the whole budget promised to the requests, each
    step decodes batched from the rows' buffers instead, and the answers stay the same."""
    tokenizer, model = quantized
    jobs = [([5, 6, 7], 12), ([8, 9], 9)]
    probe = Engine(model, tokenizer, max_batch_size=4)
    budget = sum(probe.cache_tokens(len(prompt), new) for prompt, new in jobs)
    probe.drain()
    engine = Engine(model, tokenizer, max_batch_size=4, max_kv_tokens=budget)
    requests = _run(engine, jobs)
    assert engine.native_steps == 0 and engine.stats()["steps"] > 0
    for request, (prompt, new) in zip(requests, jobs, strict=True):
        assert_similar_tokens(request.output_ids, *scored_greedy(model, prompt, new))
    _run(engine, [([5, 6, 7], 4)])  # alone it leaves room for its slab
    assert engine.native_steps > 0
    engine.drain()


def test_a_native_step_that_cannot_run_is_dropped_for_the_batched_step(
    quantized: Any, caplog: pytest.LogCaptureFixture
) -> None:
    tokenizer, model = quantized
    engine = Engine(model, tokenizer, max_batch_size=4)
    native = engine._native
    assert native is not None
    native.step = type("Refusing", (), {"layers": staticmethod(lambda *args: None)})()  # as for partial rotary
    with caplog.at_level("WARNING", logger="microformers"):
        (request,) = _run(engine, [([5, 6, 7, 8], 10)])
    assert engine.native_steps == 0 and engine._native is None
    assert "batched eager step from now on" in caplog.text
    assert "native" not in engine.decode_path.split(";")[0]
    assert_similar_tokens(request.output_ids, *scored_greedy(model, [5, 6, 7, 8], 10))
    engine.drain()


def test_float_requests_decode_together_through_the_float_step_like_generate_alone(reference: Any) -> None:
    tokenizer, model = reference
    engine = Engine(model, tokenizer, max_batch_size=4)
    assert engine._native is not None and engine.decode_path.startswith("decoding: the native decode step")
    rng = random.Random(7)
    jobs = [([rng.randrange(3, 500) for _ in range(n)], new) for n, new in ((5, 16), (11, 9), (3, 20))]
    requests = _run(engine, jobs)
    assert engine.native_steps == engine.stats()["steps"] > 0  # every step: the SDK's float step over the slab
    for request, (prompt, new) in zip(requests, jobs, strict=True):
        assert_similar_tokens(request.output_ids, *scored_greedy(model, prompt, new))
    engine.drain()


def test_a_model_without_a_native_step_says_it_decodes_batched(reference: Any, tiny_llama: Path) -> None:
    tokenizer, model = reference
    engine = Engine(model, tokenizer, max_batch_size=2, native_rows=0)
    assert engine.decode_path.endswith("(the native decode step is off: native_rows=0)")
    engine.drain()
    bf16 = microformers.AutoModelForCausalLM.from_pretrained(tiny_llama, dtype=torch.bfloat16)  # (no float step)
    engine = Engine(bf16, tokenizer, max_batch_size=2)
    assert engine._native is None and engine.decode_path == (
        "decoding: one batched eager forward over every running row, each attending over its own cache"
    )
    engine.drain()


def test_a_kv_budget_larger_than_free_memory_is_refused_with_the_largest_that_fits(
    reference: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    tokenizer, model = reference
    monkeypatch.setattr(engine_module, "free_memory", lambda device: 1 << 20)
    per_token = engine_module.kv_bytes_per_token(model)
    fits = (1 << 20) // per_token
    with pytest.raises(InputError, match=rf"--max-kv-tokens {fits + 1} .*pass --max-kv-tokens {fits} or less"):
        Engine(model, tokenizer, max_kv_tokens=fits + 1)
    engine = Engine(model, tokenizer, max_kv_tokens=fits)  # the largest that fits is taken
    assert engine.max_kv_tokens == fits
    engine.drain()


def test_a_huge_max_batch_size_allocates_nothing_and_stays_within_the_kv_budget(
    reference: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows get cache buffers only as they run, and admission is bounded by a KV budget taken from the free
    memory, so --max-batch-size far beyond what memory holds is harmless: requests past the budget get 429."""
    tokenizer, model = reference
    free = 1 << 22
    monkeypatch.setattr(engine_module, "free_memory", lambda device: free)
    engine = Engine(model, tokenizer, max_batch_size=1_000_000, max_queue=1_000_000)
    assert engine.max_kv_tokens == max(engine.context_length, (free // 2) // engine.kv_bytes_per_token)
    needed = engine.cache_tokens(8, 8)
    taken = 0
    with engine._condition, pytest.raises(CacheBudgetError) as refused:  # the loop admits nothing meanwhile
        for _ in range(engine.max_kv_tokens + 1):  # more requests than the budget could ever hold
            engine.submit(GenerationRequest(prompt_ids=[5] * 8, max_new_tokens=8, emit=lambda event: None))
            taken += 1
    assert refused.value.retry and taken == engine.max_kv_tokens // needed
    engine.close()


def _parser() -> argparse.ArgumentParser:
    from microformers_serve.commands import serve_command

    parser = argparse.ArgumentParser(prog="microformers serve")
    serve_command(parser)
    return parser


def test_threads_zero_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        _parser().parse_args(["--threads", "0"])
    assert exited.value.code == 2
    assert "argument --threads: 0 threads cannot run anything" in capsys.readouterr().err


def _args(**flags: object) -> argparse.Namespace:
    values = {
        "model": "/nonexistent/model", "gguf_file": None, "quantize": None, "dtype": None, "model_name": None,
        "max_batch_size": 4, "max_queue": 4, "max_body_bytes": 1 << 20, "pack_weights": False, "device": "cpu",
    }  # fmt: skip
    return argparse.Namespace(**{**values, **flags})


@pytest.mark.parametrize("method", ["int8", "gguf"])
def test_quantize_off_the_cpu_is_refused_before_loading(monkeypatch: pytest.MonkeyPatch, method: str) -> None:
    from microformers_serve.commands import load_server

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(InputError, match=rf"--quantize {method} .*CPU only.*--device cuda:0.*--device cpu"):
        load_server(_args(quantize=method, device="cuda:0"))


def test_device_meta_is_refused_before_loading() -> None:
    from microformers_serve.commands import load_server

    with pytest.raises(InputError, match="--device meta holds no weight values"):
        load_server(_args(device="meta"))


def _load(folder: Path, **flags: object) -> Any:
    from microformers_serve.commands import load_server

    return load_server(_args(model=str(folder), **flags))


def test_native_rows_flag_reaches_the_engine_and_zero_turns_the_native_step_off(tiny_llama: Path) -> None:
    _kernels_or_skip()
    server = _load(tiny_llama, quantize="int8", native_rows=0)
    assert server.engine.native_rows == 0 and "native decode step is off" in server.engine.decode_path
    server.engine.drain()
    server = _load(tiny_llama, quantize="int8")
    assert server.engine.native_rows == 4  # every running row: --max-batch-size
    server.engine.drain()


def test_negative_native_rows_are_refused(reference: Any, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match="native_rows must be >= 0"):
        Engine(reference[1], reference[0], native_rows=-1)
    with pytest.raises(SystemExit):
        _parser().parse_args(["--native-rows", "-1"])
    assert "argument --native-rows: -1 must be >= 0" in capsys.readouterr().err


def test_native_rows_for_a_model_without_a_native_step_is_refused(tiny_llama: Path) -> None:
    with pytest.raises(InputError, match="--native-rows 3 .*this model has none.*drop --native-rows"):
        _load(tiny_llama, native_rows=3, dtype="bfloat16")  # (the float step is float32's)


def test_serve_says_once_at_startup_which_step_decodes(tiny_llama: Path) -> None:
    from serve_helpers import ServerProcess

    _kernels_or_skip()
    server = ServerProcess(tiny_llama, "--quantize", "int8")
    server.stop()
    assert server.process.stdout is not None
    lines = [line for line in server.process.stdout.read().splitlines() if "decoding:" in line]
    assert len(lines) == 1 and "the native decode step (what generate() uses) for every step" in lines[0], lines
