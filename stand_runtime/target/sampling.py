"""The target model's sampling distribution p, computed by one function for every decoding path.

p is what plain sampling draws from: ``softmax(logits / temperature)``, then top-k, then top-p
(nucleus), renormalised. Temperature 0 means greedy decoding: p is one-hot on the argmax.
Plain decoding (:func:`target_probs`), tree verification (:func:`target_row`, :func:`target_rows`),
the n-gram store (:func:`top_target_probs`) and recorded trajectories all sort and cut p with one
function, :func:`nucleus`, so the distribution that speculative sampling preserves is exactly the
one plain decoding samples from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from ..checks import check_int, check_real
from ..errors import StandError
from ..limits import MAX_TEMPERATURE, MIN_TEMPERATURE  # noqa: F401 - re-exported
from .nucleus import NUCLEUS_PROBE, Nucleus, logits_nucleus, nucleus  # noqa: F401 - re-exported

MIN_TOP_P = float(np.finfo(np.float32).tiny)
"""Smallest top-p (float32's smallest normal, ~1.2e-38): float32 rounds a smaller one to 0, which
would cut every token. Any top-p up to the top token's probability keeps that token alone."""

@dataclass(frozen=True)
class SamplingParams:
    """How the target model is sampled.

    Attributes:
        temperature: softmax temperature, 0 or in [MIN_TEMPERATURE, MAX_TEMPERATURE]; 0 selects greedy
            decoding (one-hot p on the argmax).
        top_p: nucleus mass in (0, 1]; 1 disables top-p.
        top_k: keep the k most likely tokens; 0 disables top-k.

    Raises:
        StandError: a parameter is out of range.
    """

    temperature: float = 0.6
    top_p: float = 0.95
    top_k: int = 0

    def __post_init__(self) -> None:
        for name in ("temperature", "top_p"):  # numpy scalars become Python numbers
            object.__setattr__(self, name, check_real(name, getattr(self, name)))
        object.__setattr__(self, "top_k", check_int("top_k", self.top_k))
        if self.temperature < 0.0:
            raise StandError(f"temperature must be >= 0, got {self.temperature}")
        if 0.0 < self.temperature < MIN_TEMPERATURE:
            raise StandError(f"temperature must be 0 (greedy) or >= {MIN_TEMPERATURE:g} (logits / temperature would "
                             f"overflow), got {self.temperature:g}")
        if self.temperature > MAX_TEMPERATURE:
            raise StandError(f"temperature must be <= {MAX_TEMPERATURE:g} (p is uniform over the kept tokens long "
                             f"before), got {self.temperature:g}")
        if not (0.0 < self.top_p <= 1.0):
            raise StandError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_p < MIN_TOP_P:
            raise StandError(f"top_p must be >= {MIN_TOP_P!r} (float32's smallest normal: it rounds a smaller one to 0; "
                             f"any top_p below the top token's probability keeps that token alone), got {self.top_p!r}")
        if self.top_k < 0:
            raise StandError(f"top_k must be >= 0, got {self.top_k}")

    @property
    def greedy(self) -> bool:
        """True when p is one-hot on the argmax (temperature 0)."""
        return self.temperature == 0.0


def tempered_probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """``softmax(logits / temperature)`` with top-k applied: p before top-p. ``[..., vocab]`` float32."""
    scaled = logits.float() / params.temperature
    if params.top_k > 0 and params.top_k < scaled.shape[-1]:
        kth = torch.topk(scaled, params.top_k, dim=-1).values[..., -1:]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    return torch.softmax(scaled, dim=-1)


def target_probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """The target sampling distribution p for each row of ``logits``.

    Args:
        logits: ``[..., vocab]`` raw target-model logits (any float dtype, any device).
        params: temperature, top-k and top-p.

    Returns:
        ``[..., vocab]`` float32 probabilities after temperature, top-k and top-p, each row summing
        to 1. Greedy (temperature 0): one-hot on ``argmax(logits)`` (the first index on ties).
    """
    logits = logits.float()
    if params.greedy:
        probs = torch.zeros_like(logits)
        probs.scatter_(-1, logits.argmax(dim=-1, keepdim=True), 1.0)
        return probs
    probs = tempered_probs(logits, params)
    if params.top_p < 1.0:
        cut = nucleus(probs, params.top_p)
        kept = torch.zeros_like(probs).scatter_(-1, cut.ids, cut.values)
        if cut.wide is not None:
            kept[cut.wide] = torch.zeros_like(cut.full[0]).scatter_(-1, cut.full[1], cut.full[0])
        probs = kept / kept.sum(dim=-1, keepdim=True)
    return probs


@dataclass(frozen=True, eq=False)
class TargetRow:
    """p at one draft node, on the host: its nucleus (sparse) or the whole vocabulary (dense).

    Attributes:
        probs: ``[m]`` float64 probabilities (summing to 1 up to float32 rounding).
        ids: ``[m]`` int64 token ids of ``probs``, most likely first; None when ``probs`` is the dense
            ``[vocab]`` row (top-p 1 and no top-k: every token has mass).

    Every token not in ``ids`` has probability 0 under p. :func:`target_row` builds it with the same
    arithmetic as :func:`target_probs`.
    """

    probs: np.ndarray
    ids: np.ndarray | None = None

    @classmethod
    def dense(cls, probs: np.ndarray) -> "TargetRow":
        """A row from a dense ``[vocab]`` probability vector."""
        return cls(np.asarray(probs, dtype=np.float64))

    @property
    def total(self) -> float:
        """Sum of the probabilities (1 up to rounding; NaN or inf when the logits were not finite)."""
        return float(self.probs.sum())

    def top(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The (at most) k most likely tokens: ``([m] int64 ids, [m] float64 probs)``, m <= k."""
        if self.ids is not None:
            return self.ids[:k], self.probs[:k]
        order = np.argsort(-self.probs, kind="stable")[:k]
        return order, self.probs[order]

    def token(self, index: int) -> int:
        """The token id at position ``index`` of ``probs``."""
        return int(index if self.ids is None else self.ids[index])

    def at(self, tokens: np.ndarray) -> np.ndarray:
        """``[len(tokens)]`` float64 p at ``tokens`` (0 off the nucleus)."""
        tokens = np.asarray(tokens, dtype=np.int64)
        if self.ids is None:
            return self.probs[tokens]
        where, found = self._positions(tokens)
        out = np.zeros(len(tokens))
        out[found] = self.probs[where[found]]
        return out

    def _positions(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each token's first index in ``ids`` (0 where absent) and whether it is there: ``([t] int64,
        [t] bool)`` (one comparison of the ``[t, m]`` grid: t, m are a node's drafted children and its
        nucleus, tens at most)."""
        grid = tokens[:, None] == self.ids[None, :]
        if not grid.shape[1]:  # no ids: no token is there
            return np.zeros(len(tokens), dtype=np.int64), np.zeros(len(tokens), dtype=bool)
        return grid.argmax(axis=1), grid.any(axis=1)

    def sample(self, uniform: float) -> int:
        """A token drawn from p by inverting its CDF at ``uniform`` (see :func:`sample_index`)."""
        return self.token(sample_index(self.probs, uniform))

    def sample_replaced(self, tokens: np.ndarray, weights: list[float], uniform: float) -> int:
        """A token drawn from p with the entries of ``tokens`` replaced by ``weights`` (a residual
        distribution: unnormalised weights, p's own elsewhere).

        Tokens outside the nucleus must get weight 0 (a residual never exceeds p there)."""
        probs = self.probs.copy()
        tokens = np.asarray(tokens, dtype=np.int64)
        if self.ids is None:
            probs[tokens] = weights
        else:
            where, found = self._positions(tokens)
            probs[where[found]] = np.asarray(weights, dtype=np.float64)[found]
        return self.token(sample_index(probs, uniform))


_NOT_FINITE = TargetRow(np.array([np.nan]), np.array([0]))
"""The row of non-finite logits: its total is NaN, which verification refuses."""


def target_rows(logits: torch.Tensor, params: SamplingParams) -> list[TargetRow]:
    """:func:`target_row` for every row of ``[n, vocab]`` logits in one batch (one transfer to the
    host: the GPU path; on a CPU computing only the visited rows is cheaper). Torch only: p here must
    be :func:`target_probs`'s to the last bit (the native cut differs by float rounding)."""
    probs = tempered_probs(logits, params)
    if params.top_p >= 1.0 and not 0 < params.top_k < probs.shape[-1]:
        return [TargetRow(row) for row in probs.to("cpu", torch.float64).numpy()]
    rows = []
    for values, ids in nucleus(probs, params.top_p, params.top_k).host_rows():
        if not np.isfinite(values[0]):  # NaN or inf logits make the whole row NaN
            rows.append(_NOT_FINITE)
            continue
        size = int((values > 0).sum())
        rows.append(TargetRow(values[:size] / values[:size].sum(), ids[:size]))
    return rows


def target_row(logits: torch.Tensor, params: SamplingParams) -> TargetRow:
    """p at one node as a :class:`TargetRow`: the nucleus only (a partial top-k, no full sort and no
    full-vocabulary copy to the host) when top-p < 1 or top-k > 0.

    Args:
        logits: ``[vocab]`` raw target logits of the node (any float dtype, any device).
        params: the sampling parameters (not greedy).

    Returns:
        The row on the host; its probabilities are those :func:`target_probs` gives, up to the
        order of summation.
    """
    return target_rows(logits[None], params)[0]


def _native_probe(logits: torch.Tensor, params: SamplingParams, k: int = 0) -> Nucleus | None:
    """The native cut of p's nucleus (:func:`~.nucleus.logits_nucleus`) for CPU logits, top-p < 1, no
    top-k and ``k`` probed tokens at most; None where it does not apply (or is not built). For the
    store's feed only (:func:`top_target_probs`): it equals the torch cut up to float rounding, and
    what the store learns never decides what is accepted."""
    vocab = logits.shape[-1]
    if (params.greedy or params.top_p >= 1.0 or 0 < params.top_k < vocab or logits.device.type != "cpu"
            or k > min(NUCLEUS_PROBE, vocab)):
        return None
    rows = logits if logits.dtype == torch.float32 and logits.is_contiguous() else logits.float().contiguous()
    # read at 1 / temperature in C++: no scaled copy of a prompt's logits (page faults)
    cut = logits_nucleus(rows, torch.full((rows.shape[0],), params.top_p), mask=False, scale=1.0 / params.temperature)
    return None if cut is None else cut.found


def top_target_probs(logits: torch.Tensor, params: SamplingParams, k: int, rows_per_batch: int = 128
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """The k most likely tokens of p and their probabilities, without materialising p.

    Equal to ``torch.topk(target_probs(logits, params), k)`` up to float rounding, but each row
    costs one partial top-k and one log-sum-exp instead of several full-vocabulary copies, and rows
    are processed ``rows_per_batch`` at a time: a long prompt's prefill feeds the store in bounded
    memory. Rows whose nucleus is larger than the partial top-k fall back to :func:`target_probs`.

    Args:
        logits: ``[n, vocab]`` raw target logits (any float dtype, any device).
        params: the sampling parameters (not greedy: a greedy p is one-hot).
        k: how many tokens per row (``k <= vocab``).
        rows_per_batch: rows per internal batch (bounds the temporary memory).

    Returns:
        ``([n, k] int64 ids, [n, k] float32 probabilities)``, most likely first; probabilities of
        tokens outside the nucleus are 0.
    """
    out_ids, out_probs = [], []
    for start in range(0, logits.shape[0], rows_per_batch):
        cut = _native_probe(logits[start : start + rows_per_batch], params, k)
        if cut is None:
            chunk = logits[start : start + rows_per_batch].float() / params.temperature
            cut = nucleus(chunk, params.top_p, max(k, params.top_k), _probs_of_sorted_logits(chunk, params),
                          full_sort=False)
        probs, ids = cut.values, cut.ids
        if params.top_p < 1.0:
            probs = probs / probs.sum(dim=-1, keepdim=True)
        if cut.wide is not None and params.top_p < 1.0 and bool(cut.wide.any()):  # beyond the probe: exact
            wide = cut.wide.nonzero().flatten()
            full = torch.topk(target_probs(logits[start + wide], params), probs.shape[-1], dim=-1)
            probs[wide], ids[wide] = full.values, full.indices
        out_ids.append(ids[:, :k])
        out_probs.append(probs[:, :k])
    return torch.cat(out_ids), torch.cat(out_probs)


def _probs_of_sorted_logits(scaled: torch.Tensor, params: SamplingParams) -> Callable[[torch.Tensor], torch.Tensor]:
    """p before top-p at the probed tokens of ``scaled`` (``[n, vocab]`` logits / temperature) from
    their sorted values alone: a softmax over the first top-k, else ``exp(x - logsumexp(row))``."""
    top_k = params.top_k
    if 0 < top_k < scaled.shape[-1]:
        def probs_of(top: torch.Tensor) -> torch.Tensor:
            probs = torch.zeros_like(top)
            probs[:, :top_k] = torch.softmax(top[:, :top_k], dim=-1)
            return probs
        return probs_of
    log_total = torch.logsumexp(scaled, dim=-1, keepdim=True)
    return lambda top: torch.exp(top - log_total)


def sample_index(probs: np.ndarray, uniform: float) -> int:
    """Draw an index from an unnormalised distribution by inverting its CDF at ``uniform``.

    Args:
        probs: ``[n]`` non-negative weights (any float dtype) with a positive sum.
        uniform: a U[0, 1) draw (from :class:`stand_runtime.randomness.RandomStream`).

    Returns:
        The index i with ``cdf[i-1] <= uniform * total < cdf[i]``; never an index of zero weight.
    """
    cdf = np.cumsum(probs, dtype=np.float64)
    index = int(np.searchsorted(cdf, uniform * cdf[-1], side="right"))
    if index >= len(cdf):  # uniform * total rounded up to the total
        index = int(np.flatnonzero(probs)[-1])
    return index
