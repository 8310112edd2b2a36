"""t(n), the seconds of a target forward over n tokens, as the value rule prices drafts (ours;
docs/algorithms.md §3.7): a latency profile corrected by the run's own forward times
(:class:`LatencyModel`), and which steps explore the sizes it has not observed (:func:`explores`)."""

from __future__ import annotations

from collections import deque
from statistics import median
from typing import Callable, Sequence

import numpy as np

WINDOW = 16
"""Recent forwards per profile size that :class:`LatencyModel` keeps."""

MIN_OBSERVED = 3
"""Forwards a profile size needs before its observed ratio counts: a median of three outvotes one stray
forward (a pause), which a median of two does not."""

TOLERANCE, SCALE_TOLERANCE = 2.0, 3.0
"""When a run's step times say its latency profile is wrong (:class:`LatencyModel`): some size's
observed ratio more than a factor 2 from the ratio of the size observed most (the run's typical
forward), or that ratio more than a factor 3 from 1 (the machine slower or faster than when the
profile was measured). Short of both the profile stands, so a run sizes its drafts from the profile
and the acceptance it observed alone, and a seed reproduces it. The factors sit above a quiet run's
spread and below a loaded profile's departure (docs/decisions.md)."""

DEPARTURE_OBSERVED = WINDOW // 2
"""Forwards a size needs before its ratio can say the profile's shape is wrong: a size the rule
rarely chooses has few, and two slow ones among three (a pause) would turn the correction on in one
run and not in another seeded alike."""

MAX_AGE = 512
"""Forwards after which an observation is dropped (:meth:`LatencyModel.observe`): a size the rule no
longer chooses keeps no ratio from long ago. Without it the root-only forward, observed while exploring
at the start and never again once every step drafts, would price drafting for the rest of the run by
those first (cold) forwards. Dropped, the root-only forward is explored again
(:meth:`LatencyModel.explore`)."""

EXPLORE_FIRST, EXPLORE_EVERY = MIN_OBSERVED + 1, 4
"""While the root-only forward is unobserved, the first 4 steps draft nothing (the first runs cold and
is not observed), then every 4th (:func:`explores`), so the root-only forward is observed within the
first steps."""


def explores(step: int) -> bool:
    """Whether the rule's step ``step`` (0-based) explores, while the root-only forward is unobserved."""
    return step < EXPLORE_FIRST or step % EXPLORE_EVERY == 0


class LatencyModel:
    """Seconds of a target forward over n tokens: a profile corrected by observed forwards.

    The correction is a ratio observed / profile per profile size (the median of its last
    :data:`WINDOW` forwards younger than :data:`MAX_AGE` forwards, once it has :data:`MIN_OBSERVED`),
    interpolated linearly in tokens between the sizes observed and held constant beyond them; before
    any observation the profile stands. Shape matters, not scale (the rule's argmax ignores a constant
    factor). While every size's ratio (of those with :data:`DEPARTURE_OBSERVED` forwards) is within
    ``tolerance`` of the ratio of the size observed most, and that one within :data:`SCALE_TOLERANCE`
    of 1, the profile stands as measured, so timing noise
    (and host work that moves a size's cost by less) does not move the sizes and a seeded run repeats;
    beyond either, every observed size corrects it. The smallest forward (the root
    alone) must be observed too: :meth:`explore` asks for it while it is missing (never observed, or its
    observations aged out).

    Args:
        profile: seconds of a forward over ``tokens`` (e.g. :meth:`stand_runtime.LatencyProfile.at`).
        sizes: the profile's measured sizes (tokens), the buckets observations are kept in.
        rows: rows per forward (a batch of B rows forwards B times the tokens).
        observing: False for a profile of other hardware with no forwards of its own to observe (the
            trace bench's replay, sized for a projection): it never asks to explore.
        tolerance: :data:`TOLERANCE`, a factor >= 1; 1 corrects every departure (for a placeholder
            profile whose shape and scale mean nothing, as a flat one).
    """

    def __init__(self, profile: Callable[[float], float], sizes: Sequence[int], rows: int = 1,
                 observing: bool = True, tolerance: float = TOLERANCE) -> None:
        self.profile = profile
        self.tolerance = float(tolerance)
        self.sizes = np.asarray(sorted(sizes), dtype=np.float64)
        self.rows = rows
        self.observing = observing
        self._ratios = [deque(maxlen=WINDOW) for _ in self.sizes]  # per size (tokens, ratio, forward index)
        self._forwards = 0  # forwards observed so far (the next one's index)
        self._medians: list = [None] * len(self.sizes)  # per size its (tokens, ratio) median, None: refit
        self._profiled = np.zeros(0)  # profile(t) for t = 1 .. len (filled on demand: it never changes)
        self._fit = None  # _fitted()'s answer until the next observation
        self._fit_stale = True  # a flag, not a sentinel object: a copied or unpickled model keeps its meaning

    def _profile_many(self, tokens: np.ndarray) -> np.ndarray:
        """``profile`` at integer token counts ``tokens`` (``[m]`` int, >= 1), from a table kept per count."""
        top = int(tokens.max(initial=0))
        if top > len(self._profiled):
            grown = max(top, 2 * len(self._profiled), 64)
            more = np.arange(len(self._profiled) + 1, grown + 1)
            self._profiled = np.concatenate([self._profiled, [self.profile(float(t)) for t in more]])
        return self._profiled[tokens - 1]

    def _fitted(self):
        """The correction as it stands: ``(tokens, ratios)`` of the sizes observed, or None (the
        profile stands: nothing observed, or the run agrees with the profile within the tolerances);
        refitted only after an observation."""
        if self._fit_stale:
            self._fit, self._fit_stale = self._fit_now(), False
        return self._fit

    def _fit_now(self):
        if not self._known():
            return None
        kept = sorted((*self._medians[b], len(self._ratios[b])) for b in range(len(self.sizes))
                      if self._medians[b] is not None)
        tokens, ratios, counts = (np.asarray(v) for v in zip(*kept))
        if self.tolerance > 1.0:
            reference = ratios[int(np.argmax(counts))]  # the size observed most: the run's typical forward
            telling = counts >= DEPARTURE_OBSERVED
            if (abs(np.log(reference)) <= np.log(SCALE_TOLERANCE)
                    and np.all(np.abs(np.log(ratios[telling] / reference)) <= np.log(self.tolerance))):
                return None  # the machine as the profile measured it: its shape stands
        return tokens, ratios

    def _bucket(self, tokens: float) -> int:
        return int(np.argmin(np.abs(np.log(self.sizes) - np.log(max(tokens, 1.0)))))

    def ratio(self, tokens: float) -> float:
        """Observed / profile seconds at ``tokens`` (all rows; 1 where the profile stands: before any
        observation, or while the run agrees with it within the tolerances)."""
        return float(self._ratios_at(np.array([float(tokens)]))[0])

    def _known(self) -> list:
        """Per profile size with :data:`MIN_OBSERVED` forwards its median ``(tokens, ratio)`` (each
        refitted only after its size was observed again)."""
        for b, kept in enumerate(self._ratios):  # statistics.median: numpy's per-call cost is too high for a few values
            if self._medians[b] is None and len(kept) >= MIN_OBSERVED:
                self._medians[b] = tuple(median(column) for column in list(zip(*kept))[:2])
        return [m for m in self._medians if m is not None]

    def _ratios_at(self, tokens: np.ndarray) -> np.ndarray:
        fitted = self._fitted()
        return np.ones_like(tokens) if fitted is None else np.interp(tokens, *fitted)

    def at(self, tokens: float) -> float:
        """Seconds of one forward over ``tokens`` tokens per row (:attr:`rows` rows)."""
        total = tokens * self.rows
        return self.profile(total) * self.ratio(total)

    def frozen(self) -> Callable[[float], float]:
        """Seconds of one forward over ``tokens`` tokens in all (a padded ``[B, W]`` batch forward:
        ``B * W``), with the corrections observed so far frozen (cheap to call many times); its
        ``many`` attribute takes an int array of token counts (:func:`.value.seconds_of`)."""
        fitted = self._fitted()

        def seconds(tokens: float) -> float:
            return self.profile(tokens) * (1.0 if fitted is None else float(np.interp(tokens, *fitted)))

        def many(tokens: np.ndarray) -> np.ndarray:
            tokens = np.asarray(tokens, dtype=np.int64)
            return self._profile_many(tokens) * (1.0 if fitted is None else np.interp(tokens, *fitted))

        seconds.many = many
        return seconds

    def observe(self, tokens: int, seconds: float) -> None:
        """Add one forward: ``tokens`` in it (all rows) and its measured ``seconds``; drop every
        observation :data:`MAX_AGE` forwards old. A model not :attr:`observing` (another machine's
        profile) ignores it."""
        expected = self.profile(tokens)
        if self.observing and expected > 0 and seconds > 0:
            bucket = self._bucket(tokens)
            self._ratios[bucket].append((tokens, seconds / expected, self._forwards))
            self._medians[bucket] = None
            self._fit_stale = True
            self._forwards += 1
            oldest = self._forwards - MAX_AGE
            for b, kept in enumerate(self._ratios):
                while kept and kept[0][2] < oldest:
                    kept.popleft()
                    self._medians[b] = None

    def state(self) -> dict:
        """The observations as JSON (:meth:`restore` takes it back)."""
        return {"forwards": self._forwards, "ratios": [[list(map(float, o)) for o in kept] for kept in self._ratios]}

    def restore(self, state: dict) -> None:
        """Take the observations of :meth:`state` (a model over the same profile sizes).

        Raises:
            ValueError: observations of another number of profile sizes.
        """
        if len(state["ratios"]) != len(self._ratios):
            raise ValueError(f"{len(state['ratios'])} profile sizes observed, the profile has {len(self._ratios)}")
        for kept, saved in zip(self._ratios, state["ratios"]):
            kept.clear()
            kept.extend((float(t), float(r), int(i)) for t, r, i in saved)
        self._forwards = int(state["forwards"])
        self._medians = [None] * len(self.sizes)
        self._fit_stale = True

    def explore(self, tokens: int | None = None) -> bool:
        """True while the root-only forward (``tokens`` in all; None = :attr:`rows`) has fewer than
        :data:`MIN_OBSERVED` observations (never when not :attr:`observing`)."""
        return self.observing and self.observed(self.rows if tokens is None else tokens) < MIN_OBSERVED

    def observed(self, tokens: float) -> int:
        """Forwards kept in the profile size nearest ``tokens`` (all rows)."""
        return len(self._ratios[self._bucket(tokens)])

    def observed_from(self, tokens: float) -> int:
        """Forwards kept over ``tokens`` tokens or more (all rows)."""
        return sum(1 for kept in self._ratios for seen, *_ in kept if seen >= tokens)

    def at_many(self, tokens: np.ndarray) -> np.ndarray:
        """``[m]`` seconds of forwards over each of ``tokens`` (``[m]`` int) tokens per row
        (:attr:`rows` rows), the correction fitted once (:meth:`at` for many sizes)."""
        return self.frozen().many(np.asarray(tokens, dtype=np.int64) * self.rows)

    def curve(self, first: int, last: int) -> np.ndarray:
        """``[last - first + 1]`` seconds of forwards over ``first .. last`` tokens in all (``first`` >= 1;
        ``rows`` ignored: the tokens are a whole forward's), the correction fitted once."""
        tokens = np.arange(first, last + 1, dtype=np.int64)  # the profile from its table, not per-token calls
        return self._profile_many(tokens) * self._ratios_at(tokens.astype(np.float64))
