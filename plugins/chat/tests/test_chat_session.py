"""``microformers chat``: Ctrl-C stops a reply and keeps the conversation; decoding defaults come from the
model's generation_config.json, command-line flags override them (issue 18 item 8). No model is loaded:
the session is replaced by a scripted one, the defaults are checked on a stand-in model."""

from __future__ import annotations

import argparse
import io
from types import SimpleNamespace
from typing import Any

import pytest

from microformers import ConfigError, GenerationConfig
from microformers_chat import commands


class _ScriptedSession:
    """Replies "ok"; the second message's reply is interrupted half-way (as Ctrl-C would)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.messages: list[dict[str, str]] = []
        self.calls = 0

    def reset(self) -> None:
        self.messages = []

    def reply(self, text: str, out: Any = None) -> str:
        self.calls += 1
        self.messages.append({"role": "user", "content": text})
        if self.calls == 2:
            print("partial answ", end="", file=out)
            raise KeyboardInterrupt
        self.messages.append({"role": "assistant", "content": "ok"})
        print("ok", file=out)
        return "ok"


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    commands.chat_command(parser)
    return parser.parse_args(list(argv))


def test_ctrl_c_stops_the_reply_and_keeps_the_conversation(monkeypatch: pytest.MonkeyPatch) -> None:
    sessions: list[_ScriptedSession] = []
    monkeypatch.setattr(commands, "Session", lambda args: sessions.append(_ScriptedSession(args)) or sessions[-1])
    out = io.StringIO()
    code = commands.run_chat(_args("m"), stdin=io.StringIO("first\nsecond\nthird\n/exit\n"), stdout=out)
    assert code == 0
    session = sessions[0]
    assert session.calls == 3  # the chat went on after the interrupted reply
    assert [m["content"] for m in session.messages] == ["first", "ok", "third", "ok"]
    assert "(reply stopped; Ctrl-C at the prompt or /exit quits)" in out.getvalue()


def test_ctrl_c_at_the_prompt_quits(monkeypatch: pytest.MonkeyPatch) -> None:
    class _Interrupting(io.StringIO):
        def readline(self, *_: Any) -> str:  # type: ignore[override]
            raise KeyboardInterrupt

    monkeypatch.setattr(commands, "Session", _ScriptedSession)
    assert commands.run_chat(_args("m"), stdin=_Interrupting(), stdout=io.StringIO()) == 0


def _kwargs(generation_config: GenerationConfig, *argv: str) -> dict[str, Any]:
    session = object.__new__(commands.Session)
    session.args = _args("m", *argv)
    session.model = SimpleNamespace(generation_config=generation_config)
    return session.generation_kwargs()


def test_decoding_defaults_come_from_generation_config() -> None:
    sampling = GenerationConfig(do_sample=True, temperature=0.2, top_p=0.9, max_new_tokens=40)
    assert _kwargs(sampling) == {}  # nothing overrides the model's own settings
    assert _kwargs(GenerationConfig(do_sample=True)) == {"max_new_tokens": commands.DEFAULT_MAX_NEW_TOKENS}
    flags = ("--temperature", "0.7", "--top-p", "0.5", "--max-new-tokens", "9", "--greedy")
    assert _kwargs(sampling, *flags) == {"temperature": 0.7, "top_p": 0.5, "max_new_tokens": 9, "do_sample": False}
    assert _kwargs(sampling, "--do-sample", "--top-k", "5") == {"do_sample": True, "top_k": 5}


def test_device_and_dtype_flags() -> None:
    import torch

    assert commands._placement("cpu", "bfloat16") == {"device": torch.device("cpu"), "dtype": torch.bfloat16}
    assert commands._placement(None, "auto") == {"dtype": "auto"}
    with pytest.raises(ConfigError, match="--device 'nodevice'"):
        commands._placement("nodevice", None)
    with pytest.raises(ConfigError, match="dtype"):
        commands._placement(None, "float33")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="no CUDA device"):
            commands._placement("cuda", None)
