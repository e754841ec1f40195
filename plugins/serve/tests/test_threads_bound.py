"""``serve --threads``: 1 to the kernel's MAX_CPU_THREADS, the same bound chat uses (issue 42 audit)."""

from __future__ import annotations

import argparse

import pytest

from microformers.devices import MAX_CPU_THREADS


def _parser() -> argparse.ArgumentParser:
    from microformers_serve.commands import serve_command

    parser = argparse.ArgumentParser(prog="microformers serve")
    serve_command(parser)
    return parser


@pytest.mark.parametrize("threads", ["100000", str(MAX_CPU_THREADS + 1)])
def test_more_threads_than_the_shared_bound_is_an_argument_error(
    capsys: pytest.CaptureFixture[str], threads: str
) -> None:
    """torch.set_num_threads(100000) crashes the process: refused while parsing, before torch is touched."""
    with pytest.raises(SystemExit) as exited:
        _parser().parse_args(["--threads", threads])
    assert exited.value.code == 2
    assert f"argument --threads: {threads} threads is more than 1,024" in capsys.readouterr().err


def test_the_bound_itself_is_accepted() -> None:
    assert _parser().parse_args(["--threads", str(MAX_CPU_THREADS)]).threads == MAX_CPU_THREADS
