"""``microformers serve [MODEL]``: load a model and serve it over an OpenAI-compatible HTTP API."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from microformers.devices import thread_count_argument

DEFAULT_MODEL = "smollm2-135m-instruct"


def serve_command(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    parser.add_argument("model", nargs="?", default=DEFAULT_MODEL, help=f"folder, Hub id or alias ({DEFAULT_MODEL})")
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)"
    )
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    parser.add_argument("--max-batch-size", type=_positive, default=16, help="sequences decoded together (default 16)")
    parser.add_argument(
        "--max-queue", type=_non_negative, default=256, help="requests that may wait; more get 429 (default 256)"
    )
    parser.add_argument(
        "--max-kv-tokens", type=_positive, default=None,
        help="KV cache budget in tokens: prompt plus max_tokens of every admitted request; past it requests get 429 "
        "(default: what half the memory free after loading holds, at least one context)",
    )  # fmt: skip
    parser.add_argument(
        "--prefill-chunk", type=_positive, default=512,
        help="prompt tokens one prefill forward takes: new prompts are packed together up to it, a longer one is read "
        "in chunks of it between decoding steps (default 512)",
    )  # fmt: skip
    parser.add_argument(
        "--prefill-group", type=_positive, default=64,
        help="prompt tokens after which a prefill forward takes no further prompt: prompts arriving together are read "
        "in groups, and the first get their first tokens after the first group's forward (default 64)",
    )  # fmt: skip
    parser.add_argument(
        "--max-embedding-tokens", type=_positive, default=16384,
        help="tokens of all inputs of one /v1/embeddings request (default 16384; more get 400)",
    )  # fmt: skip
    parser.add_argument(
        "--max-image-bytes", type=_positive, default=4 * 1024 * 1024,
        help="bytes of one /v1/embeddings image's file, checked before it is decoded (default 4 MiB; more get 400)",
    )  # fmt: skip
    parser.add_argument(
        "--max-image-pixels", type=_positive, default=4096 * 4096,
        help="width x height of one /v1/embeddings image, checked before its pixels are decompressed (default "
        "4096x4096; more get 400)",
    )  # fmt: skip
    parser.add_argument(
        "--request-timeout", type=_positive_float, default=30.0,
        help="seconds to receive a request's head (else the connection is closed) and its body (else 408) "
        "(default 30)",
    )  # fmt: skip
    parser.add_argument(
        "--timeout-keep-alive", type=_positive, default=5,
        help="seconds an idle keep-alive connection stays open (uvicorn's timeout_keep_alive, default 5)",
    )  # fmt: skip
    parser.add_argument(
        "--drain-timeout", type=_positive, default=30,
        help="on SIGTERM, seconds running requests and open connections get to finish before they are cut (default 30)",
    )  # fmt: skip
    parser.add_argument(
        "--quantize", choices=("int8", "int4", "gguf"), default=None,
        help="quantized weights (microformers-quant): int8/int4 from float weights, gguf keeps a GGUF's blocks",
    )  # fmt: skip
    parser.add_argument(
        "--native-rows", type=_non_negative, default=None,
        help="running requests up to which a decoding step goes through the native decode step (what generate() "
        "uses: float32 or quantized layers on the CPU); more are decoded in one batched eager forward; 0: never "
        "native (default: --max-batch-size, always native)",
    )  # fmt: skip
    parser.add_argument(
        "--pack-weights", action="store_true",
        help="float32 weights in oneDNN's packed layout: faster batched decoding, slower for one sequence",
    )  # fmt: skip
    parser.add_argument("--gguf-file", default=None, help="GGUF file inside MODEL's folder")
    parser.add_argument("--dtype", default=None, help="weights dtype (float32, bfloat16; default: the checkpoint's)")
    parser.add_argument("--model-name", default=None, help="the id clients use in 'model' (default: MODEL as given)")
    parser.add_argument(
        "--max-body-bytes", type=_positive, default=4 * 1024 * 1024, help="request size limit (413 above)"
    )
    parser.add_argument("--device", default="cpu", help="where the model runs: cpu, cuda, cuda:1 (default cpu)")
    parser.add_argument(
        "--threads", type=thread_count_argument, default=None, help="torch threads (default: torch's choice)"
    )
    parser.add_argument("--log-level", default="warning", help="uvicorn log level (default warning)")
    return run_serve


def _positive(text: str) -> int:
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} must be >= 1")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text} must be a positive number of seconds")
    return value


def _non_negative(text: str) -> int:
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} must be >= 0")
    return value


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def load_server(args: argparse.Namespace) -> Any:
    """Load MODEL: a causal LM gets the batching engine, an encoder the embedding endpoint."""
    import microformers
    from microformers.devices import check_device
    from microformers.errors import InputError

    from .app import Embedder, Server
    from .engine import DEFAULT_PREFILL_CHUNK, DEFAULT_PREFILL_GROUP, Engine, native_step_for

    if args.pack_weights and args.quantize:
        raise InputError("--pack-weights packs float32 weights and --quantize replaces them: use one of the two")
    device = check_device(
        getattr(args, "device", None) or "cpu", "--device"
    )  # a Namespace built by a caller may lack it
    if args.pack_weights and device.type != "cpu":
        raise InputError(
            f"--pack-weights lays weights out for oneDNN's CPU product, which --device {args.device} cannot run: "
            "drop --pack-weights, or use --device cpu"
        )
    if device.type == "meta":
        raise InputError(
            "--device meta holds no weight values, so nothing could be served: use --device cpu or a GPU (cuda)"
        )
    if args.quantize and device.type != "cpu":
        # microformers-quant's layers would run there, but only by de-quantising every weight at every call (its
        # kernels are CPU code): far slower than the same model unquantized, which is no reason to quantize
        raise InputError(
            f"--quantize {args.quantize} keeps weights in microformers-quant's layers, whose kernels run on the CPU "
            f"only: on --device {args.device} every call would de-quantise its weights in torch (slow). Use "
            f"--device cpu with --quantize, or drop --quantize and serve on {args.device} with --dtype bfloat16"
        )
    native_rows = getattr(args, "native_rows", None)
    load: dict[str, Any] = {"gguf_file": args.gguf_file} if args.gguf_file else {}
    config = microformers.AutoConfig.from_pretrained(args.model, **load)
    from .images import VISION_ENCODERS

    # a vision encoder (ViT, DINOv2) has no tokenizer: it embeds images only
    vision_only = getattr(config, "model_type", None) in VISION_ENCODERS
    tokenizer = None if vision_only else microformers.AutoTokenizer.from_pretrained(args.model, **load)
    model_kwargs: dict[str, Any] = dict(load)
    if args.quantize:
        model_kwargs["quantization_config"] = {"quant_method": args.quantize}
    if args.dtype:
        from microformers.modeling import to_torch_dtype

        model_kwargs["dtype"] = args.dtype if args.dtype == "auto" else to_torch_dtype(args.dtype)
    if device.type != "cpu":  # each tensor goes there as it is read (the CPU load stays exactly as before)
        model_kwargs["device"] = device
    name = args.model_name or args.model
    aliases = (Path(args.model).name,) if Path(args.model).exists() else ()
    if _is_generative(config):
        model = microformers.AutoModelForCausalLM.from_pretrained(args.model, **model_kwargs)
        if args.pack_weights:
            from microformers_sdk import pack_linear_weights

            pack_linear_weights(model)
        if native_rows is not None and native_step_for(model) is None:
            raise InputError(
                f"--native-rows {native_rows} chooses when the native decode step decodes, and this model has "
                "none (it needs float32 or quantized weights on the CPU, not --pack-weights, and for quantized ones "
                "the microformers-quant kernels built): drop --native-rows"
            )
        engine = Engine(
            model, tokenizer, max_batch_size=args.max_batch_size, max_queue=args.max_queue,
            max_kv_tokens=getattr(args, "max_kv_tokens", None),
            prefill_chunk=getattr(args, "prefill_chunk", None) or DEFAULT_PREFILL_CHUNK,
            prefill_group=getattr(args, "prefill_group", None) or DEFAULT_PREFILL_GROUP,
            native_rows=native_rows,
        )  # fmt: skip
        return Server(name, tokenizer, model, engine=engine, aliases=aliases, **_server_limits(args))
    if args.pack_weights:
        raise InputError(
            "--pack-weights speeds up batched decoding; MODEL is an encoder served for embeddings: drop --pack-weights"
        )
    model = microformers.AutoModel.from_pretrained(args.model, **model_kwargs)
    embedder = _embedder(model, tokenizer, args, load)
    if embedder is None:
        embedder = Embedder(model, tokenizer, _modules_file(args.model, load), max_pending=args.max_queue)
    return Server(name, tokenizer, model, embedder=embedder, aliases=aliases, **_server_limits(args))


def _server_limits(args: argparse.Namespace) -> dict[str, Any]:
    """The request limits of ``args`` (a Namespace built by a caller may lack the newer ones)."""
    from .app import (
        DEFAULT_MAX_EMBEDDING_TOKENS,
        DEFAULT_MAX_IMAGE_BYTES,
        DEFAULT_MAX_IMAGE_PIXELS,
        DEFAULT_READ_TIMEOUT_S,
    )

    return {
        "max_body_bytes": args.max_body_bytes,
        "read_timeout": getattr(args, "request_timeout", None) or DEFAULT_READ_TIMEOUT_S,
        "max_embedding_tokens": getattr(args, "max_embedding_tokens", None) or DEFAULT_MAX_EMBEDDING_TOKENS,
        "max_image_bytes": getattr(args, "max_image_bytes", None) or DEFAULT_MAX_IMAGE_BYTES,
        "max_image_pixels": getattr(args, "max_image_pixels", None) or DEFAULT_MAX_IMAGE_PIXELS,
    }


def _embedder(model: Any, tokenizer: Any, args: argparse.Namespace, load: dict[str, Any]) -> Any:
    """The embedder of a vision model (CLIP/SigLIP images and texts, ViT/DeiT/DINOv2 images), None for a text one."""
    import microformers
    from microformers.errors import InputError

    from .images import VISION_ENCODERS, MultimodalEmbedder, embedding_kind

    kind = embedding_kind(model)
    if kind == "text":
        return None
    model_type = getattr(model.config, "model_type", None)
    if kind == "vision" and model_type not in VISION_ENCODERS:
        raise InputError(
            f"MODEL is a {model_type} vision model; microformers serve embeds images with CLIP and SigLIP (two "
            f"towers) or {', '.join(VISION_ENCODERS)} encoders: serve one of those"
        )
    try:
        import PIL.Image  # noqa: F401
    except ImportError:
        raise InputError(
            "MODEL embeds images, which needs Pillow to decode them: pip install 'microformers-serve[vision]'"
        ) from None
    image_processor = microformers.AutoImageProcessor.from_pretrained(args.model, **load)
    return MultimodalEmbedder(
        model, tokenizer, image_processor, kind, _modules_file(args.model, load), max_pending=args.max_queue
    )


def _modules_file(model: str, load: dict[str, Any]) -> Path | None:
    """The sentence-transformers ``modules.json`` of a folder, a model alias or a Hub id (None without one)."""
    from microformers.errors import MicroformersError
    from microformers.hub import resolve_file
    from microformers.weights import resolve_source

    source, source_kwargs = resolve_source(model, dict(load))
    try:
        return resolve_file(source, "modules.json", required=False, **source_kwargs)
    except MicroformersError:  # offline and not cached: mean pooling without normalisation, as for any encoder
        return None


def _is_generative(config: Any) -> bool:
    """A model type with a causal-LM head that is not one of the known encoders."""
    from microformers.plugins import registry

    model_type = getattr(config, "model_type", None)
    if model_type in _ENCODERS:
        return False
    return any(r.name == (model_type, "AutoModelForCausalLM") for r in registry.all("models"))


# Encoders whose plugins also register a causal-LM head (BERT as a decoder); served for embeddings.
_ENCODERS = {"bert", "distilbert", "roberta", "xlm-roberta", "wav2vec2"}


def head_timeout_protocol(seconds: float) -> type[Any]:
    """uvicorn's h11 protocol, closing a connection whose request head (request line and headers) is not received
    within ``seconds`` of the connection opening or of the first bytes of its next request: uvicorn has no such
    timeout (an idle keep-alive connection is closed after --timeout-keep-alive, but not one that began a head), so
    clients that connect and send nothing, or trickle their headers, would each hold a file descriptor for as long
    as they like, and enough of them leave none for anyone else (``/health`` included)."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeadTimeoutH11Protocol(H11Protocol):
        head_timeout = seconds

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._head_timer: Any = None
            self._arm_head_timer()

        def _arm_head_timer(self) -> None:
            self._disarm_head_timer()
            self._head_timer = self.loop.call_later(self.head_timeout, self._head_timed_out)

        def _disarm_head_timer(self) -> None:
            timer, self._head_timer = getattr(self, "_head_timer", None), None
            if timer is not None:
                timer.cancel()

        def _head_timed_out(self) -> None:
            self._head_timer = None
            waiting_for_head = self.cycle is None or self.cycle.response_complete
            if waiting_for_head and not self.transport.is_closing():
                self.transport.close()  # no request is in progress on it: nothing to answer

        def handle_events(self) -> None:
            cycle = self.cycle
            super().handle_events()
            if self.cycle is not cycle:  # a request head arrived: from here its body has --request-timeout
                self._disarm_head_timer()

        def data_received(self, data: bytes) -> None:
            # the first bytes of a keep-alive connection's next request (idle, it is uvicorn's --timeout-keep-alive's)
            waiting_for_head = self.cycle is None or self.cycle.response_complete
            if waiting_for_head and getattr(self, "_head_timer", None) is None:
                self._arm_head_timer()
            super().data_received(data)

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm_head_timer()
            super().connection_lost(exc)

    return HeadTimeoutH11Protocol


def run_serve(args: argparse.Namespace) -> int:
    import uvicorn
    from sse_starlette.sse import AppStatus

    from .app import create_app

    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    server = load_server(args)
    app = create_app(server)
    # Streams end when their requests finish; sse-starlette must not cut them off at SIGTERM.
    AppStatus.disable_automatic_graceful_drain()

    signalled: list[float] = []

    class DrainingServer(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            signalled.append(time.monotonic())
            if server.engine is not None:
                server.engine.drain()  # refuse waiting requests, let running ones finish
            super().handle_exit(sig, frame)

    # After SIGTERM uvicorn waits drain_timeout seconds for open requests (slow clients included), then cuts them.
    # uvicorn bounds a body (our --request-timeout) and an idle keep-alive connection, not a request's head: a
    # connection that never completes its header lines is closed after --request-timeout (see head_timeout_protocol).
    config = uvicorn.Config(
        app, host=args.host, port=args.port, log_level=args.log_level, timeout_keep_alive=args.timeout_keep_alive,
        timeout_graceful_shutdown=args.drain_timeout,
        http=head_timeout_protocol(getattr(args, "request_timeout", None) or 30.0),
    )  # fmt: skip
    http = DrainingServer(config)
    print(f"microformers serve: {server.model_id} on http://{args.host}:{args.port}/v1", file=sys.stderr, flush=True)
    if server.engine is not None:  # once: how tokens are decoded
        print(f"microformers serve: {server.engine.decode_path}", file=sys.stderr, flush=True)
    http.run()
    if server.engine is not None:
        server.engine.drain()
        left = args.drain_timeout - (time.monotonic() - signalled[0]) if signalled else args.drain_timeout
        if not server.engine.join(timeout=max(left, 0.5)):
            server.engine.close()  # the drain bound is spent: abandon what still runs
    return 0
