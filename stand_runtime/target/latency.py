"""The target's forward-latency profile on this machine, and the tree size it makes best.

A step forwards the root and K draft nodes; its cost t(K + 1) grows with K at a rate that depends
on the hardware (steeply on a CPU, barely on a GPU), so the tree size that maximises expected tokens
per second, ``(1 + best sum alpha over K nodes) / t(K + 1)`` (docs/trees.md §6.6), differs per
machine: :func:`choose_size` picks it from a :class:`LatencyProfile`.

Measuring on a shared, noisy machine (:func:`measure_latency`): sizes are timed in interleaved rounds
(each round visits every size in a fresh random order, so drift hits all sizes alike), each size's
time is the median over rounds, and the medians are fitted by a non-decreasing function (isotonic
regression: a forward over more tokens never costs less), which removes inversions such as
t(16) > t(32) that noise produces. Profiles are cached as JSON under ``$STAND_CACHE_DIR/latency``,
keyed by model, dtype, device, thread count, CPU capability, torch version and which linear kernel
runs at which row count (:func:`stand_runtime.target.fast_linear.dispatch_signature`).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from ..checks import check_int
from ..errors import StandError
from ..files import cache_or_warn, json_bytes
from .fast_linear import dispatch_signature
from .model_facts import check_model
from .models import cache_root
from .timing import architecture_digest, time_chain, timing_disturbed, warm_cache, warn_kept_for_run
from ..trees.tree import DraftTree

DEFAULT_SIZES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 80, 96, 128)
"""Tokens per forward measured by default."""

MAX_PROFILE_TOKENS = 4096
"""The most tokens per forward :func:`measure_latency` times."""


def _real(value) -> bool:
    """Whether ``value`` is a finite real number (not a bool)."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class LatencyProfile:
    """Forward latency against tokens per forward (root included).

    Attributes:
        sizes: ``[s]`` measured token counts, increasing.
        seconds: ``[s]`` fitted (non-decreasing) seconds per forward at each size.
        medians: ``[s]`` raw medians over rounds (seconds).
        spread: ``[s]`` interquartile range over rounds (seconds): how noisy the machine was.

    Raises:
        StandError: no sizes, sizes that are not whole token counts >= 1 in increasing order, seconds
            not finite and > 0 at every size, medians or spread (when given) of another length or
            not finite and >= 0.
    """

    sizes: tuple[int, ...]
    seconds: tuple[float, ...]
    medians: tuple[float, ...] = ()
    spread: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        sizes, seconds = tuple(self.sizes), tuple(self.seconds)
        if not sizes or not all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) and s >= 1 for s in sizes):
            raise StandError(f"a latency profile's sizes must be token counts >= 1, got {list(sizes)}")
        if any(b <= a for a, b in zip(sizes, sizes[1:])):
            raise StandError(f"a latency profile's sizes must increase, got {list(sizes)}")
        checked = {"seconds": seconds, "medians": tuple(self.medians), "spread": tuple(self.spread)}
        for name, values in checked.items():
            if name != "seconds" and not values:
                continue
            if len(values) != len(sizes):
                raise StandError(f"a latency profile has {len(sizes)} sizes but {len(values)} {name}")
            if not all(_real(v) and v >= 0 and (v > 0 or name != "seconds") for v in values):
                raise StandError(f"a latency profile's {name} must be finite times "
                                 f"({'> 0' if name == 'seconds' else '>= 0'} s), got {list(values)}")
        object.__setattr__(self, "sizes", tuple(int(s) for s in sizes))
        for name, values in checked.items():
            object.__setattr__(self, name, tuple(float(v) for v in values))

    def at(self, tokens: float) -> float:
        """Seconds of a forward over ``tokens``: linear between measured sizes, the last slope beyond."""
        sizes, values = self.sizes, self.seconds
        if tokens <= sizes[-1] or len(sizes) < 2:
            return float(np.interp(tokens, sizes, values))
        slope = (values[-1] - values[-2]) / (sizes[-1] - sizes[-2])
        return values[-1] + slope * (tokens - sizes[-1])

    def as_dict(self) -> dict:
        """JSON-ready: ``{"sizes", "seconds", "medians", "spread"}``."""
        return {"sizes": list(self.sizes), "seconds": list(self.seconds), "medians": list(self.medians),
                "spread": list(self.spread)}

    @classmethod
    def from_dict(cls, data: dict) -> "LatencyProfile":
        """The profile of :meth:`as_dict`'s JSON (medians and spread optional)."""
        return cls(tuple(int(s) for s in data["sizes"]), tuple(float(v) for v in data["seconds"]),
                   tuple(float(v) for v in data.get("medians", ())), tuple(float(v) for v in data.get("spread", ())))


def monotone_fit(values: np.ndarray) -> np.ndarray:
    """The non-decreasing sequence closest to ``values`` in least squares (pool adjacent violators)."""
    blocks: list[list[float]] = []  # [mean, weight]
    for value in np.asarray(values, dtype=np.float64):
        blocks.append([value, 1.0])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (m2, w2), (m1, w1) = blocks.pop(), blocks.pop()
            blocks.append([(m1 * w1 + m2 * w2) / (w1 + w2), w1 + w2])
    return np.concatenate([np.full(int(w), m) for m, w in blocks])


def profile_from_rounds(sizes, times: np.ndarray) -> LatencyProfile:
    """A profile from ``[rounds, sizes]`` seconds: medians per size, then the monotone fit."""
    medians = np.median(times, axis=0)
    spread = np.percentile(times, 75, axis=0) - np.percentile(times, 25, axis=0)
    return LatencyProfile(tuple(int(s) for s in sizes), tuple(float(v) for v in monotone_fit(medians)),
                          tuple(float(v) for v in medians), tuple(float(v) for v in spread))


def measure_latency(model, sizes=DEFAULT_SIZES, prefix_len: int = 512, rounds: int = 7, seed: int = 0) -> LatencyProfile:
    """Time one chain forward of n new tokens on a ``prefix_len`` cached prefix, for each n in
    ``sizes``, in ``rounds`` interleaved rounds (module docstring) after one warm-up round.

    Args:
        model: a loaded causal LM (:func:`stand_runtime.load_model`).
        sizes: tokens per forward to time (root included): increasing ints in
            ``[1, MAX_PROFILE_TOKENS]``.
        prefix_len: tokens in the cache each forward attends to (>= 1; fewer where the context lacks room).
        rounds: timed rounds (>= 1).
        seed: seed of the random tokens and the order of sizes.

    Raises:
        StandError: a model that is not a causal LM, or an argument out of the ranges above.
    """
    check_model(model)
    if isinstance(sizes, (str, bytes)) or not hasattr(sizes, "__iter__"):
        raise StandError(f"sizes must be a sequence of token counts, got {sizes!r}")
    sizes = tuple(check_int("a profile size", s, 1, MAX_PROFILE_TOKENS) for s in sizes)
    if not sizes or any(b <= a for a, b in zip(sizes, sizes[1:])):
        raise StandError(f"sizes must be increasing token counts, at least one, got {list(sizes)}")
    prefix_len = check_int("prefix_len", prefix_len, 1)
    rounds = check_int("rounds", rounds, 1, 1000)
    seed = check_int("seed", seed, 0, 2**63 - 1)
    gen = torch.Generator().manual_seed(seed)
    order_rng = np.random.default_rng(seed)
    cache, prefix_len = warm_cache(model, prefix_len, max(sizes), gen)
    chains = {n: DraftTree.chain(n - 1) for n in sizes}
    times = np.zeros((rounds, len(sizes)))
    for round_index in range(rounds + 1):
        for column in order_rng.permutation(len(sizes)):
            seconds = time_chain(model, cache, chains[sizes[column]], prefix_len, gen)
            if round_index > 0:  # round 0 warms caches up
                times[round_index - 1, column] = seconds
    return profile_from_rounds(sizes, times)


def profile_name(model) -> str:
    """The name a latency profile of ``model`` is kept under when the caller gives none: the folder it
    was loaded from, else its model type."""
    return str(getattr(model.config, "_name_or_path", "") or getattr(model.config, "model_type", "model"))


def target_identity(model) -> tuple[str, str]:
    """Which target a method was sized for: ``(key, description)``. The key is a SHA-256 hex digest
    of :func:`~stand_runtime.target.timing.architecture_digest` and the dtypes and devices of all the
    parameters (what the target's latency depends on); the description names :func:`profile_name`,
    dtype(s), device(s) and the architecture digest's first 8 hex digits for an error message."""
    placements = sorted({(str(p.dtype).removeprefix("torch."), str(p.device)) for p in model.parameters()})
    architecture = architecture_digest(model)
    where = "|".join(f"{dtype}|{device}" for dtype, device in placements)
    key = hashlib.sha256(f"{architecture}|{where}".encode()).hexdigest()
    described = " + ".join(f"{dtype} on {device}" for dtype, device in placements)
    return key, f"{profile_name(model)}, {described}, architecture {architecture[:8]}"


def check_same_target(recorded: tuple[str, str] | None, model, what: str, remedy: str) -> None:
    """Raises StandError when ``recorded`` (a :func:`target_identity`, None = any target) is not
    ``model``'s: "this ``what`` was sized for another target (...), not ...: ``remedy``" (one line)."""
    if recorded is None:
        return
    key, description = target_identity(model)
    if key != recorded[0]:
        raise StandError(f"this {what} was sized for another target ({recorded[1]}), not {description}: {remedy}")


def profile_key(model, model_name: str) -> str:
    """The cache key of a profile: what the module docstring lists (``model_name`` is not part of it;
    the architecture, not the folder, so a moved or copied model keeps its profile)."""
    first = next(model.parameters())
    parts = [architecture_digest(model), str(first.dtype), str(first.device), str(torch.get_num_threads()),
             torch.backends.cpu.get_cpu_capability(), torch.__version__, dispatch_signature(model), str(DEFAULT_SIZES)]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


_UNCACHED: dict[str, "LatencyProfile"] = {}
"""Profiles measured in this process whose cache file could not be written, by its path."""


def cached_latency(model, model_name: str, *, refresh: bool = False,
                   on_measure: Callable[[], None] | None = None) -> LatencyProfile:
    """The latency profile of ``model`` on this machine: measured once, then cached (one measured under
    a Python profiler or tracer, :func:`.timing.timing_disturbed`, serves this process only, with a
    :class:`StandWarning`).

    Args:
        model: the target model.
        model_name: its spec (recorded in the profile; not part of the cache key, :func:`profile_key`).
        refresh: measure again even if cached.
        on_measure: called just before a measurement starts (to tell the user).
    """
    path = cache_root() / "latency" / f"{profile_key(model, model_name)}.json"
    if str(path) in _UNCACHED and not refresh:
        return _UNCACHED[str(path)]
    if path.is_file() and not refresh:
        try:
            return LatencyProfile.from_dict(json.loads(path.read_text())["profile"])
        except (OSError, ValueError, KeyError, TypeError):
            pass  # a corrupt cache entry is measured again
    if on_measure is not None:
        on_measure()
    profile = measure_latency(model)
    entry = {"model": model_name, "threads": torch.get_num_threads(), "cpu": torch.backends.cpu.get_cpu_capability(),
             "profile": profile.as_dict()}
    disturbed = timing_disturbed()
    if disturbed is not None:
        warn_kept_for_run("the latency profile", disturbed)
        _UNCACHED[str(path)] = profile
    elif not cache_or_warn(path, json_bytes(entry), "the latency profile"):
        _UNCACHED[str(path)] = profile  # measured once per process, warned once
    return profile


def choose_size(best_sum: np.ndarray, profile: LatencyProfile, batch: int = 1) -> tuple[int, list[dict]]:
    """K maximising ``batch (1 + best_sum[K]) / t(batch (K + 1))``, and the whole curve.

    Args:
        best_sum: ``[K_max + 1]`` best expected accepted tokens per tree size (index 0 = root only;
            ``-inf`` for sizes not available).
        profile: the machine's latency profile.
        batch: rows per target forward: a batched step costs one forward over all its tokens,
            ``t(batch (K + 1))`` (the attention over each row's own cache is not modelled).

    Returns:
        ``(K, curve)``; curve rows hold ``nodes``, ``expected_acceptance_length``, ``latency_s`` and
        ``tokens_per_s`` (expected, all rows together).
    """
    curve = []
    for k, total in enumerate(best_sum):
        if not np.isfinite(total):
            continue  # no tree of this size
        latency = profile.at(batch * (k + 1))
        curve.append({"nodes": k, "expected_acceptance_length": 1.0 + float(total), "latency_s": latency,
                      "tokens_per_s": batch * (1.0 + float(total)) / latency})
    best = max(curve, key=lambda row: row["tokens_per_s"])
    return best["nodes"], curve


UNTRUSTED_SPREAD = 0.25
"""A profile whose :func:`profile_spread` exceeds this was measured on a busy machine: its choices
(``auto`` trees, ``--nodes auto``) are not to be trusted."""

DISAGREEMENT = 1.5
"""A run whose forwards took more than this factor longer or shorter than the profile says ran on a
machine the profile does not describe (measured under load, or since changed)."""

LONG_CONTEXT = 2048
"""Mean context (tokens) past which a run's forwards are slower than the profile because of their
attention over the context (:func:`measure_latency` times forwards on a 512-token prefix), not because
the profile is wrong."""


def profile_spread(profile: LatencyProfile) -> float:
    """The median over the sizes of the interquartile range over rounds relative to the median (0
    when the profile recorded no spread): a busy machine spreads every size, one noisy size does not."""
    ratios = [s / m for s, m in zip(profile.spread, profile.medians) if m > 0]
    return float(np.median(ratios)) if ratios else 0.0


def latency_warnings(profile: LatencyProfile, *, forward_s: float = 0.0, forwards: int = 0,
                     tokens_per_forward: float = 1.0, context_tokens: float = 0.0,
                     spread: bool = True) -> list[str]:
    """Reasons not to trust ``profile``, each one line naming what to do (empty when none).

    Args:
        profile: the latency profile a choice was made with.
        forward_s, forwards, tokens_per_forward: what a run observed (seconds in target forwards,
            their count, mean tokens per forward incl. the root); ``forwards`` 0 = nothing observed.
        context_tokens: the run's mean context (tokens); past :data:`LONG_CONTEXT` slower forwards
            are the context's, not the profile's fault, and are not reported.
        spread: check the profile's spread between rounds (False where the caller checked it before
            the run).
    """
    folder = cache_root() / "latency"
    out = []
    width = profile_spread(profile) if spread else 0.0
    if width > UNTRUSTED_SPREAD:
        out.append(f"the latency profile was measured with a spread of {100 * width:.0f}% between rounds (the machine "
                   f"was busy): sizes chosen from it may be wrong; delete {folder} and run again on a quiet machine")
    if forwards > 0 and forward_s > 0:
        observed = forward_s / forwards
        expected = profile.at(tokens_per_forward)
        ratio = observed / expected if expected > 0 else float("inf")
        slow_context = ratio > 1 and context_tokens > LONG_CONTEXT
        if not 1 / DISAGREEMENT <= ratio <= DISAGREEMENT and not slow_context:
            out.append(f"this run's forwards took {1e3 * observed:.0f} ms for {tokens_per_forward:.1f} tokens where the "
                       f"cached latency profile says {1e3 * expected:.0f} ms ({ratio:.1f}x): the profile or this run was "
                       f"measured under other load; if the machine is quiet now, delete {folder} to measure again")
    return out
