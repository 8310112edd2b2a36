"""The randomness of decoding: a stream of fresh draws (:class:`RandomStream`) and noise fixed by position (:class:`PositionNoise`).

:class:`RandomStream` serves recursive rejection verification: Gumbel noise for every drafted node,
uniforms for every acceptance test and residual sample, drawn from torch in blocks ahead (one by one
costs microseconds each) and each used exactly once: reused noise would correlate drafts or accept
decisions and break losslessness. A seeded stream repeats a run only while the drafts repeat.

:class:`PositionNoise` serves drafter-invariant verification (docs/seeds.md): standard Gumbel noise
``G[t, v]`` that is a pure function of (the row's key, sequence position t, token v), counter-based
(a SplitMix64 hash, Steele, Lea and Flood 2014), so it does not depend on how many draws anything
made before. The target's token at position t is ``argmax_v log p_t(v) + G[t, v]`` (the Gumbel-max
trick), whatever drafted it, and the drafts use the same ``G``.

Both serve drafting through one interface (:class:`DraftNoise`): ``noise.at(base)`` for a draft after
``base`` committed tokens, then ``children(depth, ids)``: the Gumbel noise of a node's children at
that depth, over the support ``ids``.
"""

from __future__ import annotations

import hashlib
import os
from typing import Protocol

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
    """Raises StandError when ``count`` ``what`` ("rows", "samples") seeded ``seed``, ``seed + 1``, ...
    would run past the last seed, 2**64 - 1, naming the largest seed that fits."""
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
        """``[n]`` values (a copy) as :meth:`take`; ``get_state()`` saved before a refill it causes."""
        before = (n, self._next, self._values, get_state() if self._next + n > len(self._values) else None)
        out = self.take(n).copy()
        self.lent = before
        return out

    def give_back(self, unused: int):
        """Return the last ``unused`` values of the last lend; returns the generator state to restore
        where the lend's refill turned out not needed, else None."""
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
    """All randomness of a decoding run: float64 U[0, 1) uniforms and standard Gumbel noise
    ``-log(-log(u))`` of their own uniforms (Kool et al., 2019, §2), each pool refilled by blocks.

    Args:
        generator: the source of every draw; ``None`` makes a fresh unseeded CPU generator.
        block: values drawn per refill of each pool.
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
        """``[n]`` float64 uniforms (a copy): the next ``n`` :meth:`uniform` would give, lent so that a
        caller using only the first ``k`` (the batched verifier) hands ``n - k`` back with
        :meth:`give_back_uniforms`; the stream then continues exactly as after ``k`` single draws
        (for ``n`` up to the block; no Gumbel draw between the lend and the give-back).

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

    def at(self, base: int) -> "RandomStream":
        """The stream itself (:class:`DraftNoise`): its draws do not depend on the position."""
        return self

    def children(self, depth: int, ids: np.ndarray) -> np.ndarray:
        """``[len(ids)]`` fresh Gumbel draws (:class:`DraftNoise`; ``depth`` and the ids themselves unused)."""
        return self.gumbel(len(ids))


def drafting_seed(seed: int) -> int:
    """The seed of a seeded vLLM request's drafting noise: ``seed`` (in [0, 2**64)) mixed by SHA-256,
    in [0, 2**64) (docs/vllm.md §7.11). vLLM verifies with a generator seeded ``seed`` itself: drafts
    drawn alike would be correlated with the draws that verify them, and the output lossy."""
    digest = hashlib.sha256(b"stand-vllm-drafting-noise" + int(seed).to_bytes(8, "little")).digest()
    return int.from_bytes(digest[:8], "little")


class DraftNoise(Protocol):
    """What drafting reads its Gumbel noise from (a :class:`RandomStream` or a :class:`PositionNoise`)."""

    def at(self, base: int) -> "DraftNoise":
        """The noise of a draft whose root is committed token ``base - 1`` (``base`` tokens committed)."""

    def children(self, depth: int, ids: np.ndarray) -> np.ndarray:
        """``[len(ids)]`` float64 standard Gumbel noise for the children of a node at ``depth`` (root 0)
        over the support ``ids`` (``[k]`` int64 token ids): its children are the tokens at position
        ``base + depth``."""


_GOLDEN = 0x9E3779B97F4A7C15
_MIX1, _MIX2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB


def _mix_array(z: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser of every entry of a uint64 array (numpy's uint64 arithmetic wraps modulo 2**64)."""
    z = z + np.uint64(_GOLDEN)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(_MIX1)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(_MIX2)
    return z ^ (z >> np.uint64(31))


def _signed(value: int) -> int:
    """``value`` in [0, 2**64) as the int64 of the same bits."""
    return value - (1 << 64) if value >= 1 << 63 else value


def _shift_right(z: torch.Tensor, bits: int) -> torch.Tensor:
    """The logical right shift of int64 ``z`` (torch's ``>>`` is arithmetic on signed integers)."""
    return (z >> bits) & ((1 << (64 - bits)) - 1)


def _mix_tensor(z: torch.Tensor) -> torch.Tensor:
    """:func:`_mix_array` of every entry of an int64 tensor (two's complement: int64 arithmetic wraps as uint64's)."""
    z = z + _signed(_GOLDEN)
    z = (z ^ _shift_right(z, 30)) * _signed(_MIX1)
    z = (z ^ _shift_right(z, 27)) * _signed(_MIX2)
    return z ^ _shift_right(z, 31)


def _gumbel_of(bits53: np.ndarray | torch.Tensor):
    """Standard Gumbel values ``-log(-log(u))`` of ``u = (bits + 1/2) / 2**53`` in (0, 1), float64."""
    u = (bits53 + 0.5) * 2.0 ** -53
    return -np.log(-np.log(u)) if isinstance(u, np.ndarray) else -torch.log(-torch.log(u))


class PositionNoise:
    """Standard Gumbel noise fixed by a key, a sequence position and a token: ``G[t, v]``.

    ``G[t, v] = -log(-log(u))`` with ``u`` the top 53 bits of ``mix(mix(key ^ mix(t)) ^ v·φ)``, ``mix``
    SplitMix64's finaliser and φ its odd constant: counter-based randomness (Salmon et al., 2011),
    the same value however often or in whatever order it is read. numpy, C++ drafting and torch
    compute the same bits (the float64 logarithm may differ by an ulp).

    Args:
        key: the row's key, an int in [0, 2**64).

    Raises:
        StandError: ``key`` out of range.
    """

    def __init__(self, key: int) -> None:
        check_seed(key)
        self.key = int(key)

    @classmethod
    def seeded(cls, seed: int | None) -> "PositionNoise":
        """The noise of a row seeded ``seed``: its key is ``seed`` mixed by SHA-256 (``None``: a key from
        the operating system's entropy, so an unseeded row is fresh).

        Raises:
            StandError: ``seed`` is not None or an int in [0, 2**64).
        """
        check_seed(seed)
        if seed is None:
            return cls(int.from_bytes(os.urandom(8), "little"))
        digest = hashlib.sha256(b"stand-position-noise" + int(seed).to_bytes(8, "little")).digest()
        return cls(int.from_bytes(digest[:8], "little"))

    def position_keys(self, positions) -> np.ndarray:
        """The hash state ``mix(key ^ mix(t))`` of every position t of ``positions`` (``[n]`` sequence
        indices >= 0), as ``[n]`` int64 bits (what :func:`position_gumbel` takes)."""
        mixed = _mix_array(np.uint64(self.key) ^ _mix_array(np.asarray(positions, dtype=np.int64).astype(np.uint64)))
        return mixed.view(np.int64)

    def gumbel(self, position: int, ids) -> np.ndarray:
        """``[len(ids)]`` float64 ``G[position, ids]`` (``ids``: token ids >= 0, any integer array)."""
        tokens = np.asarray(ids, dtype=np.int64).astype(np.uint64) * np.uint64(_GOLDEN)
        bits = _mix_array(tokens ^ self.position_keys([position]).view(np.uint64)) >> np.uint64(11)
        return _gumbel_of(bits.astype(np.float64))

    def at(self, base: int) -> "PositionedNoise":
        """The noise of a draft after ``base`` committed tokens (:class:`DraftNoise`)."""
        return PositionedNoise(self, int(base))


def position_gumbel(position_keys: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """:meth:`PositionNoise.gumbel` for many positions at once, on ``ids``' device.

    Args:
        position_keys: ``[R]`` int64, each row's position key (:meth:`PositionNoise.position_keys`).
        ids: ``[R, K]`` int64 token ids (any value >= 0; padding included).

    Returns:
        ``[R, K]`` float64 ``G[position of row r, ids[r, k]]``.
    """
    tokens = ids * _signed(_GOLDEN)
    bits = _shift_right(_mix_tensor(tokens ^ position_keys[:, None]), 11)
    return _gumbel_of(bits.double())


class PositionedNoise:
    """:class:`PositionNoise` for one draft (``base`` tokens committed): a node's children at
    ``depth`` are the tokens at position ``base + depth`` (:class:`DraftNoise`)."""

    def __init__(self, noise: PositionNoise, base: int) -> None:
        self.noise, self.base = noise, base

    def at(self, base: int) -> "PositionedNoise":
        return self.noise.at(base)

    def children(self, depth: int, ids) -> np.ndarray:
        return self.noise.gumbel(self.base + int(depth), ids)
