"""The ``treeopt`` console script (``treeopt = "cli:run"``): the commands live in :mod:`treeopt_cli`.

``python cli.py ...`` runs the same command line.
"""

from __future__ import annotations

from treeopt_cli import app, run

__all__ = ["app", "run"]

if __name__ == "__main__":
    run()
