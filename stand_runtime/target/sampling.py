"""The target model's sampling distribution p, computed by one function for every decoding path.

p is what plain sampling draws from: ``softmax(logits / temperature)``, then top-k, then top-p
(nucleus), renormalised. Temperature 0 means greedy decoding: p is one-hot on the argmax.
Plain decoding, tree verification and the n-gram store all call :func:`target_probs`, so the
distribution that speculative sampling preserves is exactly the one plain decoding samples from.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..checks import check_int, check_real
from ..errors import StandError

MIN_TEMPERATURE = 1e-6
"""Smallest positive temperature: below it logits / temperature overflow float32."""

# A full sort of a 49k vocabulary row is slow on a CPU; the nucleus almost always lies inside the
# top few hundred tokens, so top-p first tries a partial top-k of this size and falls back to a
# full sort only when the nucleus is larger.
_NUCLEUS_PROBE = 512


@dataclass(frozen=True)
class SamplingParams:
    """How the target model is sampled.

    Attributes:
        temperature: softmax temperature; 0 selects greedy decoding (one-hot p on the argmax).
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
        if not (0.0 < self.top_p <= 1.0):
            raise StandError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise StandError(f"top_k must be >= 0, got {self.top_k}")

    @property
    def greedy(self) -> bool:
        """True when p is one-hot on the argmax (temperature 0)."""
        return self.temperature == 0.0


def resolve_sampling(sampling: SamplingParams | None = None, temperature: float | None = None,
                     top_p: float | None = None, top_k: int | None = None) -> SamplingParams:
    """The sampling parameters of a call that takes either a :class:`SamplingParams` or keywords.

    Keywords left at None take the :class:`SamplingParams` defaults (0.6, 0.95, 0).

    Raises:
        StandError: both forms given, or a parameter out of range.
    """
    keywords = {"temperature": temperature, "top_p": top_p, "top_k": top_k}
    given = {k: v for k, v in keywords.items() if v is not None}
    if sampling is not None:
        if given:
            raise StandError(f"give sampling or {', '.join(given)}, not both")
        if not isinstance(sampling, SamplingParams):
            raise StandError(f"sampling must be a SamplingParams, not {type(sampling).__name__}")
        return sampling
    return SamplingParams(**given)


def _tempered(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
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
    probs = _tempered(logits, params)
    if params.top_p < 1.0:
        probs = _nucleus(probs, params.top_p)
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
        out = np.zeros(len(tokens))
        for i, token in enumerate(tokens.tolist()):
            where = np.flatnonzero(self.ids == token)
            if len(where):
                out[i] = self.probs[where[0]]
        return out

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
            for token, weight in zip(tokens.tolist(), weights):
                where = np.flatnonzero(self.ids == token)
                if len(where):
                    probs[where[0]] = weight
        return self.token(sample_index(probs, uniform))


_NOT_FINITE = TargetRow(np.array([np.nan]), np.array([0]))
"""The row of non-finite logits: its total is NaN, which verification refuses."""


def target_rows(logits: torch.Tensor, params: SamplingParams) -> list[TargetRow]:
    """:func:`target_row` for every row of ``[n, vocab]`` logits in one batch (one transfer to the
    host: the GPU path; on a CPU computing only the visited rows is cheaper)."""
    probs = _tempered(logits, params)
    if params.top_p >= 1.0 and not 0 < params.top_k < probs.shape[-1]:
        return [TargetRow(row) for row in probs.to("cpu", torch.float64).numpy()]
    probe = min(max(_NUCLEUS_PROBE, params.top_k), probs.shape[-1])
    values, ids = torch.topk(probs, probe, dim=-1)
    wide = (values.sum(dim=-1) < params.top_p).tolist() if params.top_p < 1.0 and probe < probs.shape[-1] else []
    if params.top_p < 1.0:
        values = values * ((values.cumsum(dim=-1) - values) < params.top_p)
    values, ids = values.to("cpu", torch.float64).numpy(), ids.cpu().numpy()
    rows = []
    for r in range(len(values)):
        if (wide and wide[r]) or not np.isfinite(values[r, 0]):  # the nucleus is wider than the probe
            rows.append(target_row(logits[r], params))  # (or the row is not finite): this row alone
            continue
        size = int((values[r] > 0).sum())
        rows.append(TargetRow(values[r, :size] / values[r, :size].sum(), ids[r, :size]))
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
    probs = _tempered(logits[None], params)
    if params.top_p >= 1.0 and not 0 < params.top_k < probs.shape[-1]:
        return TargetRow(probs[0].to("cpu", torch.float64).numpy())
    probe = min(max(_NUCLEUS_PROBE, params.top_k), probs.shape[-1])
    values, ids = torch.topk(probs, probe, dim=-1)
    reach = float(values[0].sum())
    if not np.isfinite(reach):
        return _NOT_FINITE
    if params.top_p < 1.0 and probe < probs.shape[-1] and reach < params.top_p:
        values, ids = torch.sort(probs, dim=-1, descending=True)  # the nucleus is wider than the probe
    values, ids = values[0], ids[0]
    if params.top_p < 1.0:
        values = values * ((values.cumsum(dim=-1) - values) < params.top_p)
    size = int((values > 0).sum())
    kept = values[:size].to("cpu", torch.float64).numpy()
    return TargetRow(kept / kept.sum(), ids[:size].cpu().numpy())


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
    vocab = logits.shape[-1]
    probe = min(max(_NUCLEUS_PROBE, k, params.top_k), vocab)
    out_ids, out_probs = [], []
    for start in range(0, logits.shape[0], rows_per_batch):
        chunk = logits[start : start + rows_per_batch].float() / params.temperature
        top, ids = torch.topk(chunk, probe, dim=-1)
        if 0 < params.top_k < vocab:
            probs = torch.zeros_like(top)
            probs[:, : params.top_k] = torch.softmax(top[:, : params.top_k], dim=-1)
        else:
            probs = torch.exp(top - torch.logsumexp(chunk, dim=-1, keepdim=True))
        if params.top_p < 1.0:
            cumulative = probs.cumsum(dim=-1)
            probs = probs * ((cumulative - probs) < params.top_p)
            probs = probs / probs.sum(dim=-1, keepdim=True)
            wide = (cumulative[:, -1] < params.top_p).nonzero().flatten()
            if len(wide) and probs.shape[-1] < vocab:  # nucleus beyond the probe: exact, row by row
                full = torch.topk(target_probs(logits[start + wide], params), probs.shape[-1], dim=-1)
                probs[wide], ids[wide] = full.values, full.indices
        out_ids.append(ids[:, :k])
        out_probs.append(probs[:, :k])
    return torch.cat(out_ids), torch.cat(out_probs)


def _nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keep the smallest set of most likely tokens whose mass reaches ``top_p``; renormalise.

    ``probs``: ``[..., vocab]`` float32 rows summing to 1. A token is kept when the mass of the
    tokens strictly more likely than it (in sorted order) is below ``top_p``; the first is always kept.
    """
    vocab = probs.shape[-1]
    probe = min(_NUCLEUS_PROBE, vocab)
    sorted_probs, sorted_ids = torch.topk(probs, probe, dim=-1)
    cumulative = sorted_probs.cumsum(dim=-1)
    kept = torch.zeros_like(probs)
    kept.scatter_(-1, sorted_ids, sorted_probs * ((cumulative - sorted_probs) < top_p))
    wide = cumulative[..., -1] < top_p  # rows whose nucleus is larger than the probe: a full sort
    if probe < vocab and bool(wide.any()):
        rows = probs[wide]
        sorted_probs, sorted_ids = torch.sort(rows, dim=-1, descending=True)
        cumulative = sorted_probs.cumsum(dim=-1)
        full = torch.zeros_like(rows)
        full.scatter_(-1, sorted_ids, sorted_probs * ((cumulative - sorted_probs) < top_p))
        kept[wide] = full
    return kept / kept.sum(dim=-1, keepdim=True)


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
