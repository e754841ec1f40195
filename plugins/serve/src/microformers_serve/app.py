"""The HTTP side: an OpenAI-compatible FastAPI app in front of the engine (or an embedding model).

Bodies are read and validated by hand, so every problem becomes an OpenAI error object
(``{"error": {"message", "type", "param", "code"}}``) that names the field, with the status the
official client expects: 400 for bad input, 404 for an unknown model or route, 408 for a body not
read in time, 413 for a body over the limit, 429 (with ``Retry-After``) when the queue or the KV cache
budget is full, 503 while shutting down. Nothing here blocks the engine thread: requests only reach
it once they are valid. Every size is checked before the work it costs: body bytes before parsing,
prompt characters before tokenizing, embedding tokens before the forward.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import reprlib
import struct
import threading
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from sse_starlette.sse import EventSourceResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from .engine import (
    CacheBudgetError,
    Engine,
    Event,
    GenerationRequest,
    QueueFullError,
    ShuttingDownError,
    context_length,
)

DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
DEFAULT_READ_TIMEOUT_S = 30.0  # a body not read in full by then gets 408
MAX_STOP_STRINGS = 4
MAX_STOP_CHARS = 512
# A temperature below this is refused (0 asks for greedy): at 1e-3 two scores 0.1 apart already differ by
# e^-100 in probability, so a smaller one only risks overflowing the scores (1e-36 turns them to inf).
MIN_TEMPERATURE = 1e-3
# Text longer than this many characters per token of room is refused before it is tokenized: no tokenizer
# this project serves makes tokens that long on average, so such a text cannot fit anyway.
MAX_CHARS_PER_TOKEN = 32
MAX_EMBEDDING_INPUTS = 2048
DEFAULT_MAX_EMBEDDING_TOKENS = 16384  # tokens of all inputs of one /v1/embeddings request together
EMBEDDING_BATCH_TOKENS = 4096  # padded tokens the encoder runs at once
DEFAULT_MAX_IMAGE_BYTES = 4 * 1024 * 1024  # one /v1/embeddings image's file, decoded from base64
DEFAULT_MAX_IMAGE_PIXELS = 4096 * 4096  # one /v1/embeddings image's width x height
# A response sent before the body was read in full (408, 413) closes the connection: it cannot carry another
# request, and kept open for --timeout-keep-alive it would hold a file descriptor a slow client chose to hold.
_CLOSE = {"Connection": "close"}
DISCONNECT_POLL_S = 0.25  # how often a non-streamed request checks that its client is still there
CHAT_FIELDS = {
    "model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "seed", "stop", "n",
    "stream", "stream_options", "frequency_penalty", "presence_penalty", "user", "metadata", "store",
    "logprobs", "top_logprobs", "tools", "tool_choice", "functions", "function_call", "response_format",
    "logit_bias", "parallel_tool_calls",
}  # fmt: skip
COMPLETION_FIELDS = {
    "model", "prompt", "max_tokens", "temperature", "top_p", "seed", "stop", "n", "stream", "stream_options",
    "frequency_penalty", "presence_penalty", "user", "echo", "suffix", "best_of", "logprobs", "logit_bias",
}  # fmt: skip
EMBEDDING_FIELDS = {"model", "input", "encoding_format", "dimensions", "user"}


class APIError(Exception):
    """An OpenAI-style error response."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        kind: str = "invalid_request_error",
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = status, message, param, code, kind
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def bad(param: str, message: str, code: str = "invalid_value") -> APIError:
    return APIError(400, f"{param}: {message}", param=param, code=code)


_SHOWN = reprlib.Repr()
_SHOWN.maxlevel, _SHOWN.maxstring, _SHOWN.maxlong, _SHOWN.maxother = 3, 40, 40, 40


def _shown(value: Any) -> str:
    """A short rendering of a client's value for an error message (deep or huge values stay short)."""
    return _SHOWN.repr(value)


# -- validation ------------------------------------------------------------------------------------
def _integer(body: dict[str, Any], name: str, minimum: int | None = None, below: int | None = None) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad(name, f"must be an integer, got {_shown(value)}", "invalid_type")
    if minimum is not None and value < minimum:
        raise bad(name, f"must be >= {minimum}, got {_shown(value)}")
    if below is not None and value >= below:
        raise bad(name, f"must be < {below}, got {_shown(value)}")
    return value


def _number(body: dict[str, Any], name: str, low: float, high: float, *, low_open: bool = False) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise bad(name, f"must be a number, got {_shown(value)}", "invalid_type")
    if value < low or value > high or (low_open and value == low):
        bracket = "(" if low_open else "["
        raise bad(name, f"must be in {bracket}{low}, {high}], got {_shown(value)}")
    return float(value)


def _boolean(body: dict[str, Any], name: str) -> bool:
    value = body.get(name, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise bad(name, f"must be true or false, got {_shown(value)}", "invalid_type")
    return value


def _check_fields(body: dict[str, Any], allowed: set[str]) -> None:
    for name in body:
        if name not in allowed:
            raise bad(name, "unknown field; microformers serve does not accept it", "unknown_field")


def _refuse_unsupported(body: dict[str, Any]) -> None:
    """Fields of the OpenAI API this server does not implement: refused unless at their no-op value."""
    for name in ("logprobs", "echo"):
        if body.get(name) not in (None, False):
            raise bad(name, "is not supported by microformers serve", "unsupported")
    for name in ("top_logprobs", "suffix"):
        if body.get(name) is not None:
            raise bad(name, "is not supported by microformers serve", "unsupported")
    for name in ("tools", "functions", "logit_bias"):
        if body.get(name):
            raise bad(name, "is not supported by microformers serve", "unsupported")
    for name in ("tool_choice", "function_call"):
        if body.get(name) not in (None, "none"):
            raise bad(name, "is not supported by microformers serve (no tools)", "unsupported")
    if body.get("best_of") not in (None, 1):
        raise bad("best_of", "only best_of=1 is supported", "unsupported")
    fmt = body.get("response_format")
    if fmt is not None and fmt != {"type": "text"}:
        raise bad("response_format", 'only {"type": "text"} is supported', "unsupported")
    if body.get("store") not in (None, False):
        raise bad("store", "microformers serve stores nothing; leave store unset or false", "unsupported")


def _stop(body: dict[str, Any]) -> list[str]:
    value = body.get("stop")
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise bad("stop", "must be a string or a list of strings", "invalid_type")
    if len(value) > MAX_STOP_STRINGS:
        raise bad("stop", f"at most {MAX_STOP_STRINGS} stop strings, got {len(value)}")
    if any(not s for s in value):
        raise bad("stop", "stop strings must not be empty")
    longest = max(len(s) for s in value)
    if longest > MAX_STOP_CHARS:
        raise bad("stop", f"a stop string may have at most {MAX_STOP_CHARS} characters, got one of {longest}")
    return value


def _message_text(message: Any, index: int) -> dict[str, str]:
    where = f"messages[{index}]"
    if not isinstance(message, dict):
        raise bad(where, "must be an object with role and content", "invalid_type")
    role = message.get("role")
    if role not in ("system", "developer", "user", "assistant", "tool"):
        raise bad(f"{where}.role", f"must be system, developer, user, assistant or tool, got {role!r}")
    content = message.get("content")
    if isinstance(content, list):
        parts = []
        for j, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise bad(f"{where}.content[{j}]", "only text parts ({'type': 'text', 'text': ...}) are supported")
            parts.append(part["text"])
        content = "".join(parts)
    if not isinstance(content, str):
        raise bad(f"{where}.content", "must be a string or a list of text parts", "invalid_type")
    return {"role": "system" if role == "developer" else role, "content": content}


@attrs.define
class Sampling:
    max_new_tokens: int
    temperature: float
    top_p: float
    seed: int | None
    stop: list[str]
    frequency_penalty: float
    presence_penalty: float
    stream: bool
    include_usage: bool
    warnings: list[str]


class Server:
    """What the routes share: the loaded model, its engine or embedder, limits and the model id."""

    def __init__(
        self,
        model_id: str,
        tokenizer: Any,
        model: Any,
        *,
        engine: Engine | None = None,
        embedder: Embedder | None = None,
        aliases: tuple[str, ...] = (),
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        read_timeout: float = DEFAULT_READ_TIMEOUT_S,
        max_embedding_tokens: int = DEFAULT_MAX_EMBEDDING_TOKENS,
        max_image_bytes: int = DEFAULT_MAX_IMAGE_BYTES,
        max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS,
    ) -> None:
        self.model_id = model_id
        self.names = {model_id, *aliases}
        self.tokenizer = tokenizer
        self.model = model
        self.engine = engine
        self.embedder = embedder
        # a two-tower model's text tower has its own length (CLIP: 77); its config has none at the top level
        self.context_length = getattr(embedder, "text_limit", None) or context_length(model)
        self.max_body_bytes = max_body_bytes
        self.read_timeout = read_timeout
        self.max_embedding_tokens = max_embedding_tokens
        self.max_image_bytes = max_image_bytes
        self.max_image_pixels = max_image_pixels
        self.created = int(time.time())
        config = getattr(model, "generation_config", None)
        self.default_sample = bool(getattr(config, "do_sample", False))
        self.default_temperature = float(getattr(config, "temperature", None) or 1.0)
        self.default_top_p = float(getattr(config, "top_p", None) or 1.0)

    # -- shared request handling ------------------------------------------------------------------
    async def read_body(self, request: Request) -> dict[str, Any]:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
            size = declared if len(declared) < 20 else f"{declared[:20]}..."
            raise APIError(
                413, f"the body has {size} bytes; the limit is {self.max_body_bytes}", code="body_too_large",
                headers=_CLOSE,
            )  # fmt: skip
        try:
            raw = await asyncio.wait_for(self._read_raw(request), timeout=self.read_timeout)
        except TimeoutError:
            raise APIError(
                408, f"the body was not received within {self.read_timeout:g} s (--request-timeout)",
                code="request_timeout", headers=_CLOSE,
            ) from None  # fmt: skip
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise APIError(400, f"the body is not valid UTF-8 ({exc})", code="invalid_encoding") from None
        try:
            body = json.loads(text)
        except json.JSONDecodeError as exc:
            raise APIError(400, f"the body is not valid JSON: {exc}", code="invalid_json") from None
        except RecursionError:
            raise APIError(400, "the body's JSON is nested too deeply", code="invalid_json") from None
        except ValueError as exc:  # an integer of more than 4,300 digits
            raise APIError(400, f"the body holds a number that cannot be read: {exc}", code="invalid_json") from None
        if not isinstance(body, dict):
            raise APIError(400, "the body must be a JSON object", code="invalid_json")
        return body

    async def _read_raw(self, request: Request) -> bytes:
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > self.max_body_bytes:
                raise APIError(
                    413, f"the body is over the limit of {self.max_body_bytes} bytes", code="body_too_large",
                    headers=_CLOSE,
                )  # fmt: skip
            chunks.append(chunk)
        return b"".join(chunks)

    def check_text_size(self, text_chars: int, param: str, tokens: int | None = None) -> None:
        """Refuse text that cannot fit ``tokens`` (default: the context) before tokenizing it."""
        tokens = self.context_length if tokens is None else tokens
        limit = tokens * MAX_CHARS_PER_TOKEN
        if text_chars > limit:
            raise APIError(
                400, f"{param} has {text_chars} characters; at most {limit} can fit the {tokens}-token limit "
                f"({MAX_CHARS_PER_TOKEN} characters per token); shorten it", param=param,
                code="context_length_exceeded",
            )  # fmt: skip

    def check_model(self, body: dict[str, Any]) -> None:
        name = body.get("model")
        if not isinstance(name, str) or not name:
            raise bad("model", "is required: the id of the served model (GET /v1/models lists it)", "missing")
        if name not in self.names:
            raise APIError(
                404, f"model {name!r} is not served here; this server serves {self.model_id!r}",
                param="model", code="model_not_found",
            )  # fmt: skip

    def sampling(self, body: dict[str, Any], prompt_tokens: int, *, tokens_field: str) -> Sampling:
        n = _integer(body, "n", minimum=1)
        if n is not None and n != 1:
            raise bad("n", f"only n=1 is supported, got {n}", "unsupported")
        limit = self.context_length
        budget = self.engine.max_kv_tokens if self.engine is not None else limit
        if prompt_tokens >= limit:
            raise APIError(
                400, f"the prompt has {prompt_tokens} tokens, but this model's context is {limit} tokens "
                "(prompt and completion together); shorten the prompt", param=tokens_field.split("|")[0],
                code="context_length_exceeded",
            )  # fmt: skip
        if prompt_tokens >= budget:
            raise APIError(
                400, f"the prompt has {prompt_tokens} tokens, but this server's KV cache budget is {budget} tokens "
                "(--max-kv-tokens); shorten the prompt", param=tokens_field.split("|")[0],
                code="context_length_exceeded",
            )  # fmt: skip
        room = limit - prompt_tokens
        warnings: list[str] = []
        if budget - prompt_tokens < room:
            room = budget - prompt_tokens
            limit_text = f"{budget}-token KV cache budget"
        else:
            limit_text = f"{limit}-token context"
        requested = None
        for name in ("max_completion_tokens", "max_tokens"):
            value = _integer(body, name, minimum=1)
            if value is not None and requested is None:
                requested = (name, value)
        if requested is None:
            max_new = room
        else:
            max_new = requested[1]
            if max_new > room:
                warnings.append(
                    f"{requested[0]}={max_new} is more than the {room} tokens left in the {limit_text} "
                    f"after the {prompt_tokens}-token prompt; clamped to {room}"
                )
                max_new = room
        temperature = _number(body, "temperature", 0.0, 2.0)
        if temperature is not None and 0 < temperature < MIN_TEMPERATURE:
            raise bad(
                "temperature", f"must be 0 (greedy) or at least {MIN_TEMPERATURE:g}, got {temperature:g}: smaller "
                "temperatures sample the same tokens as greedy decoding but overflow the scores; send 0",
            )  # fmt: skip
        top_p = _number(body, "top_p", 0.0, 1.0, low_open=True)
        if temperature is None:
            temperature = self.default_temperature if self.default_sample else 0.0
            top_p = self.default_top_p if top_p is None else top_p
        seed = _integer(body, "seed", minimum=0, below=2**63)
        stream = _boolean(body, "stream")
        options = body.get("stream_options")
        include_usage = False
        if options is not None:
            if not stream:
                raise bad("stream_options", "is only allowed with stream=true")
            if not isinstance(options, dict) or set(options) - {"include_usage"}:
                raise bad("stream_options", "must be an object with only include_usage", "invalid_type")
            include_usage = _boolean(options, "include_usage")
        return Sampling(
            max_new_tokens=max_new,
            temperature=temperature,
            top_p=1.0 if top_p is None else top_p,
            seed=seed,
            stop=_stop(body),
            frequency_penalty=_number(body, "frequency_penalty", -2.0, 2.0) or 0.0,
            presence_penalty=_number(body, "presence_penalty", -2.0, 2.0) or 0.0,
            stream=stream,
            include_usage=include_usage,
            warnings=warnings,
        )

    def check_ids(self, ids: list[int], param: str) -> None:
        rows = self.model.get_input_embeddings().num_embeddings
        for token in ids:
            if isinstance(token, bool) or not isinstance(token, int) or not 0 <= token < rows:
                raise bad(param, f"token ids must be integers in [0, {rows}), got {token!r}")

    def submit(self, ids: list[int], sampling: Sampling) -> tuple[GenerationRequest, asyncio.Queue[Event]]:
        if self.engine is None:
            raise APIError(
                400, f"{self.model_id} is an encoder model: it serves /v1/embeddings only", code="wrong_endpoint"
            )
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Event] = asyncio.Queue()

        def emit(event: Event) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, event)

        request = GenerationRequest(
            prompt_ids=ids, max_new_tokens=sampling.max_new_tokens, emit=emit, temperature=sampling.temperature,
            top_p=sampling.top_p, seed=sampling.seed, stop=sampling.stop,
            frequency_penalty=sampling.frequency_penalty, presence_penalty=sampling.presence_penalty,
        )  # fmt: skip
        try:
            self.engine.submit(request)
        except QueueFullError as exc:
            raise APIError(
                429, f"the server is busy: {exc}; retry shortly", code="queue_full", kind="rate_limit_error",
                headers={"Retry-After": "1"},
            ) from None  # fmt: skip
        except CacheBudgetError as exc:
            if not exc.retry:
                raise bad("max_tokens", f"{exc}; lower max_tokens or shorten the prompt") from None
            raise APIError(
                429, f"the server is busy: {exc}; retry shortly", code="kv_cache_full", kind="rate_limit_error",
                headers={"Retry-After": "1"},
            ) from None  # fmt: skip
        except ShuttingDownError as exc:
            raise APIError(503, str(exc), code="shutting_down", kind="server_error") from None
        return request, queue

    async def collect(
        self, http: Request, request: GenerationRequest, queue: asyncio.Queue[Event]
    ) -> tuple[str, Event]:
        """Wait for a non-streamed result; a client that goes away cancels its request."""
        parts: list[str] = []
        finished = False
        loop = asyncio.get_running_loop()
        check_at = loop.time() + DISCONNECT_POLL_S
        try:
            while True:
                try:
                    event = await asyncio.wait_for(queue.get(), timeout=max(0.0, check_at - loop.time()))
                except TimeoutError:
                    event = None
                if loop.time() >= check_at:  # deltas keep coming while it runs: check on a clock, not on silence
                    if await http.is_disconnected():
                        raise APIError(499, "client disconnected", code="client_closed")
                    check_at = loop.time() + DISCONNECT_POLL_S
                if event is None:
                    continue
                if event.kind == "delta":
                    parts.append(event.text)
                elif event.kind == "error":
                    raise _engine_error(event)
                else:
                    finished = True
                    return "".join(parts), event
        finally:
            if not finished:
                request.cancel()  # the client went away (or the engine failed): free the slot


def _engine_error(event: Event) -> APIError:
    if event.finish_reason == "shutting_down":
        return APIError(503, event.text, code="shutting_down", kind="server_error")
    return APIError(500, event.text, code="generation_failed", kind="server_error")


def _usage(event: Event) -> dict[str, int]:
    return {
        "prompt_tokens": event.prompt_tokens,
        "completion_tokens": event.completion_tokens,
        "total_tokens": event.prompt_tokens + event.completion_tokens,
    }


class Embedder:
    """Mean-pooled sentence embeddings from an encoder, one batch at a time on a worker thread."""

    def __init__(
        self, model: Any, tokenizer: Any, folder: str | os.PathLike[str] | None = None, max_pending: int = 64
    ) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.normalize = _wants_normalize(folder)
        self.max_pending = max_pending
        self.pending = 0
        self._lock = threading.Lock()

    def embed(self, batch: list[list[int]]) -> list[list[float]]:
        """One vector per input, in order; inputs of similar length run together, at most
        ``EMBEDDING_BATCH_TOKENS`` padded tokens at a time."""
        order = sorted(range(len(batch)), key=lambda i: len(batch[i]))
        vectors: list[list[float]] = [[] for _ in batch]
        group: list[int] = []
        for index in [*order, None]:
            if index is not None and (len(group) + 1) * len(batch[index]) <= EMBEDDING_BATCH_TOKENS:
                group.append(index)
                continue
            if group:
                for position, vector in zip(group, self._embed_padded([batch[i] for i in group]), strict=True):
                    vectors[position] = vector
            group = [index] if index is not None else []
        return vectors

    def _embed_padded(self, batch: list[list[int]]) -> list[list[float]]:
        import torch

        with self._lock, torch.inference_mode():
            width = max(len(ids) for ids in batch)
            pad = self.tokenizer.pad_token_id or 0
            device = self.model.device
            ids = torch.tensor([row + [pad] * (width - len(row)) for row in batch], dtype=torch.long, device=device)
            mask = torch.tensor(
                [[1] * len(row) + [0] * (width - len(row)) for row in batch], dtype=torch.long, device=device
            )
            hidden = self.model(input_ids=ids, attention_mask=mask, return_dict=True).last_hidden_state.float()
            weights = mask.unsqueeze(-1).float()
            pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
            if self.normalize:
                pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
            return pooled.tolist()


def _wants_normalize(modules: str | os.PathLike[str] | None) -> bool:
    """sentence-transformers models list a ``Normalize`` module in ``modules.json`` (all-MiniLM does);
    ``modules`` is that file, or a folder holding it."""
    if modules is None:
        return False
    path = Path(modules)
    path = path / "modules.json" if path.is_dir() else path
    try:
        modules = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return any("Normalize" in str(m.get("type", "")) for m in modules if isinstance(m, dict))


def create_app(server: Server) -> FastAPI:
    """The FastAPI app for ``server``."""
    app = FastAPI(title="microformers serve", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.server = server

    @app.exception_handler(APIError)
    async def api_error(_: Request, exc: APIError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = "not_found" if exc.status_code == 404 else "method_not_allowed" if exc.status_code == 405 else None
        return APIError(exc.status_code, str(exc.detail), code=code).response()

    @app.exception_handler(Exception)
    async def unexpected(_: Request, exc: Exception) -> JSONResponse:
        return APIError(500, f"internal error: {type(exc).__name__}: {exc}", kind="server_error").response()

    @app.get("/health")
    async def health() -> dict[str, Any]:
        stats = server.engine.stats() if server.engine is not None else {}
        alive = server.engine.alive if server.engine is not None else True
        return {"status": "ok" if alive else "stopped", "model": server.model_id, **stats}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        entry = {"id": server.model_id, "object": "model", "created": server.created, "owned_by": "microformers"}
        return {"object": "list", "data": [entry]}

    @app.get("/v1/models/{name:path}")
    async def model_info(name: str) -> dict[str, Any]:
        if name not in server.names:
            raise APIError(404, f"model {name!r} is not served here", param="model", code="model_not_found")
        return {"id": server.model_id, "object": "model", "created": server.created, "owned_by": "microformers"}

    @app.post("/v1/chat/completions")
    async def chat_completions(http: Request) -> Any:
        body = await server.read_body(http)
        _check_fields(body, CHAT_FIELDS)
        server.check_model(body)
        _refuse_unsupported(body)
        raw = body.get("messages")
        if not isinstance(raw, list) or not raw:
            raise bad("messages", "must be a non-empty list of {role, content} objects", "invalid_type")
        messages = [_message_text(m, i) for i, m in enumerate(raw)]
        server.check_text_size(sum(len(m["content"]) for m in messages), "messages")
        if server.engine is None:
            raise APIError(
                400, f"{server.model_id} is an encoder model: it serves /v1/embeddings only", code="wrong_endpoint"
            )
        try:  # off the event loop: a long conversation takes a while to render and encode
            encoded = await asyncio.to_thread(
                server.tokenizer.apply_chat_template, messages, add_generation_prompt=True, return_dict=True
            )
        except Exception as exc:
            raise bad("messages", f"the chat template could not render them: {exc}", "template_error") from None
        ids = list(encoded["input_ids"])
        sampling = server.sampling(body, len(ids), tokens_field="messages")
        request, queue = server.submit(ids, sampling)
        ident, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        headers = {"X-Microformers-Warning": "; ".join(sampling.warnings)} if sampling.warnings else None

        def chunk(delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
            data: dict[str, Any] = {
                "id": ident, "object": "chat.completion.chunk", "created": created, "model": server.model_id,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
            }  # fmt: skip
            if sampling.include_usage:
                data["usage"] = None
            return data

        if sampling.stream:
            first = chunk({"role": "assistant", "content": ""}, None)
            return _stream(request, queue, first, lambda text: chunk({"content": text}, None),
                           lambda event: chunk({}, event.finish_reason), ident, created, server, sampling, "chat.completion.chunk", headers)  # fmt: skip
        text, done = await server.collect(http, request, queue)
        result: dict[str, Any] = {
            "id": ident, "object": "chat.completion", "created": created, "model": server.model_id,
            "choices": [{
                "index": 0, "message": {"role": "assistant", "content": text},
                "finish_reason": done.finish_reason, "logprobs": None,
            }],
            "usage": _usage(done),
        }  # fmt: skip
        if sampling.warnings:
            result["warnings"] = sampling.warnings
        return JSONResponse(result, headers=headers)

    @app.post("/v1/completions")
    async def completions(http: Request) -> Any:
        body = await server.read_body(http)
        _check_fields(body, COMPLETION_FIELDS)
        server.check_model(body)
        _refuse_unsupported(body)
        if server.engine is None:
            raise APIError(
                400, f"{server.model_id} is an encoder model: it serves /v1/embeddings only", code="wrong_endpoint"
            )
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]
        if isinstance(prompt, str):
            if not prompt:
                raise bad("prompt", "must not be empty")
            server.check_text_size(len(prompt), "prompt")
            ids = list((await asyncio.to_thread(server.tokenizer, prompt))["input_ids"])
        elif (
            isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)
        ):
            ids = list(prompt)
            server.check_ids(ids, "prompt")
        elif isinstance(prompt, list) and len(prompt) > 1:
            raise bad(
                "prompt", "one prompt per request is supported (send several requests; they are batched)", "unsupported"
            )
        else:
            raise bad("prompt", "must be a non-empty string or a list of token ids", "invalid_type")
        if not ids:
            raise bad("prompt", "encodes to no tokens")
        sampling = server.sampling(body, len(ids), tokens_field="prompt")
        request, queue = server.submit(ids, sampling)
        ident, created = f"cmpl-{uuid.uuid4().hex}", int(time.time())
        headers = {"X-Microformers-Warning": "; ".join(sampling.warnings)} if sampling.warnings else None

        def chunk(text: str, finish: str | None) -> dict[str, Any]:
            data: dict[str, Any] = {
                "id": ident, "object": "text_completion", "created": created, "model": server.model_id,
                "choices": [{"index": 0, "text": text, "finish_reason": finish, "logprobs": None}],
            }  # fmt: skip
            if sampling.include_usage:
                data["usage"] = None
            return data

        if sampling.stream:
            return _stream(request, queue, None, lambda text: chunk(text, None),
                           lambda event: chunk("", event.finish_reason), ident, created, server, sampling, "text_completion", headers)  # fmt: skip
        text, done = await server.collect(http, request, queue)
        result: dict[str, Any] = {
            "id": ident, "object": "text_completion", "created": created, "model": server.model_id,
            "choices": [{"index": 0, "text": text, "finish_reason": done.finish_reason, "logprobs": None}],
            "usage": _usage(done),
        }  # fmt: skip
        if sampling.warnings:
            result["warnings"] = sampling.warnings
        return JSONResponse(result, headers=headers)

    @app.post("/v1/embeddings")
    async def embeddings(http: Request) -> Any:
        body = await server.read_body(http)
        _check_fields(body, EMBEDDING_FIELDS)
        server.check_model(body)
        embedder = server.embedder
        if embedder is None:
            raise APIError(
                400, f"{server.model_id} is a generative model; /v1/embeddings needs an encoder model "
                "(e.g. microformers serve path/to/all-MiniLM-L6-v2)", code="wrong_endpoint",
            )  # fmt: skip
        if body.get("dimensions") is not None:
            raise bad("dimensions", "is not supported: the model's embedding size is fixed", "unsupported")
        encoding = body.get("encoding_format", "float")
        if encoding not in ("float", "base64"):
            raise bad("encoding_format", f"must be 'float' or 'base64', got {encoding!r}")
        if getattr(embedder, "image_processor", None) is not None:  # a vision model (images.MultimodalEmbedder)
            from .images import embedding_inputs

            batch: list[Any] = await asyncio.to_thread(embedding_inputs, server, body.get("input"))
        else:
            batch = await asyncio.to_thread(_embedding_inputs, server, body.get("input"))
        if embedder.pending >= embedder.max_pending:
            raise APIError(429, "the server is busy; retry shortly", code="queue_full", kind="rate_limit_error",
                           headers={"Retry-After": "1"})  # fmt: skip
        embedder.pending += 1
        try:
            vectors = await asyncio.to_thread(embedder.embed, batch)
        finally:
            embedder.pending -= 1
        data = []
        for index, vector in enumerate(vectors):
            value: Any = vector
            if encoding == "base64":
                value = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")
            data.append({"object": "embedding", "index": index, "embedding": value})
        tokens = sum(len(item) if isinstance(item, list) else item.tokens for item in batch)  # an image: its positions
        return {
            "object": "list", "data": data, "model": server.model_id,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }  # fmt: skip

    return app


def _embedding_inputs(server: Server, value: Any) -> list[list[int]]:
    from .images import is_image_item

    for index, item in enumerate(value if isinstance(value, list) else [value]):
        if is_image_item(item):  # refused before any other check: a data URL is no text to embed
            raise bad(
                f"input[{index}]" if isinstance(value, list) else "input", f"{server.model_id} is a text-only model "
                "and cannot embed images; serve a CLIP, SigLIP, ViT or DINOv2 model for image embeddings",
                "unsupported_input",
            )  # fmt: skip
    if isinstance(value, str) or (isinstance(value, list) and value and all(isinstance(t, int) for t in value)):
        value = [value]
    if not isinstance(value, list) or not value:
        raise bad("input", "must be a string, a list of strings, or token id lists", "invalid_type")
    if len(value) > MAX_EMBEDDING_INPUTS:
        raise bad("input", f"at most {MAX_EMBEDDING_INPUTS} inputs per request, got {len(value)}")
    budget = server.max_embedding_tokens
    chars = 0
    for index, item in enumerate(value):  # sizes before any tokenizing
        if isinstance(item, str):
            server.check_text_size(len(item), f"input[{index}]")
            chars += len(item)
    server.check_text_size(chars, "input", budget)
    batch, total = [], 0
    for index, item in enumerate(value):
        if isinstance(item, str):
            if not item:
                raise bad(f"input[{index}]", "must not be empty")
            ids = list(server.tokenizer(item)["input_ids"])
        elif isinstance(item, list) and item and all(isinstance(t, int) and not isinstance(t, bool) for t in item):
            ids = list(item)
            server.check_ids(ids, f"input[{index}]")
        else:
            raise bad(f"input[{index}]", "must be a non-empty string or list of token ids", "invalid_type")
        if len(ids) > server.context_length:
            raise APIError(
                400, f"input[{index}] has {len(ids)} tokens; this model takes at most {server.context_length}",
                param=f"input[{index}]", code="context_length_exceeded",
            )  # fmt: skip
        total += len(ids)
        if total > budget:
            raise APIError(
                400, f"input: the inputs have more than {budget} tokens together, the most this server embeds in "
                "one request (--max-embedding-tokens); send them over several requests", param="input",
                code="too_many_tokens",
            )  # fmt: skip
        batch.append(ids)
    return batch


def _stream(
    request: GenerationRequest,
    queue: asyncio.Queue[Event],
    first: dict[str, Any] | None,
    delta_chunk: Any,
    final_chunk: Any,
    ident: str,
    created: int,
    server: Server,
    sampling: Sampling,
    obj: str,
    headers: dict[str, str] | None,
) -> EventSourceResponse:
    async def events() -> AsyncIterator[dict[str, str]]:
        try:
            if first is not None:
                yield {"data": json.dumps(first)}
            while True:
                event = await queue.get()
                if event.kind == "delta":
                    yield {"data": json.dumps(delta_chunk(event.text))}
                elif event.kind == "error":
                    yield {"data": json.dumps(_engine_error(event).body())}
                    break
                else:
                    yield {"data": json.dumps(final_chunk(event))}
                    if sampling.include_usage:
                        usage = {
                            "id": ident, "object": obj, "created": created, "model": server.model_id,
                            "choices": [], "usage": _usage(event),
                        }  # fmt: skip
                        yield {"data": json.dumps(usage)}
                    break
            yield {"data": "[DONE]"}
        finally:
            request.cancel()  # finished already, or the client went away: either way the slot is free

    return EventSourceResponse(events(), headers=headers, ping=15)
