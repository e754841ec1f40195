"""Batched prefill: prompts arriving together are prefilled in one packed forward, a long prompt is read in chunks
between decoding steps, and every answer stays what the request gets alone."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from serve_helpers import Collector, assert_similar_tokens, one_thread, scored_greedy

import microformers
from microformers_serve.engine import Engine, Event, GenerationRequest


@pytest.fixture(scope="module")
def engine_model(tiny_llama: Path) -> tuple[Any, Any]:
    tokenizer = microformers.AutoTokenizer.from_pretrained(tiny_llama)
    return tokenizer, microformers.AutoModelForCausalLM.from_pretrained(tiny_llama)


def request(prompt: list[int], new: int, **kwargs: Any) -> tuple[GenerationRequest, Collector]:
    collector = Collector()
    return GenerationRequest(prompt_ids=prompt, max_new_tokens=new, emit=collector, **kwargs), collector


def submit_together(engine: Engine, jobs: list[tuple[GenerationRequest, Collector]]) -> None:
    """Submit while holding the engine's lock: the loop finds every request waiting at once."""
    with engine._condition:  # reentrant: submit takes it too
        for job, _ in jobs:
            engine.submit(job)


def wait_all(jobs: list[tuple[GenerationRequest, Collector]]) -> None:
    for _, collector in jobs:
        assert collector.done.wait(120)


def assert_like_alone(model: Any, job: GenerationRequest, collector: Collector) -> None:
    assert collector.final.kind == "done", collector.final
    # packed with other prompts and decoded in a batch: other shapes, so the same tokens up to a near tie
    assert_similar_tokens(job.output_ids, *scored_greedy(model, job.prompt_ids, job.max_new_tokens))


def started(engine: Engine) -> Engine:
    """The engine once its loop has probed the model (a first request answered)."""
    job, collector = request([3, 4], 1)
    engine.submit(job)
    assert collector.done.wait(60)
    return engine


def test_concurrent_arrivals_are_prefilled_in_one_forward_and_answer_as_alone(engine_model: Any) -> None:
    tokenizer, model = engine_model
    engine = started(Engine(model, tokenizer, max_batch_size=8, prefill_group=512))
    assert engine.packed_prefill is True
    before = engine.prefill_forwards
    rng = random.Random(1)
    jobs = [request([rng.randrange(3, 500) for _ in range(rng.randrange(1, 40))], 12) for _ in range(6)]
    with one_thread():
        submit_together(engine, jobs)
        wait_all(jobs)
    assert engine.prefill_forwards - before == 1  # six prompts, far under the 512-token group: one forward
    for job, collector in jobs:
        assert_like_alone(model, job, collector)
    engine.drain()
    assert engine.join(10)


class FirstTokens(Engine):
    """An engine that notes, for each request, how many prefill forwards had run when its first token came."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.first_after: dict[int, int] = {}
        super().__init__(*args, **kwargs)

    def _accept(self, request: GenerationRequest, token: int) -> None:
        if not request.output_ids:
            self.first_after[id(request)] = self.prefill_forwards
        super()._accept(request, token)


def test_prompts_arriving_together_are_read_in_groups_and_the_first_get_their_first_tokens_sooner(
    engine_model: Any,
) -> None:
    tokenizer, model = engine_model
    engine = started(FirstTokens(model, tokenizer, max_batch_size=8, prefill_group=20))
    before = engine.prefill_forwards
    rng = random.Random(6)
    lengths = [12, 9, 25, 3, 8, 14]  # forwards close once they hold 20 tokens: [12, 9], [25], [3, 8, 14]
    jobs = [request([100 + i, *(rng.randrange(3, 500) for _ in range(n - 1))], 8) for i, n in enumerate(lengths)]
    with one_thread():
        submit_together(engine, jobs)
        wait_all(jobs)
    assert engine.prefill_forwards - before == 3
    # each request's first token is out once its own forward ran, before the later groups are read
    assert [engine.first_after[id(job)] - before for job, _ in jobs] == [1, 1, 2, 3, 3, 3]
    for job, collector in jobs:
        assert_like_alone(model, job, collector)
    engine.drain()
    assert engine.join(10)


def test_prefill_group_below_one_token_is_refused(engine_model: Any) -> None:
    tokenizer, model = engine_model
    with pytest.raises(ValueError, match="prefill_group must be >= 1"):
        Engine(model, tokenizer, prefill_group=0)


def test_prompts_over_the_chunk_are_split_across_forwards_and_answer_as_alone(engine_model: Any) -> None:
    tokenizer, model = engine_model
    engine = started(Engine(model, tokenizer, max_batch_size=8, prefill_chunk=16))
    before = engine.prefill_forwards
    rng = random.Random(2)
    lengths = [5, 30, 11, 47]  # 93 prompt tokens: chunks of 16 cut through three of them
    jobs = [request([rng.randrange(3, 500) for _ in range(n)], 10) for n in lengths]
    with one_thread():
        submit_together(engine, jobs)
        wait_all(jobs)
    assert engine.prefill_forwards - before == -(-sum(lengths) // 16)  # every forward full but the last
    for job, collector in jobs:
        assert_like_alone(model, job, collector)
    engine.drain()
    assert engine.join(10)


def test_running_streams_keep_decoding_while_a_long_prompt_is_read_in_chunks(engine_model: Any) -> None:
    tokenizer, model = engine_model
    engine = started(Engine(model, tokenizer, max_batch_size=4, prefill_chunk=8))
    running, running_done = request([7, 8, 9], 60)
    seen: dict[str, int] = {}
    long_prompt = [random.Random(3).randrange(3, 500) for _ in range(80)]
    long_done = Collector()

    def on_long(event: Event) -> None:  # on the engine thread: how far the running stream got meanwhile
        seen.setdefault("at_first_token", len(running.output_ids))
        long_done(event)

    long_job = GenerationRequest(prompt_ids=long_prompt, max_new_tokens=8, emit=on_long)
    with one_thread():
        engine.submit(running)
        while not running.output_ids:  # the running row is decoding before the long prompt arrives
            assert not running_done.done.wait(0.001)
        with engine._condition:
            engine.submit(long_job)
            seen["at_submit"] = len(running.output_ids)
        wait_all([(running, running_done), (long_job, long_done)])
    # 80 prompt tokens in chunks of 8: ten forwards, each followed by a decoding step of the running row
    assert seen["at_first_token"] - seen["at_submit"] >= 9
    assert_like_alone(model, running, running_done)
    assert_like_alone(model, long_job, long_done)
    engine.drain()
    assert engine.join(10)


def test_a_prompt_that_fails_in_a_packed_prefill_is_retired_alone(engine_model: Any) -> None:
    tokenizer, model = engine_model
    engine = started(Engine(model, tokenizer, max_batch_size=8))
    broken = request([5, 6, 10**6], 8)  # an id past the embedding table: the packed forward raises
    mates = [request([11, 12, 13], 10), request([14, 15], 10)]
    with one_thread():
        submit_together(engine, [mates[0], broken, mates[1]])
        wait_all([*mates, broken])
    assert broken[1].final.kind == "error" and "generation failed" in broken[1].final.text
    for job, collector in mates:  # prefilled alone again after the packed forward failed: still as alone
        assert_like_alone(model, job, collector)
    assert engine.stats()["running"] == engine.stats()["prefilling"] == 0
    engine.drain()
    assert engine.join(10)


def test_a_request_cancelled_between_chunks_frees_its_slot(engine_model: Any) -> None:
    tokenizer, model = engine_model
    engine = started(Engine(model, tokenizer, max_batch_size=2, prefill_chunk=4))
    long_job, long_done = request(list(range(3, 203)), 4)
    with engine._condition:
        engine.submit(long_job)
    while engine.stats()["prefill_forwards"] < 3:  # a few chunks in
        assert not long_done.done.wait(0.001)
    long_job.cancel()
    after, after_done = request([20, 21], 6)
    with one_thread():
        engine.submit(after)
        wait_all([(after, after_done)])
    assert not long_job.output_ids and not long_done.done.is_set()  # never answered: it went away
    assert engine.stats()["prefilling"] == 0 and engine.cache_bytes() == 0
    assert_like_alone(model, after, after_done)
    engine.drain()
    assert engine.join(10)


def test_prefill_chunk_below_one_token_is_refused(engine_model: Any) -> None:
    tokenizer, model = engine_model
    with pytest.raises(ValueError, match="prefill_chunk must be >= 1"):
        Engine(model, tokenizer, prefill_chunk=0)


def test_prompts_sharing_a_beginning_compute_it_once_and_answer_as_alone(engine_model: Any) -> None:
    tokenizer, model = engine_model
    engine = started(Engine(model, tokenizer, max_batch_size=8))
    rng = random.Random(4)
    system = [rng.randrange(3, 500) for _ in range(30)]  # a chat template's system prompt, say
    tails = [[rng.randrange(3, 500) for _ in range(n)] for n in (6, 9, 4)]
    first, first_done = request([*system, *tails[0]], 12)
    with one_thread():
        engine.submit(first)  # running (and holding the shared beginning) when the others arrive
        assert first_done.done.wait(60)
        running, running_done = request([*system, 77, 78], 40)
        engine.submit(running)
        while not running.output_ids:
            assert not running_done.done.wait(0.001)
        before = engine.prefill_tokens
        jobs = [request([*system, *tail], 12) for tail in tails[1:]]
        jobs.append(request([*system[:20], 99], 12))  # shares less: 20 positions
        jobs.append(request(list(system), 12))  # the whole prompt shared: its last token is still computed
        submit_together(engine, jobs)
        wait_all([*jobs, (running, running_done)])
    # each computes only what no earlier row holds: its own tail (the last token at least)
    assert engine.prefill_tokens - before == 9 + 4 + 1 + 1
    for job, collector in [*jobs, (running, running_done), (first, first_done)]:
        assert_like_alone(model, job, collector)
    engine.drain()
    assert engine.join(10)


def test_prompts_sharing_a_beginning_within_one_forward_copy_it_from_the_first(engine_model: Any) -> None:
    tokenizer, model = engine_model
    engine = started(Engine(model, tokenizer, max_batch_size=8))
    rng = random.Random(5)
    system = [rng.randrange(3, 500) for _ in range(25)]
    jobs = [request([*system, *[rng.randrange(3, 500) for _ in range(n)]], 10) for n in (3, 7, 5)]
    before_tokens, before_forwards = engine.prefill_tokens, engine.prefill_forwards
    with one_thread():
        submit_together(engine, jobs)
        wait_all(jobs)
    assert engine.prefill_forwards - before_forwards == 1
    assert engine.prefill_tokens - before_tokens == 25 + 3 + 7 + 5  # the beginning computed once, by the first
    for job, collector in jobs:
        assert_like_alone(model, job, collector)
    engine.drain()
    assert engine.join(10)


def test_a_request_arriving_during_a_prefill_is_prefilled_before_the_next_decoding_step(engine_model: Any) -> None:
    tokenizer, model = engine_model
    engine = started(Engine(model, tokenizer, max_batch_size=4))
    first_done, late_done = Collector(), Collector()
    late = GenerationRequest(prompt_ids=[40, 41, 42], max_new_tokens=6, emit=late_done)
    seen: dict[str, int] = {}

    def on_first(event: Event) -> None:  # the first token comes out of the prefill forward: the other arrives now
        if "submitted" not in seen:
            seen["submitted"] = 1
            engine.submit(late)
        first_done(event)

    def on_late(event: Event) -> None:
        seen.setdefault("first_has", len(first.output_ids))
        late_done(event)

    late.emit = on_late
    first = GenerationRequest(prompt_ids=[30, 31, 32, 33], max_new_tokens=6, emit=on_first)
    with one_thread():
        engine.submit(first)
        wait_all([(first, first_done), (late, late_done)])
    assert seen["first_has"] == 1  # no decoding step ran between the two prefills
    assert_like_alone(model, first, first_done)
    assert_like_alone(model, late, late_done)
    engine.drain()
    assert engine.join(10)
