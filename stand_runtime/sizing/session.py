"""What value-sized drafting learns while decoding, owned apart from the method (docs/algorithms.md §3.7).

A :class:`stand_runtime.method.Method` is a value: what drafts, into which tree, with which options.
A value-sized tree (``dynamic-auto``) also needs what a run learns: the latency model with its
corrections (:mod:`.latency_model`) and the acceptance map (:mod:`.value`). A
:class:`SizingSession` owns them. Every decoding call given the session sizes its drafts from them
and, unless the session is frozen, adds what it observed, so a session outlives a call: the
root-only forward is explored once per session, not once per call.

Each call gets its own :class:`~.value.ValueRule` (:meth:`SizingSession.rule`): the rule's per-call
history (recent sizes, the steps it explored) starts fresh, and its latency model and acceptance map
are the session's. A frozen session learns nothing: a seeded call with it repeats exactly, token for
token, whatever the step times were.
"""

from __future__ import annotations

import weakref
from pathlib import Path

import numpy as np

from ..errors import StandError
from ..files import parse_json_object, write_json_atomic
from ..target.latency import LatencyProfile
from .latency_model import LatencyModel
from .value import AcceptanceMap, ValueRule

SESSION_FORMAT = "stand-sizing-session"
"""The ``format`` of a saved session (:meth:`SizingSession.save`)."""


def check_sizing(sizing) -> "SizingSession | None":
    """``sizing`` when it is a :class:`SizingSession` or None. Raises StandError (one line) otherwise."""
    if sizing is not None and not isinstance(sizing, SizingSession):
        raise StandError(f"sizing must be a SizingSession or None, not {type(sizing).__name__}")
    return sizing


class SizingSession:
    """The latency model and acceptance map that size value-sized drafts, shared by the calls given it.

    Args:
        profile: the latency profile forwards are priced by (:class:`stand_runtime.LatencyProfile`).
        acceptance: the acceptance map (its seed: e.g. an offline calibration's,
            :func:`stand_runtime.sizing.acceptance_seed.seeded_map`); None = the default seed.
        measured_here: True when ``profile`` is this machine's for the target decoded: observed
            forwards correct it and the rule explores the root-only forward until it was observed;
            False for another machine's (the trace bench's projection): never corrected, never explored.
        target: ``(key, description)`` of the target the profile was measured for
            (:func:`stand_runtime.target.latency.target_identity`); None = any target.

    Attributes:
        frozen: True once :meth:`freeze` was called: the session's estimates no longer change.
        on_outcome: when set (a reliability collector), handed to every rule made after
            (:attr:`ValueRule.on_outcome`).
        on_forward: when set (a collector of batched forecasts), handed to every rule made after
            (:attr:`ValueRule.on_forward`).
        record_packing: when True, every rule made after records the packed allocation's modelled gain
            (:attr:`ValueRule.packing`; diagnostics).
        last_rule: the rule of the latest call (:meth:`rule`; its sizes and batches are diagnostics),
            or None.

    Raises:
        StandError: a profile that is not a LatencyProfile, an acceptance that is not an
            AcceptanceMap.
    """

    def __init__(self, profile: LatencyProfile, acceptance: AcceptanceMap | None = None, *,
                 measured_here: bool = True, target: tuple[str, str] | None = None) -> None:
        if not isinstance(profile, LatencyProfile):
            raise StandError(f"a sizing session's profile must be a LatencyProfile, not {type(profile).__name__}")
        if acceptance is not None and not isinstance(acceptance, AcceptanceMap):
            raise StandError(f"acceptance must be an AcceptanceMap or None, not {type(acceptance).__name__}")
        self.profile = profile
        self.acceptance = acceptance if acceptance is not None else AcceptanceMap()
        self.measured_here = bool(measured_here)
        self.target = target
        self.frozen = False
        self.on_outcome = None
        self.on_forward = None
        self.record_packing = False
        self.last_rule: ValueRule | None = None
        self._latency: dict[int, LatencyModel] = {}

    @classmethod
    def for_model(cls, model, latency: LatencyProfile | None = None) -> "SizingSession":
        """A session for decoding ``model`` on this machine: its latency profile (measured once, then
        cached; or ``latency``, another machine's, never corrected) and the acceptance map seeded from
        its offline calibration where one was measured.

        Raises:
            StandError: ``latency`` not a LatencyProfile, a bad acceptance seed file.
        """
        from ..target.latency import cached_latency, profile_name, target_identity
        from .acceptance_seed import seeded_map

        if latency is not None and not isinstance(latency, LatencyProfile):
            raise StandError(f"latency must be a LatencyProfile or None, not {type(latency).__name__}")
        here = latency is None
        profile = cached_latency(model, profile_name(model)) if here else latency
        return cls(profile, seeded_map(model), measured_here=here,
                   target=target_identity(model) if here else None)

    def latency(self, rows: int) -> LatencyModel:
        """The session's latency model of forwards over ``rows`` rows (one per row count, kept)."""
        found = self._latency.get(rows)
        if found is None:
            found = self._latency[rows] = LatencyModel(self.profile.at, self.profile.sizes, rows=rows,
                                                       observing=self.measured_here)
        return found

    def rule(self, nodes: int, rows: int = 1, batch_allocated: bool = True) -> ValueRule:
        """A fresh value rule for one decoding call of ``rows`` rows per forward, its tree's budget
        ``nodes``: the session's latency model and acceptance map, the call's own history;
        ``batch_allocated`` as :class:`~.value.ValueRule` takes it (False: each row sized alone,
        :attr:`stand_runtime.method.Ablation.allocation`)."""
        rule = ValueRule(self.latency(rows), self.acceptance, batch_allocated=batch_allocated,
                         nodes=nodes, frozen=self.frozen)
        rule.on_outcome = self.on_outcome
        rule.on_forward = self.on_forward
        rule.packing = [] if self.record_packing else None
        self.last_rule = rule
        return rule

    def freeze(self) -> "SizingSession":
        """Stop learning: every later call sizes from the estimates as they are now (returns the session)."""
        self.frozen = True
        return self

    def check_target(self, model) -> None:
        """Raises StandError when the session's profile was measured for another target than ``model``."""
        from ..target.latency import check_same_target

        check_same_target(self.target, model, "sizing session", "make one for the model it decodes (SizingSession.for_model)")

    def as_dict(self) -> dict:
        """The session as JSON: the profile, the acceptance counts and every latency model's observations."""
        drafted, accepted = self.acceptance.counts()
        return {"format": SESSION_FORMAT, "version": 1, "profile": self.profile.as_dict(),
                "measured_here": self.measured_here, "frozen": self.frozen,
                "target": list(self.target) if self.target is not None else None,
                "acceptance": {"prior": self.acceptance.prior.tolist(), "drafted": drafted.tolist(),
                               "accepted": accepted.tolist()},
                "latency": {str(rows): model.state() for rows, model in sorted(self._latency.items())}}

    def save(self, path: str | Path) -> None:
        """Write the session to ``path`` as JSON (atomically)."""
        write_json_atomic(path, self.as_dict())

    @classmethod
    def load(cls, path: str | Path) -> "SizingSession":
        """A session saved by :meth:`save`: the same estimates, so it sizes every draft as the saved one.

        Raises:
            StandError: a missing or malformed file, or one that is not a sizing session.
        """
        try:
            text = Path(path).read_bytes()
        except OSError as error:
            raise StandError(f"cannot read the sizing session {path}: {error.strerror}") from None
        data = parse_json_object(text, str(path))
        if data.get("format") != SESSION_FORMAT:
            raise StandError(f"{path} is not a sizing session (format {data.get('format')!r})")
        try:
            acceptance = AcceptanceMap(np.asarray(data["acceptance"]["prior"]), kinds=len(data["acceptance"]["prior"]))
            acceptance.add_counts(np.asarray(data["acceptance"]["drafted"]), np.asarray(data["acceptance"]["accepted"]))
            target = tuple(data["target"]) if data["target"] is not None else None
            session = cls(LatencyProfile.from_dict(data["profile"]), acceptance, measured_here=data["measured_here"],
                          target=target)
            for rows, state in data["latency"].items():
                session.latency(int(rows)).restore(state)
            session.frozen = bool(data["frozen"])
        except (KeyError, TypeError, ValueError) as error:
            raise StandError(f"{path}: not a valid sizing session ({type(error).__name__}: {error})") from None
        return session


_DEFAULTS: "weakref.WeakKeyDictionary[object, dict[str, SizingSession]]" = weakref.WeakKeyDictionary()


def default_session(model) -> SizingSession:
    """The session a decoding call of ``model`` uses when given none: one per model (and dtype and
    device), kept while the model lives, so calls made one after another share what they learned."""
    from ..target.latency import target_identity

    sessions = _DEFAULTS.setdefault(model, {})
    key = target_identity(model)[0]
    if key not in sessions:
        sessions[key] = SizingSession.for_model(model)
    return sessions[key]


__all__ = ["SizingSession", "check_sizing", "default_session"]
