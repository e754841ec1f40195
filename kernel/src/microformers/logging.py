"""Library logging with the reference's functions: ``microformers.logging.set_verbosity_info()`` and friends.

Every logger of the project sits under the ``microformers`` logger, which gets one stderr handler and
the level of ``MICROFORMERS_VERBOSITY`` (or ``TRANSFORMERS_VERBOSITY``): debug, info, warning (the
default), error or critical. Progress bars ask :func:`is_progress_bar_enabled` before showing.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from logging import CRITICAL, DEBUG, ERROR, FATAL, INFO, NOTSET, WARN, WARNING  # noqa: F401
from typing import Any

LEVELS = {"debug": DEBUG, "info": INFO, "warning": WARNING, "error": ERROR, "critical": CRITICAL}
_lock = threading.Lock()
_handler: logging.Handler | None = None
_progress_bars = os.environ.get("MICROFORMERS_NO_PROGRESS_BAR", "").lower() not in ("1", "true", "yes")


def _env_level() -> int:
    for var in ("MICROFORMERS_VERBOSITY", "TRANSFORMERS_VERBOSITY"):
        value = os.environ.get(var)
        if value:
            if value.lower() in LEVELS:
                return LEVELS[value.lower()]
            logging.getLogger("microformers").warning(
                "%s=%r is not a verbosity; use one of %s. Using 'warning'.", var, value, ", ".join(LEVELS)
            )
    return WARNING


def _root() -> logging.Logger:
    global _handler
    root = logging.getLogger("microformers")
    with _lock:
        if _handler is None:
            _handler = logging.StreamHandler(sys.stderr)
            _handler.flush = sys.stderr.flush  # type: ignore[method-assign]
            root.addHandler(_handler)
            root.propagate = False
            root.setLevel(_env_level())
    return root


def get_logger(name: str | None = None) -> logging.Logger:
    """The ``microformers`` logger, or a child of it (``get_logger(__name__)`` in plugins)."""
    _root()
    if name is None or name == "microformers":
        return logging.getLogger("microformers")
    return logging.getLogger(name if name.startswith("microformers.") else f"microformers.{name}")


def get_verbosity() -> int:
    return _root().getEffectiveLevel()


def set_verbosity(verbosity: int) -> None:
    _root().setLevel(verbosity)


def set_verbosity_debug() -> None:
    set_verbosity(DEBUG)


def set_verbosity_info() -> None:
    set_verbosity(INFO)


def set_verbosity_warning() -> None:
    set_verbosity(WARNING)


def set_verbosity_error() -> None:
    set_verbosity(ERROR)


def disable_default_handler() -> None:
    root = _root()
    if _handler is not None:
        root.removeHandler(_handler)


def enable_default_handler() -> None:
    root = _root()
    if _handler is not None and _handler not in root.handlers:
        root.addHandler(_handler)


def enable_propagation() -> None:
    _root().propagate = True


def disable_propagation() -> None:
    _root().propagate = False


def enable_explicit_format() -> None:
    """``[LEVEL|file:line] time >> message`` on every handler of the library logger."""
    formatter = logging.Formatter("[%(levelname)s|%(filename)s:%(lineno)s] %(asctime)s >> %(message)s")
    for handler in _root().handlers:
        handler.setFormatter(formatter)


def reset_format() -> None:
    for handler in _root().handlers:
        handler.setFormatter(None)  # type: ignore[arg-type]


def is_progress_bar_enabled() -> bool:
    return _progress_bars


def enable_progress_bar() -> None:
    global _progress_bars
    _progress_bars = True


def disable_progress_bar() -> None:
    global _progress_bars
    _progress_bars = False


class ProgressLine:
    """A one-line progress display on stderr ("Loading weights: 120/272 (44%)"), rewritten in place.

    Shown only where it helps and harms nothing: stderr is a terminal (logs and pipes get no carriage returns),
    progress bars are enabled (``MICROFORMERS_NO_PROGRESS_BAR``, :func:`disable_progress_bar`) and the verbosity is
    warning or more talkative. Redrawn at most ten times a second; :meth:`close` ends the line.
    """

    def __init__(self, label: str, total: int, stream: Any = None) -> None:
        self.label, self.total, self.done = label, total, 0
        self.stream = stream if stream is not None else sys.stderr
        isatty = getattr(self.stream, "isatty", None)
        self.shown = bool(
            total > 0 and is_progress_bar_enabled() and get_verbosity() <= WARNING and isatty is not None and isatty()
        )
        self._drawn_at = 0.0

    def update(self, count: int = 1) -> None:
        self.done += count
        if self.shown and (time.monotonic() - self._drawn_at >= 0.1 or self.done >= self.total):
            self._draw()

    def _draw(self) -> None:
        self._drawn_at = time.monotonic()
        share = min(self.done, self.total) * 100 // self.total
        self.stream.write(f"\r{self.label}: {self.done}/{self.total} ({share}%)")
        self.stream.flush()

    def close(self) -> None:
        if self.shown:
            self._draw()
            self.stream.write("\n")
            self.stream.flush()
            self.shown = False
