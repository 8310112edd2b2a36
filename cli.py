"""The ``treeopt`` console script (``treeopt = "cli:run"``): the commands live in :mod:`treeopt_cli`.

``python cli.py ...`` runs the same command line.
"""

from __future__ import annotations

import sys
import types

import treeopt_cli.loading
from treeopt_cli import app, run

__all__ = ["app", "run"]


class _Module(types.ModuleType):
    """This module, with ``_load`` (its old name for the model loader, which tests outside the CLI
    still replace with a tiny model) forwarded to :func:`treeopt_cli.loading.load_model`, the
    function the commands call: setting ``cli._load`` sets that."""

    _load = property(lambda self: treeopt_cli.loading.load_model,
                     lambda self, value: setattr(treeopt_cli.loading, "load_model", value))


sys.modules[__name__].__class__ = _Module

if __name__ == "__main__":
    run()
