"""What a drafter learns from: the target's rows of one forward, as top-k (ids, probabilities).

Drafters learn only from what the target computed (docs/algorithms.md §2.4). Every engine hands them the same
kind of object, a *feed*, so that a model's forward and a recorded trace (:mod:`stand_runtime.engine.trace_replay`)
feed a drafter through one method:

- :class:`LogitsFeed`: the target's logits of a forward (prefill chunk or draft tree); every row
  is observed, and its top-k are those of p (or of any distribution the drafter asks for);
- :class:`ProbsFeed`: p already computed for every row (plain sampling's), its top-k by one ``torch.topk``;
- a recording (:class:`OneHotFeed`, :class:`stand_runtime.engine.trace_replay.TraceTarget`): only the
  next token at each observed position is known (a one-hot p, ``one_hot`` True), or the top-k a
  recording kept.

What STAND's n-gram store records of a feed is defined once, here: :func:`store_observation` (the top
:data:`STORE_TOP_K` of p; for greedy decoding of the softmax), and :func:`feed_store` merges it into a
store at positions of a token sequence. The HF drafter, the vLLM proposer and the recording of
trajectories for calibration all go through it.

Rows are never materialised as ``[n, vocab]`` tensors for a recording: a replay of 500k tokens
feeds its drafters at a few µs per row.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, Sequence

import numpy as np
import torch

from ..errors import StandError
from ..target.sampling import SamplingParams, TargetRow, target_probs, top_target_probs

if TYPE_CHECKING:
    from ..store.ngram_store import NGramStore

STORE_TOP_K = 10
"""Ids the store keeps per context (the paper's k)."""

# Greedy decoding has a one-hot p, which would leave one token per context in the store; the store
# then records the softmax of the logits instead (any q keeps verification lossless).
_GREEDY_STORE_PARAMS = SamplingParams(temperature=1.0, top_p=1.0, top_k=0)


def store_params(params: SamplingParams) -> SamplingParams:
    """The distribution the n-gram store records: p itself, or for greedy decoding the softmax."""
    return _GREEDY_STORE_PARAMS if params.greedy else params


class TargetFeed(Protocol):
    """The target's rows of one forward, as a drafter reads them.

    Attributes:
        one_hot: True when the rows are a recording's next tokens (a one-hot p) rather than the
            target's distribution: a drafter that wants the target's top-k (Token Recycling) then
            learns the observed successor instead.
    """

    one_hot: bool

    def observed(self, accepted: Sequence[int]) -> list[int]:
        """The draft positions whose rows this feed holds, given the accepted positions: every
        forwarded node for a model's forward; the committed path (root + ``accepted``) for a recording."""

    def top(self, positions: Sequence[int], k: int, params: SamplingParams) -> tuple[np.ndarray, np.ndarray]:
        """Top-k of each observed row: ``([len(positions), k'] int64 ids, [len(positions), k'] float64
        probs)`` with ``k' <= k``, most likely first, padded with probability 0 (ids distinct per row).
        ``params`` is the distribution a drafter records (p, or the softmax for greedy decoding); a
        recording ignores it."""


class LogitsFeed:
    """A feed over the target's logits of one forward.

    Args:
        logits: ``[n, vocab]`` raw target logits (any float dtype and device); row i predicts the
            token after position i.
        params: the target sampling distribution p.
        rows: p rows already computed (:class:`stand_runtime.target.sampling.TargetRow`, by row), reused
            when a drafter asks for p itself.
        source: where the logits come from, for the error :meth:`top` raises when the rows it computes
            are not finite (None: no check; a prompt's prefill names its positions, so a drafter never
            learns NaN, and only the rows a drafter reads are checked).
    """

    one_hot = False

    def __init__(self, logits: torch.Tensor, params: SamplingParams, rows: dict[int, TargetRow] | None = None,
                 source: str | None = None) -> None:
        self.logits = logits
        self.params = params
        self.rows: dict[int, TargetRow] = {} if rows is None else rows
        self.source = source

    def observed(self, accepted: Sequence[int]) -> list[int]:
        return list(range(self.logits.shape[0]))

    def top(self, positions: Sequence[int], k: int, params: SamplingParams) -> tuple[np.ndarray, np.ndarray]:
        """See :meth:`TargetFeed.top`: rows verification already computed are reused when ``params``
        is p (and not greedy); the others come from one batched :func:`top_target_probs`.

        Raises:
            StandError: with a ``source``, the rows computed are not finite (NaN or inf logits).
        """
        ids, probs = self._top(list(positions), k, params)
        if self.source is not None and not np.isfinite(probs).all():
            raise StandError(f"the target's logits are not finite (NaN or inf) in {self.source}")
        return ids, probs

    def _top(self, positions: list[int], k: int, params: SamplingParams) -> tuple[np.ndarray, np.ndarray]:
        n, k = len(positions), min(k, self.logits.shape[-1])
        if params.top_p >= 1.0 and params.top_k == 0 and not params.greedy:  # no nucleus: one partial top-k
            logits = self.logits[positions].float() / params.temperature
            values, top_ids = torch.topk(logits, k, dim=-1)
            top_probs = torch.exp(values - torch.logsumexp(logits, dim=-1, keepdim=True))
            return top_ids.cpu().numpy(), top_probs.cpu().double().numpy()
        ids = np.zeros((n, k), dtype=np.int64)
        probs = np.zeros((n, k), dtype=np.float64)
        reuse = params == self.params and not params.greedy
        missing = []
        for i, position in enumerate(positions):
            row = self.rows.get(position) if reuse else None
            if row is None:
                missing.append(i)
                continue
            top_ids, top_probs = row.top(k)
            ids[i, : len(top_ids)], probs[i, : len(top_probs)] = top_ids, top_probs
        if missing:
            chosen = [positions[i] for i in missing]
            whole = len(chosen) == self.logits.shape[0] and chosen == list(range(len(chosen)))
            top_ids, top_probs = top_target_probs(self.logits if whole else self.logits[chosen], params, k)
            ids[missing], probs[missing] = top_ids.cpu().numpy(), top_probs.cpu().double().numpy()
        return ids, probs


class ProbsFeed:
    """A feed over p already computed for every row of a forward (plain sampling computes it anyway).

    Args:
        logits: ``[n, vocab]`` float CPU logits; row i predicts the token after position i.
        params: the target sampling distribution p.
        probs: ``[n, vocab]`` p of every row (``target_probs(logits, params)``), reused when a drafter
            asks for p itself.
    """

    one_hot = False

    def __init__(self, logits: torch.Tensor, params: SamplingParams, probs: torch.Tensor) -> None:
        self.logits, self.params, self.probs = logits, params, probs

    def observed(self, accepted: Sequence[int]) -> list[int]:
        return list(range(self.logits.shape[0]))

    def top(self, positions: Sequence[int], k: int, params: SamplingParams) -> tuple[np.ndarray, np.ndarray]:
        """See :meth:`TargetFeed.top`: one ``torch.topk`` of p (or of the distribution asked for) over the rows."""
        positions = list(positions)
        source = self.probs if params == self.params else target_probs(self.logits, params)
        if positions != list(range(source.shape[0])):
            source = source[positions]
        top = torch.topk(source, k, dim=-1)
        return top.indices.numpy(), top.values.double().numpy()


class OneHotFeed:
    """A recording's rows: the token that followed each position, p one-hot on it.

    Args:
        next_tokens: per row, the token observed next (row i is position i of the feed).
    """

    one_hot = True

    def __init__(self, next_tokens: Sequence[int]) -> None:
        self.next_tokens = list(next_tokens)

    def observed(self, accepted: Sequence[int]) -> list[int]:
        return list(range(len(self.next_tokens)))

    def top(self, positions: Sequence[int], k: int, params: SamplingParams) -> tuple[np.ndarray, np.ndarray]:
        return one_hot_rows([self.next_tokens[p] for p in positions], k)


class RowsFeed:
    """A recording's top-k rows (e.g. :class:`stand_runtime.RecordedDistributions`' store rows).

    Args:
        ids: ``[n, k]`` int64 top ids per row.
        probs: ``[n, k]`` float64 their probabilities (padding at probability 0).
    """

    one_hot = False

    def __init__(self, ids: np.ndarray, probs: np.ndarray) -> None:
        self.ids, self.probs = ids, probs

    def observed(self, accepted: Sequence[int]) -> list[int]:
        return list(range(len(self.ids)))

    def top(self, positions: Sequence[int], k: int, params: SamplingParams) -> tuple[np.ndarray, np.ndarray]:
        positions = list(positions)
        return self.ids[positions, :k], self.probs[positions, :k]


def one_hot_rows(tokens: Sequence[int], k: int) -> tuple[np.ndarray, np.ndarray]:
    """``([n, 1] int64, [n, 1] float64)`` rows: ``tokens[i]`` at probability 1 (the only column a
    one-hot row has, whatever ``k`` >= 1)."""
    return np.asarray(tokens, dtype=np.int64).reshape(-1, 1), np.ones((len(tokens), 1), dtype=np.float64)


def store_observation(feed: TargetFeed, rows: Sequence[int], params: SamplingParams) -> tuple[np.ndarray, np.ndarray]:
    """What the n-gram store records of ``rows`` of ``feed`` for a request sampled with ``params``:
    the top :data:`STORE_TOP_K` of p (for greedy decoding of the softmax, :func:`store_params`), as
    ``([len(rows), k'] int64 ids, [len(rows), k'] float64 probs)`` (:meth:`TargetFeed.top`)."""
    return feed.top(rows, STORE_TOP_K, store_params(params))


def feed_store(store: NGramStore, tokens: Sequence[int], positions: Sequence[int], feed: TargetFeed,
               rows: Sequence[int], params: SamplingParams) -> None:
    """Merge the store's observation (:func:`store_observation`) of ``rows`` of ``feed`` into ``store``:
    row ``rows[r]`` is p of the token after ``tokens[: positions[r] + 1]``, fed in that order
    (:meth:`stand_runtime.store.ngram_store.NGramStore.update_sequence`)."""
    ids, probs = store_observation(feed, rows, params)
    store.update_sequence(tokens, positions, ids, probs)
