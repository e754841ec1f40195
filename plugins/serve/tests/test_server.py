"""A real ``microformers serve`` process on a free port, driven with the official ``openai`` client."""

from __future__ import annotations

import concurrent.futures
import json
import time
from typing import Any

import pytest
import torch

openai = pytest.importorskip("openai", reason="the openai client is a test extra (requirements-test.txt)")
httpx = pytest.importorskip("httpx", reason="httpx is a test extra (requirements-test.txt)")

from serve_helpers import CONTEXT, ServerProcess, assert_similar_text, scored_greedy  # noqa: E402

QUESTIONS = [
    "What is the capital of France?",
    "Tell me a story.",
    "hi",
    "Write a poem about the sea, with rhymes and at least four lines, please.",
    "¿Qué hora es?",
    "Summarise: the quick brown fox jumps over the lazy dog.",
    "2 + 2 = ?",
    "请用中文回答。",
]


def expected_tokens(reference: tuple[Any, Any], content: str, max_tokens: int) -> tuple[list[int], list[torch.Tensor]]:
    """The tokens ``generate`` makes for this one request alone (greedy), with the scores that chose them."""
    tokenizer, model = reference
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": content}], add_generation_prompt=True, return_dict=True
    )
    return scored_greedy(model, list(ids["input_ids"]), max_tokens)


def assert_answers_like_generate(reference: Any, content: str, max_tokens: int, text: str, count: int | None) -> bool:
    """The server's engine (other shapes than ``generate`` alone): the same answer up to a near tie; where the text
    is the same, as many tokens (``count``, if given). Returns whether the text is the same."""
    new, scores = expected_tokens(reference, content, max_tokens)
    assert_similar_text(text, new, scores, reference[0])
    same = text == reference[0].decode(new, skip_special_tokens=True)
    if same and count is not None:
        assert count == len(new)
    return same


def chat(client: Any, content: str, **kwargs: Any) -> Any:
    return client.chat.completions.create(
        model=_model(client), messages=[{"role": "user", "content": content}], **kwargs
    )


def _model(client: Any) -> str:
    return client.models.list().data[0].id


def health(server: ServerProcess) -> dict[str, Any]:
    return httpx.get(f"{server.base_url}/health", timeout=10).json()


def test_models_and_health(client: Any, server: ServerProcess, tiny_llama: Any) -> None:
    models = client.models.list().data
    assert [m.id for m in models] == [str(tiny_llama)]
    assert health(server)["status"] == "ok"


def test_chat_equals_generate_and_counts_usage(client: Any, reference: Any) -> None:
    answer = chat(client, QUESTIONS[0], max_tokens=12, temperature=0)
    count = answer.usage.completion_tokens
    assert_answers_like_generate(reference, QUESTIONS[0], 12, answer.choices[0].message.content, count)
    assert answer.choices[0].message.role == "assistant"
    assert answer.choices[0].finish_reason == ("length" if count == 12 else "stop")
    tokenizer = reference[0]
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": QUESTIONS[0]}], add_generation_prompt=True, return_dict=True
    )
    assert answer.usage.prompt_tokens == len(prompt["input_ids"])
    assert answer.usage.total_tokens == answer.usage.prompt_tokens + count


def test_streaming_chat_matches_non_streaming(client: Any, reference: Any) -> None:
    stream = chat(
        client, QUESTIONS[1], max_tokens=20, temperature=0, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert_answers_like_generate(reference, QUESTIONS[1], 20, text, None)
    finals = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finals) == 1
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0


def test_completions_plain_and_streamed(client: Any, reference: Any) -> None:
    tokenizer, model = reference
    prompt = "The quick brown fox"
    new, scores = scored_greedy(model, tokenizer(prompt)["input_ids"], 15)
    result = client.completions.create(model=_model(client), prompt=prompt, max_tokens=15, temperature=0)
    # the server's engine against generate alone: other shapes, so the same text up to a near tie
    assert_similar_text(result.choices[0].text, new, scores, tokenizer)
    streamed = client.completions.create(model=_model(client), prompt=prompt, max_tokens=15, temperature=0, stream=True)
    # exact: the same request alone through the same engine path and shapes, streamed or not
    assert "".join(c.choices[0].text for c in streamed) == result.choices[0].text


def test_stop_strings_cut_the_answer(client: Any, reference: Any) -> None:
    full = chat(client, QUESTIONS[3], max_tokens=30, temperature=0).choices[0].message.content
    assert_answers_like_generate(reference, QUESTIONS[3], 30, full, None)
    stop = full[8:10]
    cut = full[: full.index(stop)]
    answer = chat(client, QUESTIONS[3], max_tokens=30, temperature=0, stop=[stop, "never-appears"])
    # exact: the same request alone through the same engine path and shapes, cut at the stop string
    assert answer.choices[0].message.content == cut
    assert answer.choices[0].finish_reason == "stop"
    stream = chat(client, QUESTIONS[3], max_tokens=30, temperature=0, stop=stop, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == cut


def test_seed_makes_sampling_reproducible(client: Any) -> None:
    runs = [chat(client, QUESTIONS[2], max_tokens=24, temperature=1.0, top_p=0.9, seed=s) for s in (7, 7, 8)]
    texts = [r.choices[0].message.content for r in runs]
    assert texts[0] == texts[1]  # exact: the same request alone, the same engine path and shapes, the same seed
    assert texts[0] != texts[2]


def test_sixteen_concurrent_requests_each_equal_generate(client: Any, reference: Any, server: ServerProcess) -> None:
    jobs = [(QUESTIONS[i % len(QUESTIONS)] + " " * (i // len(QUESTIONS)), 8 + 5 * i) for i in range(16)]

    def run(index: int) -> tuple[str, int]:
        time.sleep(0.01 * (index % 4))  # staggered arrivals: requests join a batch that is already running
        content, max_tokens = jobs[index]
        answer = chat(client, content, max_tokens=max_tokens, temperature=0)
        return answer.choices[0].message.content, answer.usage.completion_tokens

    steps_before = health(server)["steps"]
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        results = list(pool.map(run, range(16)))
    steps = health(server)["steps"] - steps_before
    for (content, max_tokens), (text, count) in zip(jobs, results, strict=True):
        # requests decoded together against each alone: other shapes, so the same answers up to a near tie
        assert_answers_like_generate(reference, content, max_tokens, text, count)
    # Batched: far fewer decoding steps than the requests' tokens one after another.
    assert steps < sum(count for _, count in results) / 2


def test_client_disconnect_frees_the_slot(server: ServerProcess, client: Any) -> None:
    body = {"model": _model(client), "messages": [{"role": "user", "content": "go"}], "max_tokens": CONTEXT - 20,
            "temperature": 0, "stream": True}  # fmt: skip
    steps_before = health(server)["steps"]
    with httpx.stream("POST", f"{server.base_url}/v1/chat/completions", json=body, timeout=30) as response:
        lines = response.iter_lines()
        received = [next(lines) for _ in range(6)]
    assert any(line.startswith("data: ") for line in received)
    deadline = time.monotonic() + 10
    while health(server)["running"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert health(server)["running"] == 0
    assert health(server)["steps"] - steps_before < CONTEXT - 100  # it stopped long before its max_tokens
    # The same for a non-streamed request whose client gives up.
    steps_before = health(server)["steps"]
    plain = {"model": body["model"], "prompt": "go", "max_tokens": CONTEXT - 20, "temperature": 0}
    # The client gives up after 0.2 s without a byte; the whole completion takes about 1 s on a fast idle
    # machine (1.0 s here let it finish first on one) and longer under load.
    with pytest.raises(httpx.TimeoutException):
        httpx.post(f"{server.base_url}/v1/completions", json=plain, timeout=0.2)
    deadline = time.monotonic() + 10
    while health(server)["running"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert health(server)["running"] == 0
    assert health(server)["steps"] - steps_before < CONTEXT - 100
    assert chat(client, "still there?", max_tokens=3, temperature=0).choices[0].finish_reason in ("length", "stop")


def _post(server: ServerProcess, path: str, **kwargs: Any) -> httpx.Response:
    return httpx.post(f"{server.base_url}{path}", timeout=30, **kwargs)


def _error(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error


def test_error_responses(server: ServerProcess, client: Any, reference: Any) -> None:
    model = _model(client)
    messages = [{"role": "user", "content": "hi"}]
    assert _error(_post(server, "/v1/chat/completions", content=b'{"model": '), 400)["code"] == "invalid_json"
    assert _error(_post(server, "/v1/chat/completions", content=b"\xff\xfe\x00"), 400)["code"] == "invalid_encoding"
    assert _error(_post(server, "/v1/chat/completions", content=b"[1, 2]"), 400)["code"] == "invalid_json"
    big = json.dumps({"model": model, "messages": [{"role": "user", "content": "x" * 70000}]})
    assert _error(_post(server, "/v1/chat/completions", content=big.encode()), 413)["code"] == "body_too_large"
    assert _error(httpx.get(f"{server.base_url}/v1/nothing-here"), 404)["code"] == "not_found"
    # numbers and nesting Python's json cannot read: 400, not 500
    digits = b'{"model": "m", "messages": [], "max_tokens": ' + b"9" * 5000 + b"}"
    assert _error(_post(server, "/v1/chat/completions", content=digits), 400)["code"] == "invalid_json"
    deep = b'{"model": "m", "messages": ' + b"[" * 30000 + b"]" * 30000 + b"}"
    assert _error(_post(server, "/v1/chat/completions", content=deep), 400)["code"] == "invalid_json"
    # a prompt that cannot fit the context is refused by its length, before it is tokenized
    long_prompt = json.dumps({"model": model, "prompt": "x" * (CONTEXT * 32 + 1), "max_tokens": 1}).encode()
    refused = _error(_post(server, "/v1/completions", content=long_prompt), 400)
    assert refused["param"] == "prompt" and "characters" in refused["message"]

    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="gpt-4", messages=messages)
    assert info.value.body["param"] == "model" and "gpt-4" in info.value.body["message"]
    cases: list[tuple[dict[str, Any], str]] = [
        ({"temperature": "hot"}, "temperature"),
        ({"temperature": 3.5}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": -5}, "max_tokens"),
        ({"max_completion_tokens": 0}, "max_completion_tokens"),
        ({"n": 2}, "n"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"seed": "x"}, "seed"),
        ({"logprobs": True}, "logprobs"),
        ({"stream_options": {"include_usage": True}}, "stream_options"),
        ({"extra_body": {"frobnicate": 1}}, "frobnicate"),
        ({"temperature": 1e-36}, "temperature"),  # would overflow the scores: below the 1e-3 floor
        ({"temperature": 1e-300}, "temperature"),
        ({"stop": ["x" * 600]}, "stop"),  # over 512 characters
        ({"extra_body": {"temperature": [[[[[[[[1]]]]]]]]}}, "temperature"),
    ]
    for extra, param in cases:
        with pytest.raises(openai.BadRequestError) as info:
            client.chat.completions.create(model=model, messages=messages, **extra)
        assert info.value.body["param"] == param, (extra, info.value.body)
    for bad_messages, param in (([], "messages"), ([{"role": "robot", "content": "x"}], "messages[0].role")):
        with pytest.raises(openai.BadRequestError) as info:
            client.chat.completions.create(model=model, messages=bad_messages)
        assert info.value.body["param"] == param

    # A prompt longer than the context: 400 naming the limit.
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=model, prompt=[5] * (CONTEXT + 10), max_tokens=4)
    assert info.value.body["code"] == "context_length_exceeded" and str(CONTEXT) in info.value.body["message"]
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=model, prompt=[99999], max_tokens=4)
    assert info.value.body["param"] == "prompt"
    # An absurd max_tokens is clamped to the room left in the context, and the response says so.
    raw = client.completions.with_raw_response.create(
        model=model, prompt=[5] * (CONTEXT - 6), max_tokens=10**9, temperature=0
    )
    body = json.loads(raw.text)
    assert body["usage"]["completion_tokens"] <= 6 and "clamped to 6" in body["warnings"][0]
    assert "clamped" in raw.headers["x-microformers-warning"]
    with pytest.raises(openai.BadRequestError) as info:
        client.embeddings.create(model=model, input="hi")
    assert info.value.body["code"] == "wrong_endpoint"

    # None of it stalled the engine: the server still answers exactly as generate does.
    answer = chat(client, QUESTIONS[6], max_tokens=10, temperature=0)
    assert_answers_like_generate(reference, QUESTIONS[6], 10, answer.choices[0].message.content, None)
    assert health(server)["running"] == 0


def test_queue_full_is_429_and_sigterm_drains(tiny_llama: Any) -> None:
    # the batched eager step (--native-rows 0): the tiny model's native step would answer the running request
    # before the other two arrive, and the test needs its slot taken while they do
    small = ServerProcess(tiny_llama, "--max-batch-size", "1", "--max-queue", "1", "--native-rows", "0")
    try:
        url = f"{small.base_url}/v1/chat/completions"
        model = httpx.get(f"{small.base_url}/v1/models").json()["data"][0]["id"]
        long = {"model": model, "messages": [{"role": "user", "content": "go"}], "max_tokens": 400, "temperature": 0, "stream": True}  # fmt: skip
        with httpx.stream("POST", url, json=long, timeout=60) as running:
            lines = running.iter_lines()
            next(lines)  # admitted and running: the single batch slot is taken
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                waiting = pool.submit(httpx.post, url, json={**long, "stream": False, "max_tokens": 3}, timeout=60)
                deadline = time.monotonic() + 10
                while httpx.get(f"{small.base_url}/health").json()["waiting"] == 0 and time.monotonic() < deadline:
                    time.sleep(0.02)
                refused = httpx.post(url, json={**long, "stream": False}, timeout=30)
                assert _error(refused, 429)["code"] == "queue_full"
                assert refused.headers["retry-after"] == "1"
                # SIGTERM: the waiting request is refused, the running stream still finishes.
                small.process.send_signal(15)
                rest = list(lines)
                assert _error(waiting.result(), 503)["code"] == "shutting_down"
        chunks = [json.loads(line[6:]) for line in rest if line.startswith("data: {")]
        assert rest[-1] == "" or rest[-1].startswith("data: [DONE]") or "data: [DONE]" in rest
        assert chunks[-1]["choices"][0]["finish_reason"] in ("length", "stop")
        assert small.process.wait(timeout=60) in (0, -15)  # uvicorn re-raises SIGTERM after its graceful exit
    finally:
        small.stop()
