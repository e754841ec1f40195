"""The ``microformers`` command: every subcommand comes from a plugin's ``register_cli_commands``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .errors import MicroformersError
from .plugins import registry


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, object]]:
    parser = argparse.ArgumentParser(prog="microformers", description="Transformers on a plugin microkernel")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    runners: dict[str, object] = {}
    for reg in registry.all("cli_commands"):
        command_parser = sub.add_parser(reg.name, help=reg.meta.get("help", ""))
        try:
            runners[reg.name] = reg.load()(command_parser)
        except MicroformersError as exc:
            runners[reg.name] = exc
    return parser, runners


def main(argv: Sequence[str] | None = None) -> int:
    parser, runners = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 0
    runner = runners[args.command]
    try:
        if isinstance(runner, MicroformersError):
            raise runner
        result = runner(args)  # type: ignore[operator]
    except MicroformersError as exc:
        print(f"microformers {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
