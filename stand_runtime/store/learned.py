"""Which token sequences a drafter memory has learned, so that a prompt it has seen is not fed twice.

A tree search asks for continuations of prompts the memory has already read: a DVTS round's prompt is
the problem plus the best candidate of the round before, a sequence whose every next-token
distribution the n-gram store received while that candidate was decoded (its prompt at the prefill,
each step's root and accepted nodes after it). Feeding such a prompt again costs a top-k of p over
every position and merges each context's p into itself once more, which only inflates its count. The
engine registers every decoded row's committed tokens (the row's own list, which grows in place as
it decodes: p after each of its prefixes but the whole is in the store at every step boundary), and
the drafter feeds a prompt only from the first position no registered sequence covers
(:meth:`LearnedSequences.covered`). What the memory learns is unchanged otherwise; drafts are never
part of the lossless path, so this changes speed and draft statistics, never the output distribution
(nor is a context fed again that the store evicted since: eviction only bounds its memory).
"""

from __future__ import annotations

import weakref
from collections import deque
from typing import Sequence

import numpy as np

MAX_SEQUENCES = 256
"""Sequences a memory's ledger keeps (the most recent; a DVTS 16 x 4 problem registers 16 a round)."""


class LearnedSequences:
    """The token sequences one memory has learned the next-token distributions of (module docstring)."""

    def __init__(self) -> None:
        self._sequences: deque[list[int]] = deque(maxlen=MAX_SEQUENCES)

    def add(self, sequence: list[int]) -> None:
        """Register ``sequence`` (kept by reference: a decoding row's committed tokens, growing in place),
        whose p after each prefix of 1 .. ``len(sequence) - 1`` tokens the memory holds."""
        if not any(known is sequence for known in self._sequences):
            self._sequences.append(sequence)

    def covered(self, prompt: Sequence[int]) -> int:
        """c such that the memory holds p after ``prompt[:k]`` for k = 1 .. c (a prefill feeds position
        i with p after ``prompt[: i + 1]``: positions 0 .. c - 1 need no feeding); 0 when none."""
        tokens = np.asarray(prompt, dtype=np.int64)
        best = 0
        for known in list(self._sequences):  # a snapshot: another thread may register meanwhile
            length = min(len(known), len(tokens))
            if min(length, len(known) - 1) <= best:
                continue
            differ = np.flatnonzero(np.asarray(known[:length], dtype=np.int64) != tokens[:length])
            common = int(differ[0]) if len(differ) else length
            best = max(best, min(common, len(known) - 1))
        return best


_LEDGERS: "weakref.WeakKeyDictionary[object, LearnedSequences]" = weakref.WeakKeyDictionary()


def learned_sequences(memory) -> LearnedSequences:
    """The ledger of ``memory`` (an n-gram store), made on first use and dropped with the memory."""
    ledger = _LEDGERS.get(memory)
    if ledger is None:
        ledger = _LEDGERS[memory] = LearnedSequences()
    return ledger
