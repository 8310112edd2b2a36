"""The acceptance seed: an offline calibration of the value rule's acceptance map (docs/algorithms.md §3.7, docs/trees.md §8.5).

A value-sized dynamic tree (``dynamic-auto``) estimates P(path accepted) from each node's best-first
score through an :class:`stand_runtime.sizing.value.AcceptanceMap` learned online. Before its first
verified step that map knows nothing; ``treeopt calibrate`` measures, with a dynamic-tree decode of
its calibration prompts, the nodes drafted and accepted per map bin (drawn and copied apart) and saves
them here, so the first step starts from the model's measured rates.

File: JSON, ``format: stand-acceptance``, version 2 (copied nodes binned by their chain position,
``COPY_DECAY ** depth``; a cached version-1 file is skipped, calibrate writes a new one): ``model`` (:func:`model_identity` of the target it
was measured on), ``edges`` (the map's bin edges, checked against the code's), ``drafted`` and
``accepted`` (``[2, 16]`` counts: row 0 drawn nodes, row 1 copied), and ``metadata`` (how it was made).
It is looked up per model: first ``$STAND_CACHE_DIR/acceptance/<model>.json`` (written by calibrate),
then the files bundled in ``trees/`` (``NAME.acceptance.json``) measured on the same model.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .value import EDGES, AcceptanceMap
from ..errors import StandError
from ..files import parse_json_object, write_json_atomic
from ..formats import ACCEPTANCE_FORMAT
from ..target.latency import profile_name
from ..target.models import cache_root
from ..trees.tree_io import bundled_files

ACCEPTANCE_VERSION = 2
BUNDLED_SUFFIX = ".acceptance.json"


def model_identity(model) -> str:
    """The name an acceptance seed of ``model`` is kept under: the folder it was loaded from (its last
    component: for the default model the dequantized cache folder, named by the GGUF file's content),
    else its hub id, else its model type (a model built in memory)."""
    name = profile_name(model)
    return Path(name).name if os.path.isdir(name) else name


@dataclass(frozen=True)
class AcceptanceSeed:
    """Per-bin counts of an offline acceptance measurement (module docstring).

    Attributes:
        model: :func:`model_identity` of the target it was measured on.
        drafted: ``[2, 16]`` float nodes drafted per kind (drawn, copied) and score bin.
        accepted: ``[2, 16]`` float of those, the nodes whose path was accepted.
        metadata: how it was measured (dataset, prompts, tree, sampling).

    Raises:
        StandError: counts of another shape, negative, or more accepted than drafted.
    """

    model: str
    drafted: np.ndarray
    accepted: np.ndarray
    metadata: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        shape = (2, len(EDGES) - 1)
        drafted, accepted = (np.asarray(a, dtype=np.float64) for a in (self.drafted, self.accepted))
        if drafted.shape != shape or accepted.shape != shape:
            raise StandError(f"acceptance counts are {list(shape)} (drawn, copied x bins), got "
                             f"{list(drafted.shape)} and {list(accepted.shape)}")
        if not (np.all(np.isfinite(drafted)) and np.all(accepted >= 0) and np.all(accepted <= drafted)):
            raise StandError("acceptance counts must be finite with 0 <= accepted <= drafted per bin")
        if not isinstance(self.model, str) or not self.model:
            raise StandError("an acceptance seed names the model it was measured on (a non-empty string)")
        object.__setattr__(self, "drafted", drafted)
        object.__setattr__(self, "accepted", accepted)

    @classmethod
    def from_map(cls, model: str, acceptance: AcceptanceMap, metadata: dict | None = None) -> "AcceptanceSeed":
        """The counts an :class:`AcceptanceMap` observed."""
        drafted, accepted = acceptance.counts()
        return cls(model, drafted, accepted, dict(metadata or {}))

    def prior(self) -> np.ndarray:
        """``[2, 16]`` the seed per bin: the estimate a fresh map holds after observing these counts
        (``(accepted + 8 seed) / (drafted + 8)`` with the default seed
        :data:`stand_runtime.sizing.value.DEFAULT_PRIOR`, isotonic), so a bin calibrated on few nodes
        stays near that seed and a well-measured one takes its measured rate. Drawn nodes only: a
        copied node of the calibration's 80-node tree exists only where its many drawn siblings missed
        the chain's token, which value-sized drafts (few drawn nodes) miss less selectively, so the
        copied kind keeps the default seed and learns online."""
        drawn = np.zeros_like(self.drafted)
        drawn[0] = 1.0  # copied nodes keep the default seed (below)
        fresh = AcceptanceMap()
        fresh.add_counts(self.drafted * drawn, self.accepted * drawn)
        return fresh.table().copy()

    def new_map(self) -> AcceptanceMap:
        """A fresh :class:`AcceptanceMap` seeded with :meth:`prior`."""
        return AcceptanceMap(self.prior())

    def as_json(self) -> dict:
        return {"format": ACCEPTANCE_FORMAT, "version": ACCEPTANCE_VERSION, "model": self.model,
                "edges": [float(e) for e in EDGES], "drafted": self.drafted.tolist(),
                "accepted": self.accepted.tolist(), "metadata": self.metadata}

    def save(self, path: str | os.PathLike) -> Path:
        """Write the file atomically. Raises StandError: the folder is missing or not writable."""
        return write_json_atomic(path, self.as_json())


def load_acceptance_seed(path: str | os.PathLike) -> AcceptanceSeed:
    """Read an acceptance seed file.

    Raises:
        StandError: unreadable, not JSON, another format or version, other bin edges, bad counts
            (one line naming the file).
    """
    path = Path(path)
    try:
        data = parse_json_object(path.read_bytes(), str(path))
    except OSError as error:
        raise StandError(f"cannot read acceptance seed {path}: {error.strerror}") from None
    if data.get("format") != ACCEPTANCE_FORMAT or data.get("version") != ACCEPTANCE_VERSION:
        raise StandError(f"{path} is not a {ACCEPTANCE_FORMAT} file of version {ACCEPTANCE_VERSION} "
                         f"(format {data.get('format')!r}, version {data.get('version')!r})")
    try:
        edges = np.asarray(data["edges"], dtype=np.float64)
        if edges.shape != EDGES.shape or not np.allclose(edges, EDGES, rtol=1e-9):
            raise StandError(f"{path} was made with other score bins than this version's: calibrate again")
        return AcceptanceSeed(data["model"], np.asarray(data["drafted"], dtype=np.float64),
                              np.asarray(data["accepted"], dtype=np.float64), dict(data.get("metadata") or {}))
    except StandError as error:
        raise StandError(f"bad acceptance seed {path}: {error}") from None
    except (KeyError, TypeError, ValueError) as error:
        raise StandError(f"bad acceptance seed {path}: {type(error).__name__} {error}") from None


def seed_path(identity: str) -> Path:
    """Where ``treeopt calibrate`` keeps the seed of the model named ``identity`` (:func:`model_identity`)."""
    return cache_root() / "acceptance" / f"{re.sub(r'[^A-Za-z0-9._-]', '_', identity)}.json"


def find_acceptance_seed(model) -> AcceptanceSeed | None:
    """The acceptance seed measured on ``model``: the cached one (:func:`seed_path`), else a bundled
    one whose model matches; None when there is none (the map then starts from the scores).

    Raises:
        StandError: the cached file is bad, or was measured on another model.
    """
    identity = model_identity(model)
    cached = seed_path(identity)
    if cached.is_file():
        try:
            seed = load_acceptance_seed(cached)
        except StandError as error:
            if not _outdated(cached):  # a version-1 file is skipped, anything else said
                raise StandError(f"{error} (the cached seed treeopt calibrate wrote for this model: remove it to "
                                 f"use the bundled seed, or calibrate again)") from None
        else:
            if seed.model != identity:
                raise StandError(f"acceptance seed {cached} was measured on {seed.model!r}, not {identity!r}: "
                                 f"remove it or calibrate again")
            return seed
    for path in sorted(bundled_files(BUNDLED_SUFFIX).values()):
        seed = load_acceptance_seed(path)
        if seed.model == identity:
            return seed
    return None


def _outdated(path: Path) -> bool:
    """True for a readable seed file of version 1 (its bins mean something else: skipped)."""
    try:
        version = parse_json_object(path.read_bytes(), str(path)).get("version")
    except (OSError, StandError):
        return False  # load_acceptance_seed names the problem
    return isinstance(version, int) and not isinstance(version, bool) and version < ACCEPTANCE_VERSION


def seeded_map(model) -> AcceptanceMap:
    """The acceptance map a value rule for ``model`` starts from: seeded from :func:`find_acceptance_seed`
    when one is found, else from the scores. Raises StandError: see :func:`find_acceptance_seed`."""
    seed = find_acceptance_seed(model)
    return AcceptanceMap() if seed is None else seed.new_map()


__all__ = ["ACCEPTANCE_FORMAT", "ACCEPTANCE_VERSION", "AcceptanceSeed", "find_acceptance_seed", "load_acceptance_seed",
           "model_identity", "seed_path", "seeded_map"]
