"""microformers.logging: the reference's verbosity functions, the env variables, progress-bar switch."""

from __future__ import annotations

import subprocess
import sys

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
