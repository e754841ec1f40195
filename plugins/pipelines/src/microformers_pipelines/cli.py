"""``microformers run TASK [INPUT ...]``: run a pipeline on arguments or stdin lines; one JSON line per input."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator
from typing import Any, TextIO

from microformers import ConfigError


def run_command(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    parser.usage = "microformers run TASK [INPUT ...] [OPTIONS]   (options anywhere after run)"
    parser.add_argument("task", help="task name, e.g. fill-mask, text-generation, question-answering")
    parser.add_argument(
        "inputs",
        nargs="*",
        metavar="INPUT",
        help="inputs (default: one per stdin line); a JSON object or array is parsed, e.g. "
        '\'{"question": "...", "context": "..."}\' or a chat',
    )
    parser.add_argument("-m", "--model", default=None, help="folder, Hub id or alias (default: the task's default)")
    parser.add_argument("--tokenizer", default=None, help="tokenizer folder (default: the model's)")
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:0, ...")
    parser.add_argument("--dtype", default=None, help="float32, bfloat16, auto, ...")
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--gguf-file", default=None, help="GGUF file inside the model folder")
    parser.add_argument(
        "-o",
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="task option, VALUE parsed as JSON when it is JSON (e.g. -o top_k=3 -o max_new_tokens=20)",
    )
    return run


def parse_options(items: list[str]) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"microformers run: option {item!r} is not KEY=VALUE (e.g. -o top_k=3)")
        options[key.strip().replace("-", "_")] = _parse_value(value)
    return options


def _check_device(device: str | None) -> None:
    if device is not None:
        from microformers.devices import check_device

        check_device(device, "--device")


def _check_dtype(dtype: str | None) -> None:
    allowed = ("auto", "float32", "float16", "bfloat16", "float64", "float", "half", "double")
    if dtype is not None and dtype.removeprefix("torch.") not in allowed:
        raise ConfigError(
            f"--dtype {dtype} is not a floating-point dtype for model weights; use one of "
            f"{', '.join(allowed[:5])} (8-bit or 4-bit weights need a quantization config, not --dtype)"
        )


def _parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _parse_input(text: str) -> Any:
    stripped = text.strip()
    if stripped[:1] in ("{", "["):
        try:
            return json.loads(stripped)
        except json.JSONDecodeError:
            pass
    return text


def _stdin_inputs(stream: TextIO) -> Iterator[Any]:
    for line in stream:
        line = line.rstrip("\n")
        if line.strip():
            yield _parse_input(line)


def _plain(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def run(args: argparse.Namespace, stdin: TextIO | None = None, stdout: TextIO | None = None) -> int:
    from microformers import pipeline

    stdout = stdout or sys.stdout
    options = parse_options(args.option)
    _check_device(args.device)
    _check_dtype(args.dtype)
    load: dict[str, Any] = {"gguf_file": args.gguf_file} if args.gguf_file else {}
    pipe = pipeline(
        args.task,
        model=args.model,
        tokenizer=args.tokenizer,
        device=args.device,
        dtype=args.dtype,
        batch_size=args.batch_size,
        **load,
    )
    try:  # refuse unknown options before reading any input
        pipe._sanitize_parameters(**options)
    except TypeError:
        import inspect

        known = [p for p in inspect.signature(pipe._sanitize_parameters).parameters if p != "kwargs"]
        unknown = sorted(set(options) - set(known)) or sorted(options)
        raise ConfigError(
            f"-o {', '.join(unknown)}: not an option of the {args.task} task; its options: {', '.join(known) or 'none'}"
        ) from None
    inputs = [_parse_input(text) for text in args.inputs] if args.inputs else _stdin_inputs(stdin or sys.stdin)
    for result in pipe(iter(inputs), **options):
        print(json.dumps(result, default=_plain, ensure_ascii=False), file=stdout, flush=True)
    return 0
