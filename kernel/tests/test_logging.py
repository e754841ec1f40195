"""microformers.logging: the reference's verbosity functions, the env variables, progress-bar switch."""

from __future__ import annotations

import logging as std_logging
import subprocess
import sys
from collections.abc import Iterator

import pytest

from microformers import logging


def run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env={**os.environ, **env}
    )


@pytest.fixture
def restore_verbosity():
    level = logging.get_verbosity()
    yield
    logging.set_verbosity(level)
    logging.reset_format()
    logging.enable_default_handler()
    logging.enable_progress_bar()


def test_set_and_get_verbosity(restore_verbosity):
    for setter, level in [
        (logging.set_verbosity_debug, logging.DEBUG),
        (logging.set_verbosity_info, logging.INFO),
        (logging.set_verbosity_error, logging.ERROR),
        (logging.set_verbosity_warning, logging.WARNING),
    ]:
        setter()
        assert logging.get_verbosity() == level
        assert logging.get_logger("microformers.some.module").getEffectiveLevel() == level


def test_messages_go_to_stderr_at_the_chosen_level():
    code = (
        "from microformers import logging; log = logging.get_logger('plugin_x');"
        "log.info('info-line'); log.warning('warn-line'); logging.set_verbosity_info(); log.info('info-after')"
    )
    out = run(code)
    assert "info-line" not in out.stderr
    assert "warn-line" in out.stderr and "info-after" in out.stderr


@pytest.mark.parametrize("var", ["MICROFORMERS_VERBOSITY", "TRANSFORMERS_VERBOSITY"])
def test_environment_sets_the_level(var):
    out = run("import microformers; print(microformers.logging.get_verbosity())", **{var: "error"})
    assert out.stdout.strip() == str(logging.ERROR)


def test_unknown_environment_level_warns_and_uses_warning():
    out = run("import microformers; print(microformers.logging.get_verbosity())", MICROFORMERS_VERBOSITY="loud")
    assert out.stdout.strip() == str(logging.WARNING)
    assert "MICROFORMERS_VERBOSITY='loud' is not a verbosity" in out.stderr


def test_handler_and_format_switches():
    code = (
        "from microformers import logging; log = logging.get_logger('m');"
        "logging.set_verbosity_info(); logging.disable_default_handler(); log.info('hidden');"
        "logging.enable_default_handler(); logging.enable_explicit_format(); log.warning('shown');"
        "logging.reset_format(); log.warning('plain')"
    )
    err = run(code).stderr
    assert "hidden" not in err
    assert "[WARNING|<string>:1]" in err and ">> shown" in err
    assert "\nplain" in err and "hidden" not in err


def test_progress_bar_switch(restore_verbosity):
    logging.disable_progress_bar()
    assert not logging.is_progress_bar_enabled()
    logging.enable_progress_bar()
    assert logging.is_progress_bar_enabled()


# From test_logging_mutants.py: ``microformers.logging`` in-process (test_logging.py checks the same in
# subprocesses, which run the installed code: the mutation pass could not see those checks; docs/reliability.md).


ROOT = std_logging.getLogger("microformers")


class _Records(std_logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[std_logging.LogRecord] = []

    def emit(self, record: std_logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Records]:
    """The library logger as a new process sees it: no default handler yet, no verbosity variables."""
    saved = (list(ROOT.handlers), ROOT.level, ROOT.propagate, logging._progress_bars)
    for handler in list(ROOT.handlers):
        ROOT.removeHandler(handler)
    monkeypatch.setattr(logging, "_handler", None)
    monkeypatch.delenv("MICROFORMERS_VERBOSITY", raising=False)
    monkeypatch.delenv("TRANSFORMERS_VERBOSITY", raising=False)
    records = _Records()
    ROOT.addHandler(records)
    ROOT.setLevel(std_logging.NOTSET)
    ROOT.propagate = True
    yield records
    for handler in list(ROOT.handlers):
        ROOT.removeHandler(handler)
    for handler in saved[0]:
        ROOT.addHandler(handler)
    ROOT.setLevel(saved[1])
    ROOT.propagate = saved[2]
    logging._progress_bars = saved[3]


@pytest.mark.parametrize("var", ["MICROFORMERS_VERBOSITY", "TRANSFORMERS_VERBOSITY"])
@pytest.mark.parametrize(("value", "level"), [("error", std_logging.ERROR), ("DEBUG", std_logging.DEBUG)])
def test_the_environment_sets_the_level(
    fresh: _Records, monkeypatch: pytest.MonkeyPatch, var: str, value: str, level: int
) -> None:
    monkeypatch.setenv(var, value)
    assert logging.get_verbosity() == level
    assert fresh.records == []


def test_the_library_variable_wins_and_an_empty_one_is_skipped(
    fresh: _Records, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MICROFORMERS_VERBOSITY", "info")
    monkeypatch.setenv("TRANSFORMERS_VERBOSITY", "error")
    assert logging._env_level() == std_logging.INFO
    monkeypatch.setenv("MICROFORMERS_VERBOSITY", "")
    assert logging._env_level() == std_logging.ERROR
    monkeypatch.delenv("TRANSFORMERS_VERBOSITY")
    assert logging._env_level() == std_logging.WARNING
    assert fresh.records == []


def test_an_unknown_level_warns_and_uses_warning(fresh: _Records, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRANSFORMERS_VERBOSITY", "loud")
    assert logging._env_level() == std_logging.WARNING
    (record,) = fresh.records
    assert record.name == "microformers" and record.levelno == std_logging.WARNING
    assert record.getMessage() == (
        "TRANSFORMERS_VERBOSITY='loud' is not a verbosity; use one of debug, info, warning, error, critical. Using 'warning'."
    )


def test_the_default_handler_writes_to_stderr_once(fresh: _Records, capsys: pytest.CaptureFixture[str]) -> None:
    ROOT.removeHandler(fresh)
    log = logging.get_logger("plugin_x")
    assert log.name == "microformers.plugin_x"
    logging.get_logger()  # a second call adds no second handler
    (handler,) = ROOT.handlers
    assert handler is logging._handler and handler.stream is sys.stderr
    assert handler.flush == sys.stderr.flush
    assert ROOT.propagate is False and ROOT.level == std_logging.WARNING
    log.info("hidden")
    log.warning("shown")
    assert capsys.readouterr().err == "shown\n"


def test_get_logger_names(fresh: _Records) -> None:
    assert logging.get_logger() is ROOT and logging.get_logger("microformers") is ROOT
    assert logging.get_logger("microformers.a.b").name == "microformers.a.b"
    assert logging.get_logger("microformersx").name == "microformers.microformersx"
    assert logging._handler is not None


def test_handler_propagation_and_format_switches(fresh: _Records) -> None:
    logging.get_logger()
    handler = logging._handler
    logging.disable_default_handler()
    assert handler not in ROOT.handlers
    logging.enable_default_handler()
    logging.enable_default_handler()
    assert ROOT.handlers.count(handler) == 1
    logging.enable_propagation()
    assert ROOT.propagate is True
    logging.disable_propagation()
    assert ROOT.propagate is False
    logging.enable_explicit_format()
    record = std_logging.LogRecord("microformers.m", std_logging.WARNING, "/x/file.py", 7, "hello", None, None)
    text = handler.format(record)
    assert text.startswith("[WARNING|file.py:7] ") and text.endswith(" >> hello")
    assert fresh.formatter is not None
    logging.reset_format()
    assert handler.format(record) == "hello" and fresh.formatter is None


def test_progress_bar_switches_return_booleans(fresh: _Records) -> None:
    logging.disable_progress_bar()
    assert logging.is_progress_bar_enabled() is False
    logging.enable_progress_bar()
    assert logging.is_progress_bar_enabled() is True


class _Terminal:
    def __init__(self, tty: bool) -> None:
        self.tty, self.text = tty, ""

    def isatty(self) -> bool:
        return self.tty

    def write(self, text: str) -> None:
        self.text += text

    def flush(self) -> None:
        pass


def test_progress_line_on_a_terminal_counts_to_the_end_and_ends_its_line(restore_verbosity) -> None:
    terminal = _Terminal(tty=True)
    progress = logging.ProgressLine("Loading weights", 4, stream=terminal)
    for _ in range(4):
        progress.update()
    progress.close()
    assert terminal.text.startswith("\rLoading weights: 1/4 (25%)")
    assert terminal.text.endswith("\rLoading weights: 4/4 (100%)\rLoading weights: 4/4 (100%)\n")


def test_progress_line_is_silent_off_a_terminal_switched_off_or_at_error_verbosity(restore_verbosity) -> None:
    for tty, enabled, verbosity in [(False, True, logging.WARNING), (True, False, logging.WARNING),
                                    (True, True, logging.ERROR)]:  # fmt: skip
        terminal = _Terminal(tty)
        (logging.enable_progress_bar if enabled else logging.disable_progress_bar)()
        logging.set_verbosity(verbosity)
        progress = logging.ProgressLine("Loading weights", 3, stream=terminal)
        progress.update(3)
        progress.close()
        assert terminal.text == ""
    logging.enable_progress_bar()


def test_from_pretrained_draws_the_loading_line_on_a_terminal(
    tmp_path, monkeypatch: pytest.MonkeyPatch, restore_verbosity
) -> None:
    import microformers

    config = microformers.AutoConfig.for_model("toy")
    microformers.AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path / "toy")
    terminal = _Terminal(tty=True)
    monkeypatch.setattr(sys, "stderr", terminal)
    logging.enable_progress_bar()
    microformers.AutoModelForCausalLM.from_pretrained(tmp_path / "toy")
    assert terminal.text.startswith("\rLoading weights: ") and terminal.text.endswith("(100%)\n")
