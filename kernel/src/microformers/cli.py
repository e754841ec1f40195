"""The ``microformers`` command: every subcommand comes from a plugin's ``register_cli_commands``."""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Sequence

from ._version import __version__
from .errors import MicroformersError
from .plugins import registry


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, object]]:
    parser = argparse.ArgumentParser(prog="microformers", description="Transformers on a plugin microkernel")
    parser.add_argument("--version", action="version", version=f"microformers {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    runners: dict[str, object] = {}
    for reg in registry.all("cli_commands"):
        command_parser = sub.add_parser(reg.name, help=reg.meta.get("help", ""))
        try:
            runners[reg.name] = reg.load()(command_parser)
        except MicroformersError as exc:
            runners[reg.name] = exc
    return parser, runners


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """The command's options may stand anywhere after its name, between its positional arguments too
    (``run TASK --model M INPUT``): the command's own parser reads its arguments intermixed."""
    argv = list(sys.argv[1:] if argv is None else argv)
    commands = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    if not argv or argv[0].startswith("-") or commands is None or argv[0] not in commands.choices:
        return parser.parse_args(argv)
    try:
        args = commands.choices[argv[0]].parse_intermixed_args(argv[1:])
    except TypeError:  # a command whose parser intermixed parsing cannot handle (its own subcommands)
        return parser.parse_args(argv)
    args.command = argv[0]
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run a subcommand. Errors print one line (no traceback; MICROFORMERS_TRACEBACK=1 shows it)."""
    command = ""
    try:
        parser, runners = build_parser()
        argv = list(sys.argv[1:] if argv is None else argv)
        provider = registry.provider_of("cli_commands", argv[0]) if argv and argv[0] not in runners else None
        if provider:  # a command of a known plugin that is not installed: name it rather than "invalid choice"
            return _fail(
                f"microformers: the '{argv[0]}' command is not installed: it comes with {provider} "
                f"(pip install {provider})",
                2,
            )
        args = _parse(parser, argv)
        if not args.command:
            parser.print_help()
            return 0
        command = f" {args.command}"
        runner = runners[args.command]
        if isinstance(runner, MicroformersError):
            raise runner
        return int(runner(args) or 0)  # type: ignore[operator]
    except MicroformersError as exc:
        return _fail(f"microformers{command}: error: {exc}", 2)
    except KeyboardInterrupt:
        return _fail(f"\nmicroformers{command}: interrupted", 130)
    except BrokenPipeError:  # the reader went away (``| head``): stop quietly, as a SIGPIPE would
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except Exception as exc:
        return _fail(
            f"microformers{command}: internal error: {type(exc).__name__}: {exc}. This is a bug in microformers or "
            "a plugin; please report it (set MICROFORMERS_TRACEBACK=1 to see where it happened).",
            1,
        )


def _fail(message: str, code: int) -> int:
    if os.environ.get("MICROFORMERS_TRACEBACK"):
        traceback.print_exc()
    print(message, file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
