"""Greedy replay of recorded traces through a drafter, with no model (issue 13).

A recorded trace (a reasoning model's output) is the target's output under greedy decoding: at every
position the target's argmax is the trace's next token and p is one-hot on it. Replaying it drives
the engine's own per-sequence steps (:class:`stand_runtime.engine.row.DecodeRow`): the drafter
drafts from the committed tokens, :func:`stand_runtime.verify.verify_greedy` accepts the longest
drafted path that matches the trace plus one token, and the drafter is fed exactly as the engine
feeds it, through :class:`TraceTarget` (a :class:`stand_runtime.drafters.feeds.TargetFeed`). So the replay
measures the acceptance length τ each drafter would reach on that text, at any model size.

What a recording cannot give: p at rejected nodes (their next token is unknown: only the committed
path is observed) and the target's top-k at any position (p is one-hot), unless the recording kept
them (``recorded``: the store's top-10 per position, as :class:`stand_runtime.RecordedDistributions`
holds; then the replay of a model's own greedy output takes exactly the engine's steps).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .row import DecodeRow, learn_rows
from ..drafters import Drafter
from ..errors import StandError
from ..drafters.feeds import OneHotFeed, RowsFeed, one_hot_rows
from ..sizing.allocation import BatchAllocator
from ..sizing.value import ValueRule
from .clock import Clock
from .metrics import DecodeStats
from ..randomness import RandomStream
from ..target.prompts import encode_prompt
from ..target.sampling import SamplingParams
from .stopping import StopRule

GREEDY = SamplingParams(temperature=0.0)


@dataclass(frozen=True)
class RecordedTop:
    """Top-k rows a recording kept along prompt + trace.

    Attributes:
        ids: ``[L - 1, k]`` int64; row i describes the token after ``sequence[: i + 1]``.
        probs: ``[L - 1, k]`` float64 their probabilities (what the drafter records: for greedy
            decoding the temperature-1 softmax).
    """

    ids: np.ndarray
    probs: np.ndarray


class TraceTarget:
    """The target's output for one drafted step, read from a recorded trace.

    Args:
        draft: the step's draft.
        sequence: prompt + trace tokens.
        committed: tokens committed before the step (the root is ``sequence[committed - 1]``).
        recorded: top-k rows along ``sequence`` (None: one-hot rows of the next tokens).

    Only nodes on the trace (their path equals the trace's next tokens) have a known target; greedy
    verification visits no other. ``argmax_at(i)`` is the trace's token after the path to node i.
    """

    def __init__(self, draft, sequence: Sequence[int], committed: int, recorded: RecordedTop | None = None) -> None:
        self.draft = draft
        self.sequence = sequence
        self.committed = committed
        self.recorded = recorded
        self.one_hot = recorded is None
        self.rows: dict = {}

    def _index(self, position: int) -> int:
        """Index in ``sequence`` of the token after the path to draft ``position``."""
        return self.committed + int(self.draft.depths[position])

    def argmax_at(self, position: int) -> int:
        """The trace's token after the path to draft ``position`` (an on-trace node).

        Raises:
            StandError: the node lies beyond the trace's end.
        """
        index = self._index(position)
        if index >= len(self.sequence):
            raise StandError(f"draft node {position} lies beyond the trace's end (token {index})")
        return int(self.sequence[index])

    def target_at(self, position: int):
        raise StandError("a recorded trace replays greedy decoding only (p is one-hot on the trace)")

    def observed(self, accepted: Sequence[int]) -> list[int]:
        """The committed path: root and accepted nodes (their next tokens are the trace's)."""
        return [0, *accepted]

    def top(self, positions: Sequence[int], k: int, params: SamplingParams) -> tuple[np.ndarray, np.ndarray]:
        indices = [self._index(p) for p in positions]
        if self.recorded is not None:
            rows = [i - 1 for i in indices]
            return self.recorded.ids[rows, :k], self.recorded.probs[rows, :k]
        return one_hot_rows([self.sequence[i] for i in indices], k)


@dataclass
class ReplayResult:
    """One replayed trace.

    Attributes:
        stats: the run's :class:`DecodeStats` (steps, tokens per step, drafted nodes; drafting in
            ``drafting_s``, verification, the stop cut and drafter feeding in ``bookkeeping_s``).
        tokens: the trace's tokens replayed.
    """

    stats: DecodeStats
    tokens: int


def _ids(name: str, ids) -> list[int]:
    """``ids`` (a flat or ``[1, n]`` sequence, tensor or array of token ids) as a list of ints.

    Raises:
        StandError: text, an empty sequence, or ids that are not non-negative ints (naming ``name``).
    """
    if isinstance(ids, str):
        raise StandError(f"a trace replay takes token ids, not text ({name})")
    if isinstance(ids, (list, tuple)) and not ids:
        raise StandError(f"a trace replay needs a prompt and tokens; {name} is empty")
    try:
        return encode_prompt(None, ids)
    except StandError as error:
        raise StandError(f"trace replay {name}: {error}") from None


def replay_trace(drafter: Drafter | None, prompt: Sequence[int], tokens: Sequence[int],
                 recorded: RecordedTop | None = None, value: ValueRule | None = None) -> ReplayResult:
    """Replay one trace greedily through ``drafter`` on the engine's steps (module docstring).

    Args:
        drafter: the drafter (its memory may be shared with earlier traces); None = plain decoding.
        prompt: the prompt's token ids (at least 1); its last token is the first root.
        tokens: the trace's token ids (at least 1), replayed as the generated output.
        recorded: optional top-k rows along prompt + tokens (``[len(prompt) + len(tokens) - 1, k]``).
        value: the drafter's value rule (a value-sized tree), which sizes each step as a batch of one.

    Returns:
        The :class:`ReplayResult` (``stats.acceptance_length``: ``len(tokens) / steps``).

    Raises:
        StandError: a drafter that is not one, an empty prompt or trace, ids that are not a flat
            sequence of non-negative ints (below the drafter's ``vocab`` where it has one), or recorded
            rows of the wrong length.
    """
    if drafter is not None and not isinstance(drafter, Drafter):
        raise StandError(f"drafter must be a Drafter (stand_runtime.drafters) or None, not {type(drafter).__name__}")
    prompt, tokens = _ids("prompt", prompt), _ids("tokens", tokens)
    sequence = prompt + tokens
    vocab, largest = None if drafter is None else drafter.vocab, max(sequence)
    if vocab is not None and largest >= vocab:
        raise StandError(f"token id {largest} is outside the drafter's vocabulary of {vocab} tokens")
    if recorded is not None and len(recorded.ids) != len(sequence) - 1:
        raise StandError(f"recorded rows cover {len(recorded.ids)} positions, not {len(sequence) - 1}")
    stats = DecodeStats()
    clock = Clock("cpu")
    clock.rows = [stats]
    row = DecodeRow(prompt, drafter, GREEDY, RandomStream.seeded(0), StopRule((), len(tokens)), lap=clock.lap,
                    stats=stats)
    if drafter is not None and len(prompt) > 1:
        positions = range(len(prompt) - 1)
        feed = OneHotFeed(prompt[1:]) if recorded is None else RowsFeed(recorded.ids[: len(prompt) - 1],
                                                                         recorded.probs[: len(prompt) - 1])
        drafter.observe_prompt(prompt, feed, positions)
    learn_rows([row], prompt)
    clock.lap(None)
    allocator = BatchAllocator.for_rule(value)  # a value-sized row sized as a batch of one
    while row.finish_reason is None:
        draft = row.propose() if allocator is None else allocator.allocate([row.propose()])[0]
        row.settle(draft, TraceTarget(draft, sequence, len(row.committed), recorded))
        clock.lap("bookkeeping_s")
    return ReplayResult(row.finish_stats(), len(tokens))
