"""Lazy package exports (PEP 562): a package's public names are imported on first use.

``import stand_runtime`` (and so ``treeopt --help``) must not pay for torch and transformers;
``from stand_runtime import generate`` imports :mod:`stand_runtime.engine.decode` (and torch) only then.
"""

from __future__ import annotations

import importlib


def lazy_exports(package: str, exports: dict[str, str]):
    """``(__getattr__, __dir__)`` for a package whose name ``n`` lives in module ``exports[n]``
    (relative to ``package``).

    Raises:
        AttributeError: (from ``__getattr__``) a name the package does not export.
    """

    def __getattr__(name: str):
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        globals_of_package = importlib.import_module(package).__dict__
        globals_of_package[name] = value  # later look-ups skip __getattr__
        return value

    def __dir__() -> list[str]:
        return sorted(set(importlib.import_module(package).__dict__) | set(exports))

    return __getattr__, __dir__
