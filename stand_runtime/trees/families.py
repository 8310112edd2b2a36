"""Tree families: the best tree of a calibration for each of several sizes, in one file.

The file (``treeopt export --format family``)::

    {"format": "stand-tree-family", "version": 1,
     "trees": [{"paths": [...], "expected_acceptance": [...]}, ...],   # one per size, each a tree file's
     "metadata": {...}}

A machine picks its member from its own latency profile (:mod:`stand_runtime.sizing.tree_choice`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import StandError
from ..formats import FAMILY_FORMAT
from .tree_io import FORMAT_NAME, FORMAT_VERSION, TreeFile, bundled_files, parse_tree


def bundled_families() -> dict[str, Path]:
    """Tree families shipped with the bundled trees (``NAME.family.json``): name → path."""
    return bundled_files(".family.json")


def is_family(spec) -> bool:
    """Whether ``spec`` names a tree family: a bundled family's name, or a file whose JSON says
    ``"format": "stand-tree-family"`` (from ``treeopt export --format family``)."""
    if not isinstance(spec, (str, os.PathLike)):
        return False
    if str(spec) in bundled_families():
        return True
    path = Path(spec)
    if not path.is_file():
        return False
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return False  # not a family; loading it as a tree gives the error
    return isinstance(data, dict) and data.get("format") == FAMILY_FORMAT


@dataclass(frozen=True, eq=False)
class TreeFamily:
    """The best tree of a calibration for each of several sizes (one knapsack solve, many budgets).

    A machine picks its member from its own latency profile (:func:`stand_runtime.target.latency.choose_size`).

    Attributes:
        members: tree files by size K (draft nodes), each with its alpha-hat.
        metadata: provenance (model, calibration settings, ...).
    """

    members: dict[int, TreeFile]
    metadata: dict[str, Any] = field(default_factory=dict)

    def best_sum(self) -> "list[float]":
        """``[K_max + 1]`` expected accepted tokens per step of the member of each size (``-inf``
        where the family has none; 0 for K = 0, plain decoding)."""
        top = max(self.members, default=0)
        out = [float("-inf")] * (top + 1)
        out[0] = 0.0
        for k, member in self.members.items():
            out[k] = float(sum(member.expected_acceptance or ()))
        return out


def family_to_json(family: TreeFamily) -> dict:
    """The JSON value of a family (``format: stand-tree-family``, version 1)."""
    trees = []
    for k in sorted(family.members):
        member = family.members[k]
        trees.append({"paths": [list(p) for p in member.tree.paths],
                      "expected_acceptance": [round(float(a), 6) for a in member.expected_acceptance or ()]})
    return {"format": FAMILY_FORMAT, "version": FORMAT_VERSION, "trees": trees, "metadata": family.metadata}


def load_family(path_or_name: str | os.PathLike) -> TreeFamily:
    """Load a tree family file, or a bundled one by name (see :func:`bundled_families`).

    Raises:
        StandError: missing, not JSON, or not a valid family (one line naming the file and problem).
    """
    spec = str(path_or_name)
    path = Path(spec)
    if not path.exists():
        bundled = bundled_families()
        if spec not in bundled:
            raise StandError(f"tree family not found: {spec!r} is neither a file nor a bundled family "
                             f"({', '.join(sorted(bundled)) or 'none'})")
        path = bundled[spec]
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        raise StandError(f"bad tree family {path}: {error}") from None
    if not isinstance(data, dict) or data.get("format") != FAMILY_FORMAT or data.get("version") != FORMAT_VERSION:
        raise StandError(f"bad tree family {path}: not a {FAMILY_FORMAT} version {FORMAT_VERSION} file")
    if not isinstance(data.get("trees"), list) or not data["trees"]:
        raise StandError(f"bad tree family {path}: no trees")
    members = {}
    for number, entry in enumerate(data["trees"]):
        if not isinstance(entry, dict):
            raise StandError(f"bad tree family {path}: tree {number} is not an object")
        member = parse_tree({"format": FORMAT_NAME, "version": FORMAT_VERSION, **entry}, f"{path} tree {number}")
        if member.expected_acceptance is None:
            raise StandError(f"bad tree family {path}: tree {number} has no expected_acceptance")
        members[member.tree.num_nodes] = member
    return TreeFamily(members, dict(data.get("metadata") or {}))
