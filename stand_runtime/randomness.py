"""Precomputed pools of random numbers, drawn from one ``torch.Generator`` and never reused.

Drafting needs Gumbel noise for every drafted node and verification needs uniforms for every
acceptance test and every residual sample: tens of draws per decoding step. Drawing them one by one
from torch costs microseconds each, so :class:`RandomStream` draws blocks ahead and hands values out
in order. Each value is used exactly once: reusing Gumbel noise would correlate draft tokens across
nodes and steps, and reusing a uniform would correlate accept decisions, either of which breaks the
losslessness of speculative sampling. A seeded generator reproduces a run bit for bit.
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch

from .errors import StandError
from .limits import SEED_LIMIT

_TINY = np.finfo(np.float64).tiny


def check_seed(seed) -> None:
    """Raises StandError unless ``seed`` is None or an int in [0, 2**64) (bools are refused)."""
    if seed is None:
        return
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise StandError(f"seed must be an integer in [0, 2**64), got {seed!r}")
    if not 0 <= int(seed) < SEED_LIMIT:
        raise StandError(f"seed must be in [0, 2**64), got {seed}")


def check_seed_span(seed: int | None, count: int, what: str) -> None:
    """Raises StandError when ``count`` draws seeded ``seed``, ``seed + 1``, ... (``what`` names them:
    "rows", "samples", ...) would run past the last seed, 2**64 - 1; naming the largest seed that fits."""
    if seed is not None and count > SEED_LIMIT:
        raise StandError(f"{count} {what} need more than 2**64 seeds: ask for fewer")
    if seed is not None and seed + count - 1 >= SEED_LIMIT:
        raise StandError(f"seed {seed} seeds {count} {what} with seed + i: the last, {seed} + {count - 1}, is past "
                         f"2**64 - 1; give a seed <= {SEED_LIMIT - count}")


class _Pool:
    """A block of float64 values refilled from ``draw(n)`` whenever it runs out."""

    def __init__(self, draw, block: int) -> None:
        self._draw = draw
        self._block = block
        self._values = np.empty(0)
        self._next = 0
        self.lent: tuple | None = None  # (count, next, values, generator state) of the last lend

    def lend(self, n: int, get_state) -> np.ndarray:
        """``[n]`` values (a copy) taken as by :meth:`take`; :meth:`give_back` returns the unused ones.
        ``get_state()`` is the generator's state, saved before a refill this take causes."""
        before = (n, self._next, self._values, get_state() if self._next + n > len(self._values) else None)
        out = self.take(n).copy()
        self.lent = before
        return out

    def give_back(self, unused: int):
        """Return the last ``unused`` values of the last lend; returns the generator state to restore
        (the refill the lend drew turned out not needed, as one-by-one draws would not have made it) or None."""
        if self.lent is None or not 0 <= unused <= self.lent[0]:
            raise StandError(f"cannot give back {unused} uniforms: "
                             + ("none were lent" if self.lent is None else f"{self.lent[0]} were lent"))
        count, start, values, state = self.lent
        self.lent = None
        if state is not None and start + count - unused <= len(values):
            self._values, self._next = values, start + count - unused
            return state
        self._next -= unused
        return None

    def take(self, n: int) -> np.ndarray:
        if self._next + n > len(self._values):
            rest = self._values[self._next :]
            self._values = np.concatenate([rest, self._draw(max(self._block, n))])
            self._next = 0
        out = self._values[self._next : self._next + n]
        self._next += n
        self.lent = None
        return out

    def take_one(self) -> float:
        self.lent = None
        if self._next >= len(self._values):
            self._values = self._draw(self._block)
            self._next = 0
        value = self._values[self._next]
        self._next += 1
        return float(value)


class RandomStream:
    """All randomness of a decoding run: U[0, 1) uniforms and standard Gumbel noise.

    Args:
        generator: the source of every draw; ``None`` makes a fresh unseeded CPU generator.
        block: values drawn from the generator per refill of each pool.

    Both pools are float64. Gumbel values are ``-log(-log(u))`` of their own uniforms (u clamped
    away from 0), precomputed per block, as in the Gumbel-Top-K trick (Kool et al., 2019, §2).
    """

    def __init__(self, generator: torch.Generator | None = None, block: int = 4096) -> None:
        if generator is None:
            generator = torch.Generator()
            generator.seed()
        self.generator = generator
        self._uniforms = _Pool(self._draw_uniforms, block)
        self._gumbels = _Pool(self._draw_gumbels, block)

    @classmethod
    def seeded(cls, seed: int | None, block: int = 4096) -> "RandomStream":
        """A stream on a fresh CPU generator seeded with ``seed`` (``None``: nondeterministic seed).

        Raises:
            StandError: ``seed`` is not None or an int in [0, 2**64).
        """
        check_seed(seed)
        generator = torch.Generator()
        if seed is None:
            generator.seed()
        else:
            generator.manual_seed(int(seed))
        return cls(generator, block)

    def _draw_uniforms(self, n: int) -> np.ndarray:
        return torch.rand(n, generator=self.generator, dtype=torch.float64).numpy()

    def _draw_gumbels(self, n: int) -> np.ndarray:
        uniforms = np.maximum(self._draw_uniforms(n), _TINY)
        return -np.log(-np.log(uniforms))

    def uniform(self) -> float:
        """One fresh U[0, 1) draw."""
        return self._uniforms.take_one()

    def lend_uniforms(self, n: int) -> np.ndarray:
        """``[n]`` float64 uniforms (a copy): the next ``n`` that :meth:`uniform` would give, lent so
        that a caller that uses only the first ``k`` (the batched verifier: one per visited node's
        outcome, then one sample) hands the other ``n - k`` back with :meth:`give_back_uniforms`. The
        stream then continues exactly as if ``k`` uniforms had been drawn one by one (a refill the lend
        drew but ``k`` draws would not have made is undone by restoring the generator's state), for
        ``n`` up to the pool's block; no Gumbel draw may come between the lend and the give-back.

        Raises:
            StandError: ``n`` is not an int >= 0.
        """
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
            raise StandError(f"lend_uniforms takes a count >= 0, got {n!r}")
        return self._uniforms.lend(int(n), self.generator.get_state)

    def give_back_uniforms(self, unused: int) -> None:
        """Return the last ``unused`` uniforms of the last :meth:`lend_uniforms` (nothing drawn since).

        Raises:
            StandError: nothing is lent (or a uniform was drawn since), or ``unused`` exceeds the lend.
        """
        state = self._uniforms.give_back(unused)
        if state is not None:
            self.generator.set_state(state)

    def gumbel(self, n: int) -> np.ndarray:
        """``[n]`` float64 fresh standard Gumbel draws (a view into the pool)."""
        self._uniforms.lent = None  # the generator moves on: a lend can no longer be undone
        return self._gumbels.take(n)


def drafting_seed(seed: int) -> int:
    """The seed of a seeded vLLM request's drafting noise (STAND's proposer): ``seed`` (in [0, 2**64))
    mixed by SHA-256, in [0, 2**64) (docs/vllm.md §7.11).

    vLLM draws a seeded request's samples, acceptance uniforms and recovered tokens from a torch
    generator seeded with ``seed`` itself; a drafting stream seeded alike would draw the same uniforms,
    so drafts would be correlated with the draws that verify them and the output would leave the
    target's distribution (docs/decisions.md). Lossless needs the drafts independent of the verification's draws given what was committed."""
    digest = hashlib.sha256(b"stand-vllm-drafting-noise" + int(seed).to_bytes(8, "little")).digest()
    return int.from_bytes(digest[:8], "little")
