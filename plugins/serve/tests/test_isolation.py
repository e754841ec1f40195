"""One request never takes the others down, and each one's cache is its own: rows that fail are retired alone,
the KV budget is enforced at submission, and a row's buffers are sized by that row and freed when it ends."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
import torch
from serve_helpers import Collector, assert_similar_tokens, one_thread, scored_greedy

import microformers
from microformers_serve.engine import (
    ROW_GROWTH,
    CacheBudgetError,
    Engine,
    GenerationRequest,
    _partial_stop,
    _prefix_table,
)


@pytest.fixture(scope="module")
def engine_model(tiny_llama: Path) -> tuple[Any, Any]:
    tokenizer = microformers.AutoTokenizer.from_pretrained(tiny_llama)
    return tokenizer, microformers.AutoModelForCausalLM.from_pretrained(tiny_llama)


def request(prompt: list[int], new: int, **kwargs: Any) -> tuple[GenerationRequest, Collector]:
    collector = Collector()
    return GenerationRequest(prompt_ids=prompt, max_new_tokens=new, emit=collector, **kwargs), collector


def run_all(engine: Engine, jobs: list[tuple[GenerationRequest, Collector]]) -> None:
    with one_thread():
        for job, _ in jobs:
            engine.submit(job)
        for _, collector in jobs:
            assert collector.done.wait(120)


def assert_like_alone(reference: Any, job: GenerationRequest, collector: Collector) -> None:
    assert collector.final.kind == "done", collector.final
    # batch mates against each alone: other shapes, so the same tokens up to a near tie
    assert_similar_tokens(job.output_ids, *scored_greedy(reference[1], job.prompt_ids, job.max_new_tokens))


def test_a_request_whose_scores_overflow_mid_generation_is_retired_alone(engine_model: Any, reference: Any) -> None:
    # temperature 1e-36 with negative penalties: the repeated token's score grows by 2 a step until, divided by
    # the temperature, it overflows float32 (about 170 tokens in): that row fails inside the batched step
    tokenizer, model = engine_model
    engine = Engine(model, tokenizer, max_batch_size=4)
    hostile_job = request([40, 41], 400, temperature=1e-36, frequency_penalty=-2.0, presence_penalty=-2.0, seed=0)
    hostile, hostile_done = hostile_job
    mates = [request([5, 6, 7], 260), request([8, 9], 250)]
    run_all(engine, [mates[0], hostile_job, mates[1]])
    assert hostile_done.final.kind == "error" and "not finite" in hostile_done.final.text
    assert 1 < len(hostile.output_ids) < 400  # it failed in the batched step, not at admission
    for job, collector in mates:
        assert_like_alone(reference, job, collector)
    assert engine.stats()["kv_tokens_reserved"] == 0 and engine.cache_bytes() == 0
    engine.drain()


def test_a_row_with_nan_scores_or_a_failing_forward_is_retired_alone(engine_model: Any, reference: Any) -> None:
    tokenizer, model = engine_model
    # the batched eager step, whose head the hook below reaches (the native step's own is covered in
    # test_decode_path.py)
    engine = Engine(model, tokenizer, max_batch_size=8, native_rows=0)
    poisoned_job, breaking_job = request([50, 51, 52], 60), request([60, 61], 60)
    (poisoned, poisoned_done), (breaking, breaking_done) = poisoned_job, breaking_job
    mates = [request([5, 6, 7], 40), request([8, 9], 30), request([10], 45)]

    def fault(module: Any, inputs: Any, output: torch.Tensor) -> torch.Tensor:
        rows = engine._stepping
        if len(rows) != output.shape[0]:
            return output
        output = output.clone()
        for index, row in enumerate(rows):
            if row is poisoned and len(row.output_ids) >= 4:
                output[index] = float("nan")
            if row is breaking and len(row.output_ids) >= 6:
                raise RuntimeError("a fault in this row's forward")
        return output

    hook = model.get_output_embeddings().register_forward_hook(fault)
    try:
        run_all(engine, [mates[0], poisoned_job, mates[1], breaking_job, mates[2]])
    finally:
        hook.remove()
    assert poisoned_done.final.kind == "error" and len(poisoned.output_ids) == 4  # its NaN step chose nothing
    assert breaking_done.final.kind == "error" and "a fault in this row" in breaking_done.final.text
    for job, collector in mates:
        assert_like_alone(reference, job, collector)
    engine.drain()


def test_a_rows_cache_is_sized_by_that_row_and_freed_when_it_ends(engine_model: Any) -> None:
    tokenizer, model = engine_model
    engine = Engine(model, tokenizer, max_batch_size=16)
    held: list[int] = []

    class Measuring(Collector):
        def __call__(self, event: Any) -> None:  # runs on the engine thread, between steps
            held.append(engine.cache_bytes())
            super().__call__(event)

    collector = Measuring()
    job = GenerationRequest(prompt_ids=list(range(3, 53)), max_new_tokens=300, emit=collector)
    run_all(engine, [(job, collector)])
    positions = len(job.prompt_ids) + len(job.output_ids)
    assert len(job.output_ids) > 50  # long enough for the buffers to have grown
    # one row of at most 1.25x what it holds (plus one growth step), not max_batch_size rows
    assert max(held) <= (1.25 * positions + ROW_GROWTH) * engine.kv_bytes_per_token
    assert max(held) >= positions * engine.kv_bytes_per_token * 0.9
    assert engine.cache_bytes() == 0
    engine.drain()


def test_the_kv_budget_refuses_what_does_not_fit_and_frees_on_finish(engine_model: Any) -> None:
    tokenizer, model = engine_model
    engine = Engine(model, tokenizer, max_batch_size=4, max_kv_tokens=100)
    first, first_done = request([5, 6, 7, 8, 9, 10, 11, 12, 13, 14], 50)  # 60 tokens
    with one_thread():
        engine.submit(first)
        with pytest.raises(CacheBudgetError) as full:
            engine.submit(request([5] * 10, 50)[0])
        assert full.value.retry and full.value.needed == 60
        with pytest.raises(CacheBudgetError) as never:
            engine.submit(request([5] * 10, 200)[0])
        assert not never.value.retry
        assert first_done.done.wait(60)
        assert engine.stats()["kv_tokens_reserved"] == 0
        again, again_done = request([5] * 10, 50)
        engine.submit(again)
        assert again_done.done.wait(60) and again_done.final.kind == "done"
    engine.drain()


def test_the_default_kv_budget_holds_at_least_one_context(engine_model: Any) -> None:
    tokenizer, model = engine_model
    engine = Engine(model, tokenizer, max_batch_size=2, max_queue=3)
    assert engine.context_length <= engine.max_kv_tokens <= 5 * engine.context_length
    config = model.config
    per_layer = 2 * config.num_key_value_heads * (config.hidden_size // config.num_attention_heads) * 4
    assert engine.kv_bytes_per_token == config.num_hidden_layers * per_layer
    engine.drain()


def test_the_stop_string_hold_back_equals_the_plain_definition() -> None:
    rng = random.Random(0)
    for _ in range(2000):
        stop = "".join(rng.choice("ab") for _ in range(rng.randrange(1, 8)))
        text = "".join(rng.choice("abc") for _ in range(rng.randrange(0, 12)))
        if stop in text[-len(stop) :]:
            continue
        plain = next((n for n in range(min(len(stop) - 1, len(text)), 0, -1) if text.endswith(stop[:n])), 0)
        assert _partial_stop(text, stop, _prefix_table(stop)) == plain, (text, stop)


def test_a_model_that_attends_by_itself_gets_padded_states_and_still_equals_generate(engine_model: Any) -> None:
    # GPT-2 with reorder_and_upcast_attn computes attention itself instead of through the attention function:
    # the engine notices (its per-row states never reached ragged attention) and hands it zero-padded rows
    tokenizer = engine_model[0]
    torch.manual_seed(0)
    config = microformers.AutoConfig.for_model(
        "gpt2", vocab_size=len(tokenizer), n_embd=32, n_layer=2, n_head=4, n_positions=256,
        reorder_and_upcast_attn=True, eos_token_id=2, bos_token_id=1,
    )  # fmt: skip
    model = microformers.AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(0.0, 0.2)
    reference_model = microformers.AutoModelForCausalLM.from_config(config).eval()
    reference_model.load_state_dict(model.state_dict())
    engine = Engine(model, tokenizer, max_batch_size=4)
    jobs = [request([5, 6, 7], 20), request([8, 9], 15), request([10, 11, 12, 13], 25)]
    run_all(engine, jobs)
    assert engine._cache.stacked
    for job, collector in jobs:
        assert_like_alone((tokenizer, reference_model), job, collector)
    engine.drain()
