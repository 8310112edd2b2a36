"""The target model's sampling distribution p, computed by one function for every decoding path.

p is what plain sampling draws from: ``softmax(logits / temperature)``, then top-k, then top-p
(nucleus), renormalised. Temperature 0 means greedy decoding: p is one-hot on the argmax.
Plain decoding (:func:`target_probs`), tree verification (:func:`target_row`, :func:`target_rows`, and
on the device :class:`DeviceRows`), the n-gram store (:func:`top_target_probs`) and recorded
trajectories all sort and cut p with one function, :func:`nucleus`, so the distribution that
speculative sampling preserves is exactly the one plain decoding samples from.

The top-p nucleus (Holtzman et al., 2020, §3.1): :func:`nucleus` cuts it from a partial top-k and sorts
the whole vocabulary only of the rows whose nucleus is wider than the probe; :func:`logits_nucleus` makes
the same cut of rows of logits in C++ (``csrc/nucleus.cpp``: one pass for the maximum, one for the sum
of exponentials, AVX2 where the CPU has it, then a quickselect on mass among the tokens near the
maximum), equal up to float rounding (``tests/runtime/target/test_native_nucleus.py``).
``STAND_NATIVE_NUCLEUS=0`` keeps the torch cut (its own switch: ``STAND_NATIVE`` chooses the store).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple

import numpy as np
import torch

from ..checks import check_int, check_real, env_switch
from ..errors import StandError
from ..limits import MAX_TEMPERATURE, MIN_TEMPERATURE

try:
    from .. import _native
except ImportError:  # not built
    _native = None

MIN_TOP_P = float(np.finfo(np.float32).tiny)
"""Smallest top-p (float32's smallest normal, ~1.2e-38): float32 rounds a smaller one to 0, which
would cut every token."""


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


NUCLEUS_PROBE = 128
"""Tokens :func:`nucleus` sorts first: the nucleus almost always lies inside the top hundred tokens,
and a full sort of a 49k vocabulary row is slow on a CPU (docs/decisions.md)."""


class Nucleus(NamedTuple):
    """The nucleus of every row, most likely token first (what :func:`nucleus` returns).

    Attributes:
        values: ``[..., w]`` p before top-p at the ``w`` probed tokens, zero past the nucleus (not
            renormalised); w = min(vocab, max(:data:`NUCLEUS_PROBE`, at_least)).
        ids: ``[..., w]`` int64 token ids of ``values``.
        wide: ``[...]`` bool, the rows whose nucleus is larger than the probe (their ``values`` miss
            part of it), or None when the probe covers the vocabulary or (``full_sort``) no row is wide.
        full: ``([r, vocab] values, [r, vocab] ids)``: the same for the r wide rows from a full sort
            (None without wide rows or when ``full_sort`` was False).
    """

    values: torch.Tensor
    ids: torch.Tensor
    wide: torch.Tensor | None = None
    full: tuple[torch.Tensor, torch.Tensor] | None = None

    def host_rows(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per row of a ``[n, vocab]`` input: ``(values, ids)`` on the host (float64, int64, sorted, the
        full sort for wide rows), in one transfer per tensor."""
        values, ids = self.values.to("cpu", torch.float64).numpy(), self.ids.cpu().numpy()
        rows = list(zip(values, ids))
        if self.full is not None:
            full_values, full_ids = self.full[0].to("cpu", torch.float64).numpy(), self.full[1].cpu().numpy()
            for j, r in enumerate(self.wide.nonzero().flatten().tolist()):
                rows[r] = (full_values[j], full_ids[j])
        return rows


def _cut(values: torch.Tensor, top_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Zero the sorted ``values`` past the nucleus: a token stays when the mass strictly before it is
    below ``top_p`` (so the first always stays). Returns the cut values and their cumulative sums."""
    cumulative = values.cumsum(dim=-1)
    return values * ((cumulative - values) < top_p), cumulative


def nucleus(scores: torch.Tensor, top_p: float | torch.Tensor, at_least: int = 0,
            probs_of: Callable[[torch.Tensor], torch.Tensor] | None = None, full_sort: bool = True) -> Nucleus:
    """The top-p nucleus of each row: a partial top-k of :data:`NUCLEUS_PROBE` (or ``at_least``) tokens,
    the cumulative cut, and a full sort of only the rows whose nucleus is larger than that probe.

    Args:
        scores: ``[..., vocab]`` p before top-p, or any scores in the same order (logits).
        top_p: nucleus mass; >= 1 keeps every token of positive p. Or a ``[...]`` float tensor, one
            mass per row, each < 1 (vLLM's per-request top-p).
        at_least: probe at least this many tokens (a top-k, the k tokens a caller wants).
        probs_of: maps sorted scores to p before top-p elementwise or row by row (applied to the
            probe and to the full sorts of wide rows); None when ``scores`` are p.
        full_sort: False: leave the wide rows (``wide``, possibly all False) to the caller, ``full`` is
            None, and nothing is read back to the host.

    """
    vocab = scores.shape[-1]
    top, ids = torch.topk(scores, min(max(NUCLEUS_PROBE, at_least), vocab), dim=-1)
    values = top if probs_of is None else probs_of(top)
    per_row = isinstance(top_p, torch.Tensor)
    if not per_row and top_p >= 1.0:  # tokens past the probe have mass when the last probed one has (ties at a top-k)
        wide = values[..., -1] > 0
    else:
        values, cumulative = _cut(values, top_p[..., None] if per_row else top_p)
        wide = cumulative[..., -1] < top_p
    if top.shape[-1] == vocab:
        return Nucleus(values, ids)
    if not full_sort:  # no host sync: the caller reads ``wide`` on the device
        return Nucleus(values, ids, wide)
    if not bool(wide.any()):
        return Nucleus(values, ids)
    rows, row_ids = torch.sort(scores[wide], dim=-1, descending=True)
    rows = rows if probs_of is None else probs_of(rows)
    if per_row or top_p < 1.0:
        rows = _cut(rows, top_p[wide][..., None] if per_row else top_p)[0]
    return Nucleus(values, ids, wide, (rows, row_ids))


NATIVE_NUCLEUS_ENV = "STAND_NATIVE_NUCLEUS"
"""Environment variable: ``0`` keeps the torch cut where the native one would serve."""


def native_nucleus_available() -> bool:
    """True when the extension is built and ``STAND_NATIVE_NUCLEUS`` is not ``0`` (StandError when it
    is set to anything but 0 or 1)."""
    return (env_switch(NATIVE_NUCLEUS_ENV) is not False
            and _native is not None and hasattr(_native, "nucleus_rows"))


class NativeCut(NamedTuple):
    """What :func:`logits_nucleus` found.

    Attributes:
        found: ``Nucleus(values, ids, wide)``: ``values`` ``[rows, w]`` float32 p (the softmax of the
            row) at ``ids`` (int64, most likely first), w = min(:data:`NUCLEUS_PROBE`, vocab), zero past
            the nucleus; ``wide`` ``[rows]`` bool, the rows left to the caller (not finite, or without
            ``mask`` a nucleus of more than w tokens: neither cut nor masked).
        log_total: ``[rows, 1]`` float32 log-sum-exp of each row (0 where skipped or wide).
        mass: ``[rows]`` float32 total p of each nucleus (its first w tokens are in ``found``; with
            ``mask`` a nucleus may hold more).
    """

    found: Nucleus
    log_total: torch.Tensor
    mass: torch.Tensor


def logits_nucleus(logits: torch.Tensor, top_p: torch.Tensor, mask: bool, scale: float = 1.0) -> NativeCut | None:
    """The top-p nucleus of each row of ``scale * logits``, in C++: a token stays when the mass strictly
    before it is below the row's p and its own is positive. Rows with p >= 1 are skipped (values 0,
    not wide, not masked).

    Args:
        logits: ``[rows, vocab]`` float32 CPU logits, contiguous.
        top_p: ``[rows]`` nucleus mass per row.
        mask: set every logit of a row that is cut and not in its nucleus to -inf, in place (a
            nucleus of any size: only rows that are not finite are left wide).
        scale: a positive factor the rows are read with (``1 / temperature``: no scaled copy of the
            logits is made).

    Returns:
        The :class:`NativeCut`, or None when the kernel is not available or the input is not of that
        kind.
    """
    if (not native_nucleus_available() or logits.dim() != 2 or logits.dtype != torch.float32
            or logits.device.type != "cpu" or not logits.is_contiguous() or logits.requires_grad
            or logits.shape[0] == 0):
        return None
    masses = top_p.detach().to("cpu", torch.float32).contiguous()
    values, ids, wide, log_total, mass = _native.nucleus_rows(logits.numpy(), masses.numpy(),
                                                              min(NUCLEUS_PROBE, logits.shape[1]), mask, float(scale))
    found = Nucleus(torch.from_numpy(values), torch.from_numpy(ids), torch.from_numpy(wide))
    return NativeCut(found, torch.from_numpy(log_total)[:, None], torch.from_numpy(mass))


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

    Every token not in ``ids`` has probability 0 under p.
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
        [t] bool)``, from the ``[t, m]`` grid (a node's children and its nucleus: tens at most)."""
        grid = tokens[:, None] == self.ids[None, :]
        if not grid.shape[1]:  # no ids: no token is there
            return np.zeros(len(tokens), dtype=np.int64), np.zeros(len(tokens), dtype=bool)
        return grid.argmax(axis=1), grid.any(axis=1)

    def sample(self, uniform: float) -> int:
        """A token drawn from p by inverting its CDF at ``uniform`` (see :func:`sample_index`)."""
        return self.token(sample_index(self.probs, uniform))

    def sample_replaced(self, tokens: np.ndarray, weights: list[float], uniform: float) -> int:
        """A token drawn from p with the entries of ``tokens`` replaced by ``weights`` (a residual:
        unnormalised; tokens outside the nucleus must get weight 0)."""
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
    """:func:`target_row` for every row of ``[n, vocab]`` logits, in one transfer to the host. Torch
    only: p here must be :func:`target_probs`'s to the last bit (the native cut differs by rounding)."""
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
    """p at one node (``[vocab]`` raw logits, any float dtype and device; ``params`` not greedy) as a
    :class:`TargetRow` on the host: the nucleus only when top-p < 1 or top-k > 0; the probabilities
    :func:`target_probs` gives, up to the order of summation."""
    return target_rows(logits[None], params)[0]


def _native_probe(logits: torch.Tensor, params: SamplingParams, k: int = 0) -> Nucleus | None:
    """The native cut of p's nucleus (:func:`logits_nucleus`) for CPU logits, top-p < 1, no
    top-k and ``k`` probed tokens at most, else None: for the store's feed only (what the store learns
    never decides what is accepted)."""
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
    """The k most likely tokens of p and their probabilities, without materialising p: equal to
    ``torch.topk(target_probs(logits, params), k)`` up to float rounding, each row one partial top-k
    and one log-sum-exp, ``rows_per_batch`` rows at a time (bounded memory); rows whose nucleus is
    larger than the probe fall back to :func:`target_probs`.

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


class DeviceRows:
    """p of every row of ``[R, vocab]`` logits, kept on their device, as :func:`target_rows` holds it
    on the host (the same :func:`tempered_probs` and :func:`nucleus`, normalised in float64, in the
    same token order), with no host synchronisation: the batched verifier's p. Rows whose nucleus is
    wider than the probe are flagged, not sorted in full.

    Args:
        logits: ``[R, vocab]`` raw target logits (any float dtype and device).
        params: the sampling parameters (not greedy).

    Attributes:
        values: ``[R, W]`` p in :class:`TargetRow` order: the normalised
            nucleus, most likely first (float64, zero-padded), or for a dense p (top-p 1, no top-k) the
            float32 softmax over the vocabulary.
        ids: ``[R, W]`` int64 token ids of ``values`` (None: dense, the vocabulary order).
        total: ``[R]`` float64 sum of p (NaN for non-finite logits).
        wide: ``[R]`` bool, the nucleus is wider than the probe, so ``values`` are wrong there; or None.
    """

    def __init__(self, logits: torch.Tensor, params: SamplingParams) -> None:
        probs = tempered_probs(logits, params)
        if params.top_p >= 1.0 and not 0 < params.top_k < probs.shape[-1]:
            self.values, self.ids, self.wide = probs, None, None
            self.total = probs.sum(-1, dtype=torch.float64)
            return
        cut = nucleus(probs, params.top_p, params.top_k, full_sort=False)
        values = cut.values.double()
        self.values = values / values.sum(-1, keepdim=True)
        self.ids, self.wide = cut.ids, cut.wide
        self.total = self.values.sum(-1)
        self._sorted = torch.sort(self.ids, dim=-1)

    def flags(self) -> torch.Tensor:
        """``[R]`` int64: 1 where p is not finite, plus 2 where the nucleus is wider than the probe."""
        return (~torch.isfinite(self.total)).long() + (0 if self.wide is None else 2 * self.wide.long())

    def at(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """p at ``tokens`` (``[R, K]`` int64, -1 = none): ``[R, K]`` float64, and the column of each
        token in ``values`` (``W`` = none: padding, or a sparse row without the token)."""
        valid, width = tokens >= 0, self.values.shape[-1]
        if self.ids is None:
            columns = tokens.clamp(min=0)
            return (torch.where(valid, self.values.gather(1, columns).double(), 0.0),
                    torch.where(valid, columns, width))
        sorted_ids, order = self._sorted
        where = torch.searchsorted(sorted_ids, tokens).clamp(max=width - 1)
        columns = order.gather(1, where)
        hit = valid & (sorted_ids.gather(1, where) == tokens)
        probs = torch.where(hit, self.values.gather(1, columns), 0.0)
        return probs, torch.where(probs > 0, columns, width)


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
