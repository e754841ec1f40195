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

REAL_SESSION = commands.Session  # tests below replace commands.Session with scripted ones


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


def _kwargs_of(args: argparse.Namespace, generation_config: GenerationConfig) -> dict[str, Any]:
    session = object.__new__(REAL_SESSION)
    session.args = args
    session.model = SimpleNamespace(generation_config=generation_config)
    return session.generation_kwargs()


def _kwargs(generation_config: GenerationConfig, *argv: str) -> dict[str, Any]:
    return _kwargs_of(_args("m", *argv), generation_config)


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


def _chat(monkeypatch: pytest.MonkeyPatch, script: str, *argv: str) -> tuple[_ScriptedSession, argparse.Namespace, str]:
    sessions: list[_ScriptedSession] = []
    monkeypatch.setattr(commands, "Session", lambda args: sessions.append(_ScriptedSession(args)) or sessions[-1])
    args, out = _args("m", *argv), io.StringIO()
    assert commands.run_chat(args, stdin=io.StringIO(script), stdout=out) == 0
    return sessions[0], args, out.getvalue()


def test_help_lists_every_command_and_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    session, _, out = _chat(monkeypatch, "/help\n")
    for word in ("/set", "/settings", "/save", "/reset", "/exit", *commands.SETTINGS):
        assert word in out
    assert session.calls == 0  # a command is never sent to the model


def test_unknown_slash_command_is_refused_and_double_slash_sends_text(monkeypatch: pytest.MonkeyPatch) -> None:
    session, _, out = _chat(monkeypatch, "/tmperature 3\n//etc is a folder\n")
    assert "unknown command /tmperature; /help lists the commands" in out
    assert session.calls == 1 and session.messages[0]["content"] == "/etc is a folder"


def test_set_changes_generation_settings_for_the_next_replies(monkeypatch: pytest.MonkeyPatch) -> None:
    _, args, out = _chat(monkeypatch, "/set temperature=0.7 max_new_tokens=12 do_sample=true\n/settings\n")
    assert (args.temperature, args.max_new_tokens, args.do_sample) == (0.7, 12, True)
    assert "temperature=0.7" in out.splitlines()[-1] and "max_new_tokens=12" in out.splitlines()[-1]
    assert _kwargs_of(args, GenerationConfig()) == {"max_new_tokens": 12, "do_sample": True, "temperature": 0.7}


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("/set temprature=0.7", "unknown setting 'temprature'"),
        ("/set temperature=0", "temperature must be a number >= 0.001 (do_sample=false for greedy)"),
        ("/set top_p=hot", "top_p must be a number in (0, 1]"),
        ("/set do_sample=maybe", "do_sample must be true or false"),
        ("/set top_k=3 max_new_tokens", "max_new_tokens must be an integer > 0"),
    ],
)
def test_bad_set_is_refused_and_changes_nothing(monkeypatch: pytest.MonkeyPatch, line: str, message: str) -> None:
    _, args, out = _chat(monkeypatch, line + "\n")
    assert message in out and "(nothing changed)" in out
    assert args.top_k is None and args.temperature is None


def test_save_writes_the_conversation_as_json(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    import json

    target = tmp_path / "talk.json"
    _, _, out = _chat(monkeypatch, f"hello\n/save {target}\n/save {tmp_path}\n/save {tmp_path / 'no' / 'x.json'}\n")
    assert json.loads(target.read_text()) == [
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "ok"},
    ]
    assert f"(saved 2 messages to {target})" in out
    assert "that is a folder" in out and "does not exist" in out
    assert [p.name for p in tmp_path.iterdir()] == ["talk.json"]  # no staging file left behind


def test_each_reply_reports_its_speed(monkeypatch: pytest.MonkeyPatch) -> None:
    class _Timed(_ScriptedSession):
        last_reply_speed = (20, 0.5)

    monkeypatch.setattr(commands, "Session", _Timed)
    out = io.StringIO()
    commands.run_chat(_args("m"), stdin=io.StringIO("hi\n"), stdout=out)
    assert "(20 tokens, 40.0 tokens/s)" in out.getvalue()


def test_threads_flag_sets_torchs_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    import microformers

    threads: list[int] = []
    monkeypatch.setattr(torch, "set_num_threads", threads.append)
    monkeypatch.setattr(microformers.AutoTokenizer, "from_pretrained", lambda *a, **k: SimpleNamespace())
    monkeypatch.setattr(microformers.AutoModelForCausalLM, "from_pretrained", lambda *a, **k: SimpleNamespace())
    REAL_SESSION(_args("m", "--threads", "3"))
    assert threads == [3]
    REAL_SESSION(_args("m"))
    assert threads == [3]  # without the flag torch keeps its own choice
