"""``microformers chat`` and ``microformers generate``."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from microformers.devices import thread_count_argument

DEFAULT_MODEL = "smollm2-135m-instruct"
DEFAULT_MAX_NEW_TOKENS = 256
# Sampling temperatures below this are refused, as serve refuses them: at 1e-3 two scores 0.1 apart already differ by
# e^-100 in probability, so a smaller one only risks overflowing the scores (1e-300 turns them to inf).
MIN_TEMPERATURE = 1e-3


def _add_model_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--gguf-file", default=None, help="GGUF file inside MODEL's folder")
    parser.add_argument(
        "--quantize",
        choices=("int4", "int8", "gguf"),
        default=None,
        help="quantized weights (microformers-quant): int4/int8 from float weights, gguf keeps a GGUF's blocks",
    )
    parser.add_argument(
        "--max-new-tokens",
        type=int,
        default=None,
        help=f"tokens per reply (default: the model's generation_config.json, else {DEFAULT_MAX_NEW_TOKENS})",
    )
    decoding = parser.add_mutually_exclusive_group()
    decoding.add_argument("--do-sample", action="store_const", const=True, default=None, help="sample")
    decoding.add_argument("--greedy", dest="do_sample", action="store_const", const=False, help="greedy decoding")
    parser.add_argument(
        "--temperature",
        type=_temperature,
        default=None,
        help=f"at least {MIN_TEMPERATURE:g}; default: the model's generation_config.json",
    )
    parser.add_argument("--top-k", type=int, default=None, help="default: the model's generation_config.json")
    parser.add_argument("--top-p", type=float, default=None, help="default: the model's generation_config.json")
    parser.add_argument("--device", default=None, help="where to run the model (cpu, cuda, cuda:1, mps)")
    parser.add_argument("--dtype", default=None, help="weights dtype (float32, bfloat16, float16; default: auto)")
    parser.add_argument("--seed", type=_seed, default=None, help="random seed, 0 <= SEED < 2**64")
    parser.add_argument("--threads", type=thread_count_argument, default=None, help="CPU threads torch uses (default: torch's)")
    parser.add_argument("--system", default=None, help="system prompt")


def _seed(text: str) -> int:
    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 0 <= value < 2**64:
        raise argparse.ArgumentTypeError(f"{text} is out of range; a seed is 0 <= SEED < 2**64")
    return value


def _temperature_value(value: float) -> bool:
    return MIN_TEMPERATURE <= value < float("inf")


def _temperature(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not _temperature_value(value):
        raise argparse.ArgumentTypeError(
            f"{text} must be a number >= {MIN_TEMPERATURE:g} (a smaller one overflows the scores); for the most "
            "likely tokens use --greedy"
        )
    return value


#: What ``/set NAME=VALUE`` changes in a chat, with how each value is read and checked.
SETTINGS: dict[str, tuple[Callable[[str], Any], Callable[[Any], bool], str]] = {
    "max_new_tokens": (int, lambda v: v > 0, "an integer > 0"),
    "do_sample": (lambda t: _boolean(t), lambda v: True, "true or false"),
    "temperature": (float, _temperature_value, f"a number >= {MIN_TEMPERATURE:g} (do_sample=false for greedy)"),
    "top_k": (int, lambda v: v >= 0, "an integer >= 0"),
    "top_p": (float, lambda v: 0.0 < v <= 1.0, "a number in (0, 1]"),
    "repetition_penalty": (float, lambda v: v > 0.0, "a number > 0"),
}

CHAT_HELP = """Commands:
  /help                 this list
  /set NAME=VALUE ...   change a generation setting for the next replies ({names})
  /settings             the settings given on the command line or with /set
  /save [FILE]          write the conversation as JSON (default: chat-YYYYmmdd-HHMMSS.json here)
  /reset                start the conversation over
  /exit                 quit (also Ctrl-D; Ctrl-C stops a reply)
Text that starts with '/' is sent to the model when it starts with '//' (one '/' is dropped)."""


def _boolean(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise ValueError(text)


class Session:
    """A model, its tokenizer, and a conversation.

    A quantized model (``--quantize``, or a folder saved quantized) decodes through its native step
    into a static cache: ``generate`` does that by default where the model has one.
    """

    #: (new tokens, seconds) of the latest reply
    last_reply_speed: tuple[int, float] | None = None

    def __init__(self, args: argparse.Namespace) -> None:
        import microformers

        if args.seed is not None:
            microformers.set_seed(args.seed)
        if getattr(args, "threads", None) is not None:
            import torch

            torch.set_num_threads(args.threads)
        load_kwargs: dict[str, Any] = {"gguf_file": args.gguf_file} if args.gguf_file else {}
        self.tokenizer = microformers.AutoTokenizer.from_pretrained(args.model, **load_kwargs)
        quantize = getattr(args, "quantize", None)
        model_kwargs = {"quantization_config": {"quant_method": quantize}} if quantize else {}
        model_kwargs.update(_placement(getattr(args, "device", None), getattr(args, "dtype", None)))
        self.model = microformers.AutoModelForCausalLM.from_pretrained(args.model, **load_kwargs, **model_kwargs)
        self.args = args
        self.messages: list[dict[str, str]] = []
        self.reset()

    def reset(self) -> None:
        self.messages = [{"role": "system", "content": self.args.system}] if self.args.system else []

    def generation_kwargs(self) -> dict[str, Any]:
        """Flags given on the command line; everything else comes from the model's generation_config.json."""
        kwargs: dict[str, Any] = {}
        for name in SETTINGS:
            value = getattr(self.args, name, None)
            if value is not None:
                kwargs[name] = value
        config = getattr(self.model, "generation_config", None)
        if "max_new_tokens" not in kwargs and getattr(config, "max_new_tokens", None) is None:
            kwargs["max_new_tokens"] = DEFAULT_MAX_NEW_TOKENS  # not max_length=20: a reply needs room
        return kwargs

    def answer(self, inputs: dict[str, Any], out: TextIO | None) -> str:
        from microformers import TextStreamer

        rows = self.model.get_input_embeddings().num_embeddings
        if inputs["input_ids"].numel() and int(inputs["input_ids"].max()) >= rows:
            from microformers import ConfigError

            raise ConfigError(
                f"the tokenizer of {self.args.model} produced token id {int(inputs['input_ids'].max())}, but the "
                f"model's vocabulary has {rows} entries (config vocab_size={self.model.config.vocab_size}): the "
                "tokenizer does not belong to this model. Put the model's own tokenizer files in its folder."
            )
        streamer = TextStreamer(self.tokenizer, skip_prompt=True, skip_special_tokens=True) if out else None
        started = time.perf_counter()
        output = self.model.generate(**inputs, streamer=streamer, **self.generation_kwargs())
        new_tokens = output[0, inputs["input_ids"].shape[1] :]
        self.last_reply_speed = (int(new_tokens.numel()), time.perf_counter() - started)
        return self.tokenizer.decode(new_tokens, skip_special_tokens=True).strip()

    def reply(self, user_text: str, out: TextIO | None = None) -> str:
        self.messages.append({"role": "user", "content": user_text})
        inputs = self.tokenizer.apply_chat_template(
            self.messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
        )
        text = self.answer(dict(inputs), out)
        self.messages.append({"role": "assistant", "content": text})
        return text


def chat_command(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    parser.add_argument("model", nargs="?", default=DEFAULT_MODEL, help=f"folder, Hub id or alias ({DEFAULT_MODEL})")
    _add_model_arguments(parser)
    return run_chat


def run_chat(args: argparse.Namespace, stdin: TextIO | None = None, stdout: TextIO | None = None) -> int:
    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    interactive = stdin.isatty()
    session = Session(args)
    print(f"Chatting with {args.model}. /help lists the commands, /exit quits.", file=stdout, flush=True)
    while True:
        if interactive:
            print("> ", end="", file=stdout, flush=True)
        line = _read_line(stdin)
        if not line:
            break
        text = line.strip()
        if not text:
            continue
        if text == "/exit":
            break
        if text.startswith("/") and not text.startswith("//"):
            print(_chat_command(session, args, text), file=stdout, flush=True)
            continue
        if text.startswith("//"):
            text = text[1:]
        if not interactive:
            print(f"> {text}", file=stdout, flush=True)
        turn = len(session.messages)
        try:
            session.reply(text, out=stdout)
        except KeyboardInterrupt:  # stop this reply; the conversation before it stays
            del session.messages[turn:]
            print("\n(reply stopped; Ctrl-C at the prompt or /exit quits)", file=stdout, flush=True)
            continue
        speed = getattr(session, "last_reply_speed", None)
        if speed is not None and speed[1] > 0:
            print(f"({speed[0]} tokens, {speed[0] / speed[1]:.1f} tokens/s)", file=stdout, flush=True)
    return 0


def _chat_command(session: Any, args: argparse.Namespace, text: str) -> str:
    """Run one slash command of the chat; the answer to print."""
    command, _, rest = text.partition(" ")
    rest = rest.strip()
    if command == "/help":
        return CHAT_HELP.format(names=", ".join(SETTINGS))
    if command == "/reset":
        session.reset()
        return "(conversation reset)"
    if command == "/settings":
        given = {name: getattr(args, name, None) for name in SETTINGS}
        shown = ", ".join(f"{name}={value}" for name, value in given.items() if value is not None)
        return shown or "(no settings given: the model's generation_config.json decides)"
    if command == "/set":
        return _set_settings(args, rest)
    if command == "/save":
        return _save_conversation(session.messages, rest)
    return f"unknown command {command}; /help lists the commands (start with '//' to send text beginning with '/')"


def _set_settings(args: argparse.Namespace, text: str) -> str:
    if not text:
        return f"/set NAME=VALUE ...: name one of {', '.join(SETTINGS)}"
    changes: dict[str, Any] = {}
    for item in text.split():
        name, equals, raw = item.partition("=")
        if name not in SETTINGS:
            return f"/set: unknown setting {name!r}; settings: {', '.join(SETTINGS)} (nothing changed)"
        read, valid, expected = SETTINGS[name]
        try:
            value = read(raw) if equals else None
        except ValueError:
            value = None
        if value is None or not valid(value):
            return f"/set {item}: {name} must be {expected} (nothing changed)"
        changes[name] = value
    for name, value in changes.items():
        setattr(args, name, value)
    return "(" + ", ".join(f"{name}={value}" for name, value in changes.items()) + ")"


def _save_conversation(messages: list[dict[str, str]], target: str) -> str:
    """Write the conversation as JSON; a kill mid-write leaves the old file or the new one, never half of one."""
    path = Path(target).expanduser() if target else Path(time.strftime("chat-%Y%m%d-%H%M%S.json"))
    if path.is_dir():
        return f"/save {target}: that is a folder; name a file (e.g. {path / 'chat.json'})"
    if not path.parent.is_dir():
        return f"/save {target}: the folder {path.parent} does not exist"
    handle, staging = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            json.dump(messages, file, ensure_ascii=False, indent=2)
            file.flush()
            os.fsync(file.fileno())
        os.replace(staging, path)
    except OSError as exc:
        Path(staging).unlink(missing_ok=True)
        return f"/save {target}: could not write {path}: {exc}"
    return f"(saved {len(messages)} messages to {path})"


def _read_line(stdin: TextIO) -> str:
    try:
        return stdin.readline()
    except KeyboardInterrupt:  # Ctrl-C at the prompt quits
        return ""


def _placement(device: str | None, dtype: str | None) -> dict[str, Any]:
    import torch

    from microformers import ConfigError
    from microformers.modeling import to_torch_dtype

    kwargs: dict[str, Any] = {}
    if device is not None:
        try:
            kwargs["device"] = torch.device(device)
        except RuntimeError as exc:
            raise ConfigError(f"--device {device!r} is not a device: {exc}; use cpu, cuda, cuda:1 or mps") from exc
        if kwargs["device"].type == "cuda" and not torch.cuda.is_available():
            raise ConfigError(f"--device {device}: this torch build or machine has no CUDA device; use --device cpu")
    if dtype is not None:
        kwargs["dtype"] = dtype if dtype == "auto" else to_torch_dtype(dtype)
    return kwargs


def generate_command(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    parser.add_argument("words", nargs="+", metavar="[MODEL] PROMPT", help="optional model, then the prompt")
    parser.add_argument("--raw", action="store_true", help="continue the prompt as plain text (no chat template)")
    _add_model_arguments(parser)

    def run(args: argparse.Namespace) -> int:
        if len(args.words) > 2:
            raise SystemExit('microformers generate: quote the prompt: microformers generate [MODEL] "PROMPT"')
        args.model, args.prompt = args.words if len(args.words) == 2 else (DEFAULT_MODEL, args.words[0])
        session = Session(args)
        if args.raw:
            inputs = dict(session.tokenizer(args.prompt, return_tensors="pt"))
            print(session.answer(inputs, out=None))
        else:
            print(session.reply(args.prompt))
        return 0

    return run
