"""The machine-aware default tree: a calibrated tree family sized by this machine's latency profile.

``tree="auto"`` (STAND's default) takes the bundled family of the default model's calibration
(``trees/stand-smollm2-humaneval.family.json``: the best tree for each size K, with its expected
acceptance) and the target's latency profile on this machine (:mod:`stand_runtime.target.latency`,
measured once and cached), and picks the K with the most expected tokens per second,
``(1 + sum alpha(K)) / t(K + 1)``: a small tree on a CPU, a large one on a GPU.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..errors import StandError
from ..target.latency import LatencyProfile, cached_latency, choose_size, profile_name
from ..trees.tree import DraftTree
from ..trees.tree_io import load_family

AUTO = "auto"
"""The tree spec that asks for the machine-aware choice."""

DEFAULT_FAMILY = "stand-smollm2-humaneval"
"""The bundled family ``auto`` chooses from."""


@dataclass(frozen=True)
class TreeChoice:
    """A family member chosen for this machine.

    Attributes:
        tree: the chosen tree (K draft nodes).
        nodes: K.
        expected_acceptance_length: 1 + sum alpha-hat of the tree (tokens per step, from calibration).
        profile: the latency profile it was chosen with.
        curve: expected tokens per second per size (see :func:`stand_runtime.target.latency.choose_size`).
        family: the family's name or path.
    """

    tree: DraftTree
    nodes: int
    expected_acceptance_length: float
    profile: LatencyProfile
    curve: list[dict]
    family: str

    @property
    def bound(self) -> float:
        """The speedup over plain decoding this tree would give if the calibration's acceptance
        held: ``tau(K) t(1) / t(K + 1)``."""
        return self.expected_acceptance_length * self.profile.at(1) / self.profile.at(self.nodes + 1)


_CHOICES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def machine_tree(model, family: str = DEFAULT_FAMILY, *, model_name: str | None = None,
                 on_measure: Callable[[], None] | None = None, batch: int = 1) -> TreeChoice:
    """The member of ``family`` with the most expected tokens per second for ``model`` here, at
    ``batch`` rows per target forward (:func:`stand_runtime.target.latency.choose_size`).

    The latency profile is measured on first use (cached on disk); the choice is remembered per
    model object.

    Raises:
        StandError: the family cannot be loaded.
    """
    remembered = _CHOICES.get(model, {}).get((family, batch))
    if remembered is not None:
        return remembered
    members = load_family(family)
    name = model_name or profile_name(model)
    profile = cached_latency(model, name, on_measure=on_measure)
    best_sum = np.array(members.best_sum())
    best_sum[0] = -np.inf  # STAND was asked for: at least one draft node
    nodes, curve = choose_size(best_sum, profile, batch)
    member = members.members[nodes]
    choice = TreeChoice(member.tree, nodes, 1.0 + float(sum(member.expected_acceptance)), profile, curve, family)
    _CHOICES.setdefault(model, {})[(family, batch)] = choice
    return choice


def check_auto_available(family: str = DEFAULT_FAMILY) -> None:
    """Raises StandError when the family behind ``auto`` is missing or invalid (before loading a model)."""
    load_family(family)
    if not family:
        raise StandError("empty tree family name")
