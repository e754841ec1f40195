"""Lazy package exports: a name is imported from its module the first time it is used.

The kernel and plugins use it so that importing a package stays cheap (no torch until needed):

    __getattr__, __dir__ = lazy_exports(__name__, {"MyModel": "modeling_my"})
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """Module-level ``__getattr__`` and ``__dir__`` for ``package``; ``exports`` maps name -> submodule."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module '{package}' has no attribute {name!r}")
        value = getattr(importlib.import_module(f".{module}", package), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(getattr(sys.modules[package], "__all__", exports))

    return __getattr__, __dir__
