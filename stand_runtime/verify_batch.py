"""Batched verification: every row's draft tree verified with tensor operations on the logits' device.

The rule is :mod:`stand_runtime.verify`'s (the tested reference; docs/algorithms.md §4.7), computed for
all rows of a batch at once instead of walking each tree node by node on the host:

1. **outcomes**: for every node with children, in every row, the outcome the walk would draw there
   (child i accepted, or none): greedy, the first child (drawing order) whose token is the argmax;
   drafter-invariant, the first whose token is the Gumbel-max token (each row's position noise, on the
   device: :func:`stand_runtime.randomness.position_gumbel`); recursive rejection,
   :func:`stand_runtime.verify.acceptance_chain` run stage by stage over all nodes in
   parallel (children padded to the widest node; stochastic, deterministic and copied stages, the
   ``EMPTY_RESIDUAL`` rule), then one inverse-CDF draw per node with the uniform its depth would get;
2. **walk**: a node is on the accepted path when every edge from the root to it is its parent's
   outcome (the ancestor masks); per row the deepest such node ends the path;
3. **emit**: greedy (drafter-invariant), the argmax (the Gumbel-max token) there; recursive rejection,
   a sample of p there (bonus) or of the node's residual (recovered), in the order :class:`stand_runtime.target.sampling.TargetRow` holds p.

A node's outcome depends only on its own p and q, so computing it for nodes the walk never reaches
changes nothing; the node at depth d of the path gets the row's d-th uniform, as in the walk. Each
row lends ``max depth + 1`` uniforms from its :class:`stand_runtime.randomness.RandomStream` and gives
back what the walk would not have drawn, so both verifiers agree except where float rounding flips a
draw. One transfer to the host ends a call. A row whose path meets a nucleus wider than the probe
(:data:`stand_runtime.target.sampling.NUCLEUS_PROBE`, rare) is verified again by the reference walk.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from .errors import StandError
from .randomness import PositionedNoise, RandomStream, position_gumbel
from .target.sampling import DeviceRows, SamplingParams, target_row
from .trees.draft import Draft
from .verify import EMPTY_RESIDUAL, Verification, verify_invariant, verify_sampling


@dataclass
class _Layout:
    """A batch's draft trees as padded host arrays: B rows, N = the widest draft, I nodes with
    children, M = the most children at one node, K = the widest draft support.

    Attributes:
        lengths: ``[B]`` nodes per draft; ``depth``: ``[B, N]`` int64 depths (0 for padding);
            ``ancestors``: ``[B, N, N]`` bool, row v marks v and its ancestors (padding: itself).
        inner: ``[B, N]`` int64 index of each node among the I nodes with children (-1 otherwise).
        child, parent_inner, rank: per drafted node, its flat index ``b * N + c``, its parent's
            inner index and its place among its siblings (drawing order).
        rows, nodes: ``[I]`` row and draft position of each node with children; ``kids``: ``[I]``
            its child count; ``kid_tokens``: ``[I, M]`` its children's tokens (-1 padding).
        support, q, slots, drawn: sampling only: ``[I, K]`` the draft support (-1 padding) and q on it
            (0 padding), ``[I, M]`` each child's slot in the support and whether its stage is the
            stochastic one (drawn from q, not copied) rather than the deterministic one.
    """

    lengths: list[int]
    depth: np.ndarray
    ancestors: np.ndarray
    inner: np.ndarray
    child: list[int]
    parent_inner: list[int]
    rank: list[int]
    rows: list[int]
    nodes: list[int]
    kids: list[int]
    kid_tokens: np.ndarray
    support: np.ndarray | None = None
    q: np.ndarray | None = None
    slots: np.ndarray | None = None
    drawn: np.ndarray | None = None


def _tree_parts(draft: Draft, b: int, width: int, sampling: bool) -> dict:
    """One draft's nodes with children and their children, as flat arrays (see :class:`_Layout`)."""
    inner = [v for v, kids in enumerate(draft.children) if kids]
    counts = np.asarray([len(draft.children[v]) for v in inner], dtype=np.int64)
    kids = np.asarray([c for v in inner for c in draft.children[v]], dtype=np.int64)
    rank = np.arange(len(kids)) - np.repeat(np.cumsum(counts) - counts, counts)
    parts = {"nodes": np.asarray(inner, dtype=np.int64), "counts": counts, "child": b * width + kids, "rank": rank,
             "kid_tokens": np.asarray(draft.tokens, dtype=np.int64)[kids]}
    if sampling:
        has_q = [draft.draft_ids[v] is not None for v in inner]
        parts["supports"] = [draft.draft_ids[v] if q else parts["kid_tokens"][k - n: k] for v, q, k, n in
                             zip(inner, has_q, np.cumsum(counts), counts)]
        parts["qs"] = [draft.draft_probs[v] if q else np.zeros(n) for v, q, n in zip(inner, has_q, counts)]
        with_q = np.repeat(np.asarray(has_q, dtype=bool), counts)
        parts["slots"] = np.where(with_q, np.asarray(draft.slots, dtype=np.int64)[kids], rank)
        copied = np.isin(kids, np.fromiter(draft.copied, dtype=np.int64, count=len(draft.copied)))
        parts["drawn"] = with_q & ~copied & bool(draft.stochastic)
    return parts


def _layout(drafts: Sequence[Draft], sampling: bool) -> _Layout:
    """The padded host arrays of ``drafts`` (:class:`_Layout`; the draft supports when ``sampling``)."""
    lengths = [len(d.tokens) for d in drafts]
    batch, width = len(drafts), max(lengths)
    depth = np.zeros((batch, width), dtype=np.int64)
    ancestors = np.zeros((batch, width, width), dtype=bool)
    ancestors[:, np.arange(width), np.arange(width)] = True
    inner = np.full((batch, width), -1, dtype=np.int64)
    parts = [_tree_parts(draft, b, width, sampling) for b, draft in enumerate(drafts)]
    for b, draft in enumerate(drafts):
        depth[b, : lengths[b]] = draft.depths
        if lengths[b] > 1:
            ancestors[b, : lengths[b], : lengths[b]] = draft.ancestor_mask().numpy()
    join = lambda key: np.concatenate([part[key] for part in parts])  # noqa: E731
    counts, nodes = join("counts"), join("nodes")
    rows = np.repeat(np.arange(batch), [len(part["nodes"]) for part in parts])
    inner[rows, nodes] = np.arange(len(nodes))
    owner, rank = np.repeat(np.arange(len(nodes)), counts), join("rank")
    widest = int(counts.max()) if len(counts) else 0
    kid_tokens = np.full((len(nodes), widest), -1, dtype=np.int64)
    kid_tokens[owner, rank] = join("kid_tokens")
    out = _Layout(lengths, depth, ancestors, inner, join("child").tolist(), owner.tolist(), rank.tolist(),
                  rows.tolist(), nodes.tolist(), counts.tolist(), kid_tokens)
    if sampling:
        supports = [support for part in parts for support in part["supports"]]
        sizes = np.asarray([len(support) for support in supports], dtype=np.int64)
        at = (np.repeat(np.arange(len(nodes)), sizes), np.arange(sizes.sum()) - np.repeat(np.cumsum(sizes) - sizes, sizes))
        out.support = np.full((len(nodes), int(sizes.max()) if len(sizes) else 0), -1, dtype=np.int64)
        out.q = np.zeros(out.support.shape)
        if len(supports):
            out.support[at] = np.concatenate(supports)
            out.q[at] = np.concatenate([q for part in parts for q in part["qs"]])
        out.slots = np.zeros((len(nodes), widest), dtype=np.int64)
        out.drawn = np.zeros((len(nodes), widest), dtype=bool)
        out.slots[owner, rank], out.drawn[owner, rank] = join("slots"), join("drawn")
    return out


class _Logits:
    """Every row's ``[n_b, vocab]`` logits as one ``[rows, vocab]`` tensor with per-row offsets: the
    padded forward's own storage when the rows are slices of it (no copy), else their concatenation."""

    def __init__(self, logits: Sequence[torch.Tensor]) -> None:
        first, flat = logits[0], None
        if len(logits) > 1 and all(t.dim() == 2 and t.stride() == first.stride() and t.stride(-1) == 1 and
                                   t.untyped_storage().data_ptr() == first.untyped_storage().data_ptr()
                                   for t in logits):
            step, row = logits[1].storage_offset() - first.storage_offset(), first.stride(0)
            if step > 0 and step % row == 0 and all(t.storage_offset() - first.storage_offset() == b * step
                                                    for b, t in enumerate(logits)):
                self.offsets = [b * (step // row) for b in range(len(logits))]
                count = self.offsets[-1] + logits[-1].shape[0]
                flat = first.as_strided((count, first.shape[1]), first.stride(), first.storage_offset())
        if flat is None:
            flat = first if len(logits) == 1 else torch.cat(list(logits))
            self.offsets = np.cumsum([0] + [t.shape[0] for t in logits[:-1]]).tolist()
        self.flat = flat

    def index(self, rows, nodes) -> torch.Tensor:
        """Flat row indices (on the logits' device) of draft positions ``nodes`` of rows ``rows``."""
        index = np.asarray(self.offsets, dtype=np.int64)[np.asarray(rows, dtype=np.int64)] + np.asarray(nodes)
        return torch.as_tensor(index, dtype=torch.long).to(self.flat.device)


def sample_indices(weights: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """:func:`stand_runtime.target.sampling.sample_index` for every row: ``[R, C]`` float64 weights and
    ``[R]`` float64 uniforms → ``[R]`` int64 indices, in range even for non-finite weights."""
    cdf = weights.cumsum(-1)
    index = torch.searchsorted(cdf, (uniforms * cdf[:, -1])[:, None], right=True)[:, 0]
    columns = torch.arange(weights.shape[1], device=weights.device).expand_as(weights)
    last = torch.where(weights > 0, columns, 0).max(-1).values
    return torch.where(index >= weights.shape[1], last, index).clamp(0, weights.shape[1] - 1)


def chain_outcomes(on_support: torch.Tensor, outside: torch.Tensor, q: torch.Tensor, slots: torch.Tensor,
                   kids: torch.Tensor, drawn: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`stand_runtime.verify.acceptance_chain` at I nodes at once, stage i of every node together.

    Args:
        on_support: ``[I, K]`` float64 p at each node's support ids (0 at padding).
        outside: ``[I]`` float64 p's mass off the support.
        q: ``[I, K]`` float64 the draft distribution (any values where no stage is stochastic).
        slots: ``[I, M]`` int64 each child's support index, in drawing order (any value at padding).
        kids: ``[I]`` int64 children per node (``<= M``).
        drawn: ``[I, M]`` bool, child i's stage is stochastic (drawn from q), else deterministic.

    Returns:
        ``([I, M + 1] outcome probabilities: child i accepted at column i (0 past the node's
        children), none at column M; [I, K] the final residual weights on the support)``.
    """
    weights = on_support.clamp(min=0)
    total = weights.sum(-1) + outside
    count, widest = slots.shape
    reach = torch.ones(count, dtype=torch.float64, device=weights.device)
    alive = torch.ones(count, dtype=torch.bool, device=weights.device)
    accept = torch.zeros(count, widest + 1, dtype=torch.float64, device=weights.device)
    for i in range(widest):
        slot, stochastic = slots[:, i : i + 1], drawn[:, i]
        active = alive & (kids > i) & (reach > 0)
        target = torch.where(total > 0, weights.gather(1, slot)[:, 0] / total.where(total > 0, 1.0), 0.0)
        q_slot = q.gather(1, slot)[:, 0]
        ratio = torch.where(stochastic, torch.where(q_slot > 0, (target / q_slot.where(q_slot > 0, 1.0)).clamp(max=1), 0.0),
                            target.clamp(max=1))
        lowered = torch.where(stochastic[:, None], (weights - q * total[:, None]).clamp(min=0),
                              weights.scatter(1, slot, 0.0))
        remaining = lowered.sum(-1) + outside
        ratio = torch.where(remaining <= EMPTY_RESIDUAL * total, 1.0, ratio)
        accept[:, i] = torch.where(active, reach * ratio, 0.0)
        after = reach * (1.0 - ratio)
        update = active & (after > 0)
        weights = torch.where(update[:, None], lowered, weights)
        total = torch.where(update, remaining, total)
        reach = torch.where(active, after, reach)
        q_total = q.sum(-1) - q_slot
        zeroed = q.scatter(1, slot, 0.0)
        redraw = active & stochastic
        q = torch.where(redraw[:, None], zeroed / q_total.where(q_total > 0, 1.0)[:, None], q)
        alive = alive & ~(redraw & (q_total <= 0))
    accept[:, widest] = reach
    return accept, weights


def _put(size: int, at: np.ndarray, values: torch.Tensor, fill) -> torch.Tensor:
    """A ``[size]`` tensor of ``fill`` with ``values`` at the flat indices ``at``."""
    out = torch.full((size,), fill, dtype=values.dtype, device=values.device)
    return out.index_copy_(0, torch.as_tensor(at, dtype=torch.long).to(values.device), values)


def _matching(layout: _Layout, logits: _Logits, params: SamplingParams, noises: Sequence[PositionedNoise] | None
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``([I] outcome per node with children: its first child whose token is the target's token there,
    else M; [B * N] that token per padded node; [B * N] int64 flags: 1 where the logits (p) are not
    finite, 2 where the nucleus is wider than the probe)``: the target's token is the argmax (greedy)
    or the Gumbel-max sample with each row's position noise (drafter-invariant verification)."""
    batch, width = layout.depth.shape
    rows = np.repeat(np.arange(batch), layout.lengths)
    nodes = np.concatenate([np.arange(n) for n in layout.lengths])
    index = logits.index(rows, nodes)
    padded = rows * width + nodes
    if noises is None:
        maxima = torch.max(logits.flat.index_select(0, index), dim=-1)
        tokens, flag = maxima.indices, (~torch.isfinite(maxima.values)).long()
    else:
        tokens, flag = _gumbel_max(logits.flat.index_select(0, index), params, noises, rows, layout.depth[rows, nodes])
    best, flags = _put(batch * width, padded, tokens, 0), _put(batch * width, padded, flag, 0)
    if not layout.rows:
        return torch.zeros(0, dtype=torch.long, device=best.device), best, flags
    kid_tokens = torch.as_tensor(layout.kid_tokens).to(best.device)
    at = torch.as_tensor(np.asarray(layout.rows, dtype=np.int64) * width + np.asarray(layout.nodes, dtype=np.int64))
    match = kid_tokens == best.index_select(0, at.to(best.device))[:, None]
    return torch.where(match.any(-1), match.int().argmax(-1), kid_tokens.shape[1]), best, flags


def _gumbel_max(logits: torch.Tensor, params: SamplingParams, noises: Sequence[PositionedNoise], rows: np.ndarray,
                depths: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`stand_runtime.verify.gumbel_max_token` of every node: ``[R, vocab]`` logits, each node's row
    and depth (``[R]`` int64) → ``([R] int64 tokens, [R] int64 flags as in :func:`_matching`)``."""
    p = DeviceRows(logits, params)
    keys = np.empty(len(rows), dtype=np.int64)
    for b in np.unique(rows):
        here = rows == b
        keys[here] = noises[b].noise.position_keys(noises[b].base + depths[here])
    ids = p.ids if p.ids is not None else torch.arange(p.values.shape[1], device=logits.device).expand(len(rows), -1)
    score = torch.log(p.values.double()) + position_gumbel(torch.as_tensor(keys).to(logits.device), ids)
    column = score.argmax(-1)
    tokens = column if p.ids is None else p.ids.gather(1, column[:, None])[:, 0]
    return tokens, p.flags()


def _sampling(layout: _Layout, logits: _Logits, params: SamplingParams, uniforms: torch.Tensor):
    """``([I] outcome per node with children (M = none), [I, K] residuals, [B * N] int64 flags: 1
    where p is not finite, 2 where the nucleus is wider than the probe)`` (:func:`chain_outcomes`)."""
    device, (batch, width) = uniforms.device, layout.depth.shape
    to = lambda array: torch.as_tensor(array).to(device)  # noqa: E731
    p = DeviceRows(logits.flat.index_select(0, logits.index(layout.rows, layout.nodes)), params)
    support = to(layout.support)
    on_support, _ = p.at(support)
    outside = (p.total - on_support.sum(-1)).clamp(min=0)
    probs, residual = chain_outcomes(on_support, outside, to(layout.q), to(layout.slots), to(layout.kids),
                                     to(layout.drawn))
    rows = np.asarray(layout.rows, dtype=np.int64)
    at = to(rows * uniforms.shape[1] + layout.depth[rows, layout.nodes])
    outcome = sample_indices(probs, uniforms.reshape(-1).index_select(0, at))
    return outcome, residual, support, _put(batch * width, rows * width + np.asarray(layout.nodes), p.flags(), 0)


def _walk(layout: _Layout, outcome: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``([B, N] bool on the accepted path (root included), [B] its deepest node)``: a node is on it
    when every node from the root to it is its parent's outcome (the ancestor masks)."""
    device, (batch, width) = outcome.device, layout.depth.shape
    selected = torch.zeros(batch * width, dtype=torch.bool, device=device)
    selected[torch.arange(batch, device=device) * width] = True
    if layout.child:
        child = torch.as_tensor(layout.child).to(device)
        parent = torch.as_tensor(layout.parent_inner).to(device)
        selected[child] = outcome.index_select(0, parent) == torch.as_tensor(layout.rank).to(device)
    ancestors = torch.as_tensor(layout.ancestors).to(device)
    on_path = ~(ancestors & ~selected.view(batch, 1, width)).any(-1)
    depth = torch.as_tensor(layout.depth).to(device)
    return on_path, torch.where(on_path, depth, -1).argmax(-1)


def _emit(layout: _Layout, logits: _Logits, params: SamplingParams, uniforms: torch.Tensor, end: torch.Tensor,
          chains) -> tuple[torch.Tensor, torch.Tensor]:
    """``([B] the emitted token: a sample of p at the path's end (bonus) or of its residual
    (recovered), [B] int64 flags at the end node as :func:`_sampling` gives them)``."""
    device, batch = end.device, len(layout.lengths)
    offsets = torch.as_tensor(logits.offsets, dtype=torch.long).to(device)
    p = DeviceRows(logits.flat.index_select(0, offsets + end), params)
    weights = p.values.double().clone()
    inner = torch.as_tensor(layout.inner).to(device).gather(1, end[:, None])[:, 0]
    if chains is not None:
        _, residual, support, _ = chains
        which = inner.clamp(min=0)
        tokens = torch.where(inner[:, None] >= 0, support.index_select(0, which), -1)
        _, columns = p.at(tokens)
        extended = torch.cat([weights, weights.new_zeros(batch, 1)], 1)
        weights = extended.scatter_(1, columns, residual.index_select(0, which))[:, :-1]
    depth = torch.as_tensor(layout.depth).to(device).gather(1, end[:, None])[:, 0]
    at = torch.arange(batch, device=device) * uniforms.shape[1] + depth + (inner >= 0).long()
    index = sample_indices(weights, uniforms.reshape(-1).index_select(0, at))
    token = index if p.ids is None else p.ids.gather(1, index[:, None])[:, 0]
    return token, p.flags()


def verify_batch(drafts: Sequence[Draft], logits: Sequence[torch.Tensor], params: SamplingParams,
                 streams: Sequence[RandomStream] | None = None,
                 noises: Sequence[PositionedNoise] | None = None) -> list[Verification]:
    """Verify every row's draft at once (module docstring): what :func:`stand_runtime.verify.verify_greedy`,
    :func:`~stand_runtime.verify.verify_invariant` (``noises`` given) or
    :func:`~stand_runtime.verify.verify_sampling` gives each row.

    Args:
        drafts: per row its draft tree.
        logits: per row its ``[len(draft.tokens), vocab]`` raw target logits (any float dtype, one
            device; slices of one padded forward are read without a copy).
        params: the rows' sampling distribution (one for all; :func:`verify_rows` groups rows).
        streams: per row its own random stream (recursive rejection).
        noises: per row its position noise at the draft (``noise.at(committed)``): drafter-invariant
            verification; None = with ``streams``.

    Raises:
        StandError: rows and logits or streams of different counts, a stream shared by two rows, or
            non-finite logits at a node the walk visits (as the reference walk raises).
    """
    noises = None if params.greedy else noises
    per_row = streams if noises is None else noises
    if len(drafts) != len(logits) or not drafts or (not params.greedy and (per_row is None or len(per_row) != len(drafts))):
        raise StandError("verify_batch takes one draft, one logits tensor and (sampling) one random stream or "
                         "position noise per row")
    if noises is not None and not all(isinstance(n, PositionedNoise) for n in noises):
        raise StandError("verify_batch's noises must be positioned PositionNoise (noise.at(committed tokens))")
    if not params.greedy and noises is None and len({id(s) for s in streams}) != len(streams):
        raise StandError("verify_batch needs a random stream of its own per row (two rows share one)")
    layout, source = _layout(drafts, sampling=not params.greedy and noises is None), _Logits(logits)
    device, lent = source.flat.device, None
    none = torch.zeros(0, dtype=torch.long, device=device)
    if params.greedy or noises is not None:
        outcome, best, flags = _matching(layout, source, params, noises)
        on_path, end = _walk(layout, outcome)
        token = best.index_select(0, torch.arange(len(drafts), device=device) * layout.depth.shape[1] + end)
    else:
        lent = [stream.lend_uniforms(int(draft.depths.max()) + 1) for stream, draft in zip(streams, drafts)]
        padded = np.zeros((len(drafts), max(len(u) for u in lent)))
        for b, values in enumerate(lent):
            padded[b, : len(values)] = values
        uniforms = torch.as_tensor(padded).to(device)
        chains = _sampling(layout, source, params, uniforms) if layout.rows else None
        on_path, end = _walk(layout, none if chains is None else chains[0])
        token, end_flag = _emit(layout, source, params, uniforms, end, chains)
        flags = torch.zeros_like(on_path, dtype=torch.long) if chains is None else chains[3].view(on_path.shape)
        flags = flags.scatter(1, end[:, None], flags.gather(1, end[:, None]) | end_flag[:, None])
    host = torch.cat([on_path.view(-1).long(), flags.view(-1), end, token]).cpu().numpy()  # the one sync
    return _finish(drafts, logits, params, streams, lent, layout, host, noises)


def _finish(drafts, logits, params, streams, lent, layout: _Layout, host: np.ndarray, noises) -> list[Verification]:
    """Per row its :class:`Verification` from the host copy; uniforms given back; rows whose path meets
    a nucleus wider than the probe verified again by the reference walk; non-finite visited nodes refused."""
    batch, width = layout.depth.shape
    on_path = host[: batch * width].reshape(batch, width).astype(bool)
    flags = host[batch * width : 2 * batch * width].reshape(batch, width)
    end, token = host[2 * batch * width : 2 * batch * width + batch], host[2 * batch * width + batch :]
    out = []
    for b, draft in enumerate(drafts):
        path = np.flatnonzero(on_path[b, : layout.lengths[b]])
        marked = [v for v in path.tolist() if flags[b, v]]
        if marked and flags[b, marked[0]] & 1:
            what = ("the target's logits at draft node {} are not finite (NaN or inf)" if params.greedy else
                    "the target distribution at draft node {} is not finite (NaN or inf logits)")
            raise StandError(what.format(marked[0]))
        leaf = not draft.children[int(end[b])]
        if marked:  # a wide nucleus on the path (sampling only): the reference walk, on the same uniforms
            read = lambda node, rows=logits[b]: target_row(rows[node], params)  # noqa: E731
            if lent is not None:
                streams[b].give_back_uniforms(len(lent[b]))
                out.append(verify_sampling(draft, read, streams[b]))
            else:
                out.append(verify_invariant(draft, read, noises[b].noise, noises[b].base))
            continue
        if lent is not None:
            streams[b].give_back_uniforms(len(lent[b]) - int(draft.depths[int(end[b])]) - (0 if leaf else 1) - 1)
        out.append(Verification(path[1:].tolist(), int(token[b]), leaf))
    return out


def verify_rows(drafts: Sequence[Draft], logits: Sequence[torch.Tensor], params: Sequence[SamplingParams],
                streams: Sequence[RandomStream], noises: Sequence[PositionedNoise] | None = None) -> list[Verification]:
    """:func:`verify_batch` over rows of different sampling parameters: one call per distinct
    ``params`` (usually one), results in row order. Arguments are per row, as there."""
    out: list[Verification | None] = [None] * len(drafts)
    for group in dict.fromkeys(params):
        rows = [b for b, p in enumerate(params) if p == group]
        for b, verification in zip(rows, verify_batch([drafts[b] for b in rows], [logits[b] for b in rows], group,
                                                      [streams[b] for b in rows],
                                                      None if noises is None else [noises[b] for b in rows])):
            out[b] = verification
    return out
