"""A package that serves one class of one of its modules on first read (PEP 562), so that importing
the package's other modules does not import that module's dependencies (vLLM)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any


def served_lazily(package: str, module: str, name: str) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``: reading ``name`` imports ``package.module``
    and returns its ``name``; any other missing name is an ``AttributeError``."""

    def get(attribute: str) -> Any:
        if attribute != name:
            raise AttributeError(f"module {package!r} has no attribute {attribute!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        setattr(sys.modules[package], name, value)  # later reads find it without this hook
        return value

    def names() -> list[str]:
        return sorted({*vars(sys.modules[package]), name})

    return get, names
