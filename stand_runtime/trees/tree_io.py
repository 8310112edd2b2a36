"""Tree files: the versioned ``stand-tree`` JSON schema, the plain ``choices`` list, tree families,
bundled trees.

The versioned format (docs/trees.md §8.1)::

    {"format": "stand-tree", "version": 1,
     "paths": [[0], [1], [0, 0], ...],          # rank paths, 0-based, parents before children
     "expected_acceptance": [0.71, 0.12, ...],  # alpha-hat per node (same order), optional
     "metadata": {...}}                         # free-form provenance, optional

The ``choices`` format is the bare list of paths (Medusa/EAGLE convention). Loading accepts both,
checks the structure with a JSON schema and then the tree itself (see
:func:`stand_runtime.trees.tree.validate_paths`); every error is one line naming the file and the problem.
Saving is atomic (:mod:`stand_runtime.files`). :func:`resolve_tree` turns any tree spec (a tree, a
tree file, a path or a bundled name) into a :class:`DraftTree`, loading each file once.

A tree family (``treeopt export --format family``) holds the best tree of a calibration for each of
several sizes; a machine picks its member from its own latency profile
(:mod:`stand_runtime.sizing.tree_choice`)::

    {"format": "stand-tree-family", "version": 1,
     "trees": [{"paths": [...], "expected_acceptance": [...]}, ...],   # one per size, each a tree file's
     "metadata": {...}}
"""

from __future__ import annotations

import copy
import functools
import importlib.resources
import json
import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import jsonschema

from ..errors import StandError
from ..files import write_text_atomic
from ..formats import FAMILY_FORMAT, FILE_KINDS, TREE_FORMAT, file_kind
from .tree import DraftTree

FORMAT_NAME = TREE_FORMAT
FORMAT_VERSION = 1
BUNDLED_PACKAGE = "stand_trees"
"""The package of the bundled trees: the source's folder ``trees/``, installed under this name
(setup.py) so that a ``trees/`` folder where the user runs does not hide it."""

_PATHS_SCHEMA = {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}}
_TREE_SCHEMA = {
    "type": "object",
    "required": ["format", "version", "paths"],
    "properties": {
        "format": {"const": FORMAT_NAME},
        "version": {"type": "integer"},
        "paths": _PATHS_SCHEMA,
        "expected_acceptance": {"type": "array", "items": {"type": "number", "minimum": 0, "maximum": 1}},
        "metadata": {"type": "object"},
    },
}


@dataclass(frozen=True, eq=False)
class TreeFile:
    """A draft tree with what its file says about it.

    Attributes:
        tree: the validated tree.
        expected_acceptance: alpha-hat per draft node in the tree's breadth-first order, or None.
        metadata: provenance (model, dataset, sampling parameters, ...); may be empty.
    """

    tree: DraftTree
    expected_acceptance: tuple[float, ...] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.tree, DraftTree):
            raise StandError(f"TreeFile.tree must be a DraftTree, not {type(self.tree).__name__} "
                             "(build one with DraftTree.from_paths)")
        alpha = self.expected_acceptance
        if alpha is not None:
            if len(alpha) != self.tree.num_nodes:
                raise StandError(f"expected_acceptance has {len(alpha)} values for {self.tree.num_nodes} nodes")
            if not all(isinstance(a, (int, float)) and math.isfinite(a) and 0.0 <= a <= 1.0 for a in alpha):
                raise StandError("expected_acceptance values must be probabilities (finite, in [0, 1])")
        if not isinstance(self.metadata, dict):
            raise StandError(f"TreeFile.metadata must be a dict, not {type(self.metadata).__name__}")

    @property
    def expected_acceptance_length(self) -> float | None:
        """1 + sum of alpha-hat: expected tokens per target forward, or None without alpha-hat."""
        if self.expected_acceptance is None:
            return None
        return 1.0 + sum(self.expected_acceptance)


def parse_tree(data: Any, source: str = "tree") -> TreeFile:
    """Build a :class:`TreeFile` from decoded JSON (versioned object or plain ``choices`` list).

    Raises:
        StandError: one line naming ``source`` and the problem (schema, version, or bad path).
    """
    if isinstance(data, list):
        _check_schema(data, _PATHS_SCHEMA, source)
        return TreeFile(_build(data, source))
    kind = file_kind(data)
    if kind not in (None, FORMAT_NAME):
        raise StandError(f"bad tree JSON {source}: {FILE_KINDS[kind]}, not a tree")
    if isinstance(data, dict) and isinstance(data.get("version"), int) and data["version"] != FORMAT_VERSION and data.get("format") == FORMAT_NAME:
        raise StandError(f"bad tree JSON {source}: version {data['version']} is not supported (expected {FORMAT_VERSION})")
    _check_schema(data, _TREE_SCHEMA, source)
    tree = _build(data["paths"], source)
    alpha = data.get("expected_acceptance")
    if alpha is not None:
        if len(alpha) != tree.num_nodes:
            raise StandError(
                f"bad tree JSON {source}: expected_acceptance has {len(alpha)} values for {tree.num_nodes} paths"
            )
        if not all(math.isfinite(a) for a in alpha):  # the schema bounds them to [0, 1], but passes NaN
            raise StandError(f"bad tree JSON {source}: expected_acceptance holds a non-finite value")
        order = {tuple(p): a for p, a in zip(data["paths"], alpha)}
        alpha = tuple(float(order[p]) for p in tree.paths)
    return TreeFile(tree, alpha, dict(data.get("metadata") or {}))


_VALIDATORS = {id(schema): jsonschema.Draft202012Validator(schema) for schema in (_PATHS_SCHEMA, _TREE_SCHEMA)}


TREE_EXAMPLE = '{"format": "stand-tree", "version": 1, "paths": [[0], [1], [0, 0]]}, or a bare list of paths'
"""What a valid tree file looks like (quoted in errors)."""


def _check_schema(data: Any, schema: dict, source: str) -> None:
    errors = list(_VALIDATORS[id(schema)].iter_errors(data))
    if errors:  # the first offending item in document order, then the most relevant error there
        def place(e):
            return tuple((0, part, "") if isinstance(part, int) else (1, 0, str(part)) for part in e.absolute_path)

        first = min(place(e) for e in errors)
        error = jsonschema.exceptions.best_match(e for e in errors if place(e)[: len(first)] == first) or errors[0]
        where = error.json_path if error.json_path != "$" else "top level"
        raise StandError(f"bad tree JSON {source}: {where}: {error.message[:200]} (a tree file looks like {TREE_EXAMPLE})")


def _build(paths: list, source: str) -> DraftTree:
    try:
        return DraftTree.from_paths(paths)
    except StandError as error:
        raise StandError(f"bad tree JSON {source}: {str(error).removeprefix('bad tree: ')}") from None


def load_tree(path_or_name: str | os.PathLike) -> TreeFile:
    """Load a tree file, or a bundled tree by name (e.g. ``"heuristic-80"``, see :func:`bundled_trees`).

    Raises:
        StandError: the file is missing or unreadable, is not JSON, or is not a valid tree.
    """
    if not isinstance(path_or_name, (str, os.PathLike)):
        raise StandError(f"a tree is a file path or a bundled name, not {type(path_or_name).__name__}")
    spec = str(path_or_name)
    if not spec.strip():
        raise StandError("empty tree spec (a file path or a bundled name)")
    path = Path(spec)
    try:
        exists = path.exists()
    except OSError as error:  # a name too long for the file system
        raise StandError(f"cannot read tree {spec}: {error.strerror}") from None
    if not exists:
        bundled = bundled_trees()
        if spec in bundled:
            path = bundled[spec]
        else:
            names = bundled_names()
            word, hint = spec.strip().lower(), ""
            if word.startswith("dynamic"):
                hint = ("; STAND's dynamic trees (dynamic, dynamic-N, dynamic-auto, dynamic-auto-N, in lower "
                        "case) have no fixed shape: they apply to decoding only (generate, bench, search), not to "
                        "export or show")
            elif word == "auto":
                hint = ("; auto is sized for this machine when decoding starts (generate, bench, search) from the "
                        "bundled tree family; treeopt export --nodes auto writes that tree to a file you can show")
            raise StandError(f"tree not found: {spec!r} is neither a file nor a bundled name ({names}){hint}")
    try:
        stat = path.stat()
        loaded = _load_cached(path.resolve(), stat.st_mtime_ns, stat.st_size)
    except OSError as error:
        raise StandError(f"cannot read tree {path}: {error.strerror or error}") from None
    return replace(loaded, metadata=copy.deepcopy(loaded.metadata))  # the cached parse stays as it was read


@functools.lru_cache(maxsize=32)
def _load_cached(path: Path, mtime_ns: int, size: int) -> TreeFile:
    """Parse a tree file once per (path, mtime, size): trees are immutable once loaded."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise StandError(f"cannot read tree {path}: {error.strerror or error}") from None
    except UnicodeDecodeError as error:
        raise StandError(f"cannot read tree {path}: {error}") from None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as error:  # ValueError: JSONDecodeError, or an int past 4300 digits
        raise StandError(f"bad tree JSON {path}: not JSON ({' '.join(str(error).split())[:200] or 'nested too deeply'})") from None
    return parse_tree(data, str(path))


def tree_to_json(tree_file: TreeFile, fmt: str = "stand") -> Any:
    """The JSON value of a tree: the versioned object (``fmt="stand"``) or the plain ``choices`` list.

    Raises:
        StandError: unknown ``fmt``.
    """
    paths = [list(p) for p in tree_file.tree.paths]
    if fmt == "choices":
        return paths
    if fmt != "stand":
        raise StandError(f"unknown tree format {fmt!r} (use 'stand' or 'choices')")
    data: dict[str, Any] = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "paths": paths}
    if tree_file.expected_acceptance is not None:
        data["expected_acceptance"] = [round(float(a), 6) for a in tree_file.expected_acceptance]
    data["metadata"] = tree_file.metadata
    return data


def save_tree(tree_file: TreeFile, path: str | os.PathLike, fmt: str = "stand") -> Path:
    """Write a tree file atomically; returns the path written.

    Raises:
        StandError: not a TreeFile, unknown format, unserialisable metadata, or the path cannot be written.
    """
    if not isinstance(tree_file, TreeFile):
        raise StandError(f"save_tree needs a TreeFile, not {type(tree_file).__name__}")
    data = tree_to_json(tree_file, fmt)
    try:
        json.dumps(data, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise StandError(f"cannot write tree {path}: {error}") from None
    if fmt == "choices":
        text = json.dumps(data)
    else:  # one key per line, each value compact: readable and diff-friendly
        text = "{\n" + ",\n".join(f" {json.dumps(key)}: {json.dumps(value)}" for key, value in data.items()) + "\n}"
    return write_text_atomic(path, text + "\n")


def bundled_files(suffix: str) -> dict[str, Path]:
    """Bundled files whose name ends in ``suffix``: name (before it) → path (``.json`` alone matches
    plain tree files only, not ``NAME.family.json`` and the like)."""
    out = {}
    root = bundled_root()
    for entry in root.iterdir():
        name = entry.name
        if name.endswith(suffix) and (suffix != ".json" or name.count(".") == 1):
            out[name[: -len(suffix)]] = Path(str(entry))
    return out


def bundled_root():
    """The bundled trees' folder: the package :data:`BUNDLED_PACKAGE`, else (a source checkout) the
    folder ``trees/`` beside the ``stand_runtime`` package.

    Raises:
        StandError: neither is there (the install is damaged: run ``pip install -e .`` again).
    """
    try:
        return importlib.resources.files(BUNDLED_PACKAGE)
    except ModuleNotFoundError:
        beside = Path(__file__).resolve().parents[2] / "trees"
        if (beside / "__init__.py").is_file():
            return beside
    raise StandError(f"the bundled trees (package {BUNDLED_PACKAGE}) are not installed: run pip install -e . again")


def bundled_trees() -> dict[str, Path]:
    """Trees shipped in the bundled trees' package: name (file stem) → path."""
    return bundled_files(".json")


def bundled_calibrations() -> dict[str, Path]:
    """Calibration files shipped with the bundled trees (``NAME.calibration.json``): name → path."""
    return bundled_files(".calibration.json")


def bundled_names() -> str:
    """Every bundled name and what it is, for errors (``heuristic-80, ... (trees); stand-smollm2-humaneval
    (a calibration and its tree family)``)."""
    trees = ", ".join(sorted(bundled_trees())) or "none"
    calibrations, families = set(bundled_calibrations()), set(bundled_files(".family.json"))
    kinds = []
    for name in sorted(calibrations | families):
        what = ("a calibration and its tree family" if name in calibrations and name in families
                else "a calibration" if name in calibrations else "a tree family")
        kinds.append(f"{name} ({what})")
    return "; ".join([f"{trees} (trees)", *kinds])


def resolve_tree(tree: "DraftTree | TreeFile | str | os.PathLike") -> DraftTree:
    """The static tree of a :class:`DraftTree`, a :class:`TreeFile`, a file path or a bundled name.

    Raises:
        StandError: a missing, unreadable or invalid tree file, or an unknown name.
    """
    if isinstance(tree, DraftTree):
        return tree
    if isinstance(tree, TreeFile):
        return tree.tree
    if isinstance(tree, (list, tuple)):
        raise StandError("a tree is a DraftTree, a TreeFile, a file path or a bundled name; for a list of rank "
                         "paths use DraftTree.from_paths(paths)")
    return load_tree(tree).tree


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
