"""The batching engine in-process: staggered requests of different lengths, each equal to ``generate`` alone."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from serve_helpers import Collector, assert_similar_tokens, one_thread, scored_greedy

import microformers
from microformers_serve.engine import Engine, GenerationRequest, QueueFullError, RaggedCache


@pytest.fixture(scope="module")
def engine_model(tiny_llama: Path) -> tuple[Any, Any]:
    tokenizer = microformers.AutoTokenizer.from_pretrained(tiny_llama)
    return tokenizer, microformers.AutoModelForCausalLM.from_pretrained(tiny_llama)


def greedy(reference: tuple[Any, Any], prompt: list[int], new: int) -> tuple[list[int], list[torch.Tensor]]:
    return scored_greedy(reference[1], prompt, new)


def request(prompt: list[int], new: int, **kwargs: Any) -> tuple[GenerationRequest, Collector]:
    collector = Collector()
    return GenerationRequest(prompt_ids=prompt, max_new_tokens=new, emit=collector, **kwargs), collector


def test_staggered_requests_equal_generate_alone(engine_model: Any, reference: Any) -> None:
    tokenizer, model = engine_model
    rng = random.Random(0)
    prompts = [[rng.randrange(3, 500) for _ in range(rng.randrange(1, 60))] for _ in range(12)]
    lengths = [rng.randrange(3, 50) for _ in range(12)]
    engine = Engine(model, tokenizer, max_batch_size=4)  # fewer slots than requests: queueing, joining, retiring
    jobs = [request(p, n) for p, n in zip(prompts, lengths, strict=True)]
    with one_thread():
        for i, (job, _) in enumerate(jobs):
            engine.submit(job)
            time.sleep(0.002 * (i % 3))
        for _, collector in jobs:
            assert collector.done.wait(60)
    for (job, collector), prompt, new in zip(jobs, prompts, lengths, strict=True):
        # rows decoded together against each alone: other shapes, so the same tokens up to a near tie
        assert_similar_tokens(job.output_ids, *greedy(reference, prompt, new))
        made = job.output_ids
        assert collector.text == tokenizer.decode([t for t in made if t != 2], skip_special_tokens=True)
        assert collector.final.finish_reason == ("stop" if made[-1] == 2 else "length")
        assert collector.final.completion_tokens == len(made) and (made[-1] == 2 or len(made) == new)
    assert engine.stats()["running"] == 0
    assert engine.stats()["steps"] < sum(lengths)  # rows really were decoded together
    engine.drain()
    assert engine.join(10)


def test_cancel_and_stop_strings_leave_batch_mates_untouched(engine_model: Any, reference: Any) -> None:
    tokenizer, model = engine_model
    engine = Engine(model, tokenizer, max_batch_size=8)
    keep, keep_done = request([5, 6, 7, 8], 40)
    dropped, dropped_done = request([9, 10], 500)
    alone, scores = greedy(reference, [11, 12, 13], 30)
    full = tokenizer.decode(alone, skip_special_tokens=True)
    stop = full[6:8]
    stopped, stopped_done = request([11, 12, 13], 30, stop=[stop])
    with one_thread():
        for job in (keep, dropped, stopped):
            engine.submit(job)
        while len(dropped.output_ids) < 3:
            time.sleep(0.001)
        dropped.cancel()
        assert keep_done.done.wait(60) and stopped_done.done.wait(60)
    # batch mates against each alone: other shapes, so the same tokens up to a near tie
    assert_similar_tokens(keep.output_ids, *greedy(reference, [5, 6, 7, 8], 40))
    assert_similar_tokens(stopped.output_ids, alone[: len(stopped.output_ids)], scores)
    made = tokenizer.decode(stopped.output_ids, skip_special_tokens=True)  # the tokens up to the stop string
    assert stop in made and stopped_done.text == made[: made.index(stop)] and stopped_done.final.finish_reason == "stop"
    if stopped.output_ids == alone[: len(stopped.output_ids)]:
        assert stopped_done.text == full[: full.index(stop)]
    assert len(dropped.output_ids) < 100 and not dropped_done.done.is_set()  # retired without a reply
    stats = engine.stats()
    assert (stats["running"], stats["waiting"], stats["kv_tokens_reserved"]) == (0, 0, 0)
    assert engine.cache_bytes() == 0  # every row's buffers freed
    engine.drain()


def test_seeded_sampling_is_reproducible_alone_and_in_a_batch(engine_model: Any) -> None:
    tokenizer, model = engine_model
    engine = Engine(model, tokenizer, max_batch_size=8)

    def sample(seed: int, mates: int) -> list[int]:
        jobs = [request([20, 21, 22], 25, temperature=1.0, top_p=0.9, seed=seed)]
        jobs += [request([30 + i], 25, temperature=0.7, seed=100 + i) for i in range(mates)]
        with one_thread():
            for job, _ in jobs:
                engine.submit(job)
            for _, collector in jobs:
                assert collector.done.wait(60)
        return jobs[0][0].output_ids

    alone = sample(3, 0)
    assert sample(3, 0) == alone  # exact: the same request alone, the same path and shapes, run twice
    # among five batch mates: other shapes, so the same draws up to a near tie of the logits that decided them
    together = sample(3, 5)
    with torch.no_grad(), one_thread():
        logits = model(torch.tensor([[20, 21, 22, *alone]])).logits[0, 2:-1]
    assert_similar_tokens(together, alone, [row[None] for row in logits])
    assert sample(4, 0) != alone
    engine.drain()


def test_queue_limit_and_drain(engine_model: Any) -> None:
    tokenizer, model = engine_model
    engine = Engine(model, tokenizer, max_batch_size=1, max_queue=1)
    running, running_done = request([5], 300)
    waiting, waiting_done = request([6], 5)
    with one_thread():
        engine.submit(running)
        while not running.output_ids:
            time.sleep(0.001)
        engine.submit(waiting)
        with pytest.raises(QueueFullError):
            engine.submit(request([7], 5)[0])
        engine.drain()
        assert waiting_done.done.wait(10) and waiting_done.final.finish_reason == "shutting_down"
        assert running_done.done.wait(60) and running_done.final.kind == "done"  # finished, not refused
        assert engine.join(10)
    assert running_done.final.completion_tokens == len(running.output_ids) > 1


def test_ragged_cache_keeps_each_row_in_its_own_buffers() -> None:
    from microformers_sdk.cache import DynamicCache

    cache = RaggedCache()
    rows = []
    for length in (3, 5, 2):
        prefilled = DynamicCache()
        keys = torch.randn(1, 2, length, 4)
        prefilled.update(keys, keys + 1, 0)
        cache.add_row(prefilled, limit=length + 10)
        rows.append(keys)
    before = cache.nbytes()
    cache.remove_row(0)
    first_row = 2 * (2 * 13 * 4) * 4  # keys and values of 2 heads x 13 positions (its limit) x 4, float32
    assert cache.row_lengths == [5, 2] and cache.nbytes() == before - first_row  # its buffers are gone
    stored_keys, stored_values = cache.row_storage(0, 0)
    torch.testing.assert_close(stored_keys, rows[1], rtol=0, atol=0)
    torch.testing.assert_close(stored_values, rows[1] + 1, rtol=0, atol=0)
    torch.testing.assert_close(cache.row_storage(1, 0)[0], rows[2], rtol=0, atol=0)
    assert cache.row_capacity(1) == 12  # never more than the row's limit


def load_tiny_server(folder: Path, **flags: Any) -> Any:
    """``load_server`` as the CLI calls it, on ``folder`` with ``flags`` over the defaults."""
    import argparse

    from microformers_serve.commands import load_server

    defaults = {"gguf_file": None, "quantize": None, "dtype": None, "model_name": None, "pack_weights": False}
    args = {"model": str(folder), "max_batch_size": 4, "max_queue": 4, "max_body_bytes": 1 << 20, **defaults, **flags}
    return load_server(argparse.Namespace(**args))


def assert_served_like_generate(server: Any, model: Any) -> None:
    """Two concurrent requests through the engine give what ``model.generate`` gives for each alone."""
    jobs = [request([5, 6, 7], 12), request([8, 9], 9)]
    with one_thread():
        for job, _ in jobs:
            server.engine.submit(job)
        for job, collector in jobs:
            assert collector.done.wait(60)
            # batched rows against each alone: other shapes, so the same tokens up to a near tie
            assert_similar_tokens(job.output_ids, *scored_greedy(model, job.prompt_ids, job.max_new_tokens))
    server.engine.drain()


def test_quantize_flag_loads_int8_weights_and_still_equals_generate(tiny_llama: Path) -> None:
    server = load_tiny_server(tiny_llama, quantize="int8")
    assert server.model.config.quantization_config["quant_method"] == "int8"
    assert_served_like_generate(server, server.model)


def test_pack_weights_flag_packs_float_layers_and_still_equals_generate(tiny_llama: Path) -> None:
    from microformers.errors import InputError
    from microformers_sdk import PackedLinear

    with pytest.raises(InputError, match="--pack-weights.*--quantize"):
        load_tiny_server(tiny_llama, quantize="int8", pack_weights=True)
    server = load_tiny_server(tiny_llama, pack_weights=True)
    assert isinstance(server.model.model.layers[0].mlp.up_proj, PackedLinear)
    assert_served_like_generate(server, microformers.AutoModelForCausalLM.from_pretrained(tiny_llama))


def test_context_length_stops_where_cached_states_go_stale() -> None:
    """A model whose cache must be rebuilt past a length (Phi-3's LongRoPE) is served up to that length."""
    from types import SimpleNamespace

    from microformers_serve.engine import context_length

    class Stale:
        config = SimpleNamespace(max_position_embeddings=64, sliding_window=None)

        def cache_needs_recompute(self, past_length: int, total_length: int) -> bool:
            return total_length > 16 and past_length <= 16

    class Plain:
        config = SimpleNamespace(max_position_embeddings=64, sliding_window=32)

    assert context_length(Stale()) == 16
    assert context_length(Plain()) == 32
