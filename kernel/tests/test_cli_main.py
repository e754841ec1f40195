"""``microformers.cli.main`` in-process: each exit path (other CLI tests run it in subprocesses, with the installed
code, which the mutation pass cannot see; docs/reliability.md)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

import pytest

from microformers import ConfigError
from microformers import cli as cli_module
from microformers.plugins import Registry

# From test_cli_mutants.py: ``microformers.cli.main`` in-process: each exit path (other CLI tests run it in
# subprocesses, with the installed code, which the mutation pass cannot see; docs/reliability.md).


def _command(behaviour: Callable[[argparse.Namespace], object]) -> Callable[[argparse.ArgumentParser], Callable]:
    def build(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], object]:
        parser.add_argument("--flag", default="x")
        return behaviour

    return build


def _refused_at_build(parser: argparse.ArgumentParser) -> Callable:
    raise ConfigError("this command needs a setting")


def _raise(exc: BaseException) -> Callable[[argparse.Namespace], object]:
    def run(args: argparse.Namespace) -> object:
        raise exc

    return run


@pytest.fixture
def commands(monkeypatch: pytest.MonkeyPatch, isolated_registry: Callable[..., Registry]) -> Registry:
    fresh = isolated_registry(cli_module)
    fresh.add("cli_commands", "ok", _command(lambda args: None), help="does nothing")
    fresh.add("cli_commands", "three", _command(lambda args: 3 if args.flag == "y" else 4))
    fresh.add("cli_commands", "refused", _refused_at_build)
    fresh.add("cli_commands", "bad", _command(_raise(ConfigError("bad value for --flag"))))
    fresh.add("cli_commands", "interrupted", _command(_raise(KeyboardInterrupt())))
    fresh.add("cli_commands", "pipe", _command(_raise(BrokenPipeError())))
    fresh.add("cli_commands", "bug", _command(_raise(KeyError("oops"))))
    monkeypatch.delenv("MICROFORMERS_TRACEBACK", raising=False)
    return fresh


def test_no_command_prints_help_listing_the_commands(commands: Registry, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_module.main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: microformers [-h] [--version] COMMAND ...")
    assert "\n\nTransformers on a plugin microkernel\n\n" in out and "does nothing" in out


def test_a_command_returns_its_exit_code(commands: Registry, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_module.main(["ok"]) == 0
    assert cli_module.main(["three", "--flag", "y"]) == 3
    assert cli_module.main(["three"]) == 4
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["refused"], 2, "microformers refused: error: this command needs a setting\n"),
        (["bad"], 2, "microformers bad: error: bad value for --flag\n"),
        (["interrupted"], 130, "\nmicroformers interrupted: interrupted\n"),
        (
            ["bug"],
            1,
            "microformers bug: internal error: KeyError: 'oops'. This is a bug in microformers or a plugin; please "
            "report it (set MICROFORMERS_TRACEBACK=1 to see where it happened).\n",
        ),
    ],
)
def test_failures_print_one_line_and_exit_with_their_code(
    commands: Registry, capsys: pytest.CaptureFixture[str], argv: list[str], code: int, message: str
) -> None:
    assert cli_module.main(argv) == code
    assert capsys.readouterr().err == message


def test_the_traceback_only_when_asked(
    commands: Registry, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MICROFORMERS_TRACEBACK", "1")
    assert cli_module.main(["bug"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):") and "KeyError: 'oops'" in err
    assert err.endswith("to see where it happened).\n")


def test_a_closed_pipe_ends_quietly_with_stdout_sent_to_devnull(
    commands: Registry, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    moved: list[tuple[str, int]] = []
    monkeypatch.setattr(
        cli_module.os, "dup2", lambda fd, target: moved.append((os.readlink(f"/proc/self/fd/{fd}"), target))
    )
    monkeypatch.setattr(cli_module.sys.stdout, "fileno", lambda: 99)
    assert cli_module.main(["pipe"]) == 141
    assert moved == [("/dev/null", 99)]
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("exc", "code", "message"),
    [
        (ConfigError("broken plugin"), 2, "microformers: error: broken plugin\n"),
        (KeyboardInterrupt(), 130, "\nmicroformers: interrupted\n"),
    ],
)
def test_failures_during_start_up_name_no_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], exc: BaseException, code: int, message: str
) -> None:
    def build_parser() -> None:
        raise exc

    monkeypatch.setattr(cli_module, "build_parser", build_parser)
    monkeypatch.delenv("MICROFORMERS_TRACEBACK", raising=False)
    assert cli_module.main(["anything"]) == code
    assert capsys.readouterr().err == message


def test_a_command_without_help_is_listed_by_name_alone(commands: Registry, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_module.main([]) == 0
    lines = [line.strip() for line in capsys.readouterr().out.splitlines()]
    assert "three" in lines and "refused" in lines  # no help text after the names


@pytest.mark.parametrize(
    ("command", "distribution"),
    [("chat", "microformers-chat"), ("serve", "microformers-serve"), ("run", "microformers-pipelines"),
     ("export", "microformers-onnx")],
)  # fmt: skip
def test_a_known_command_that_is_not_installed_names_its_distribution(
    commands: Registry, capsys: pytest.CaptureFixture[str], command: str, distribution: str
) -> None:
    commands.providers[("cli_commands", command)] = distribution  # as the plugins' provider tables declare it
    assert cli_module.main([command, "--flag", "y"]) == 2
    assert capsys.readouterr().err == (
        f"microformers: the '{command}' command is not installed: it comes with {distribution} "
        f"(pip install {distribution})\n"
    )


def test_the_provider_table_names_the_distribution_of_each_project_command() -> None:
    import microformers

    for command, distribution in [("chat", "microformers-chat"), ("generate", "microformers-chat"),
                                  ("serve", "microformers-serve"), ("run", "microformers-pipelines"),
                                  ("export", "microformers-onnx"), ("new-plugin", "microformers-sdk")]:  # fmt: skip
        assert microformers.registry.provider_of("cli_commands", command) == distribution
