"""Diagnostics of STAND's drafts: how close the store's q is to the target's p at step roots.

Used by ``Method.ablated(diagnose=True)`` in ``generate`` and ``treeopt bench`` to explain acceptance lengths; never on
the decoding path's randomness (a private generator) and never counted in decoding time.
"""

from __future__ import annotations

import numpy as np

from ..store.gumbel import gumbel_top_k
from ..verify import acceptance_chain


class DraftQuality:
    """How close STAND's root draft distribution q is to the target's p, by matched context length n.

    For each step whose root lookup hit the n-token table, with p the target distribution at the root
    and m the root's children (static children, at most q's support), it sums four chances that the
    step accepts a token at depth 1, under the lossless verification rules of
    :mod:`stand_runtime.verify`:

    - ``overlap`` = sum_x min(p(x), q(x)): one token sampled from q (Leviathan et al., 2023, §3);
    - ``top1`` = p(argmax q): q's most likely token, verified by the deterministic-draft rule;
    - ``topm`` = p mass of q's m most likely tokens: m deterministic children;
    - ``sampled_m``: m children drawn from q without replacement (Gumbel-Top-K) and verified by
      recursive rejection sampling (Jeon et al., 2024), averaged over ``orders`` Gumbel draws from a
      private generator (the decoding's own randomness is never touched).

    So at the same roots (same q, same p) the stochastic rule beats the deterministic one exactly when
    ``sampled_m`` > ``topm`` (``overlap`` > ``top1`` for single-child nodes). Misses count under n = 0.
    """

    FIELDS = ("steps", "overlap", "top1", "topm", "sampled_m")

    def __init__(self, orders: int = 4, seed: int = 0) -> None:
        self.orders = orders
        self._rng = np.random.default_rng(seed)
        self.sums: dict[int, list[float]] = {}  # n -> FIELDS

    def add(self, n: int, p: np.ndarray | None = None, ids: np.ndarray | None = None,
            q: np.ndarray | None = None, m: int = 1) -> None:
        """Record one root: ``p`` the target there (a :class:`stand_runtime.target.sampling.TargetRow` or
        a dense ``[vocab]`` float64 array); ``ids``, ``q`` ``[k]`` the draft support and q on it
        (n > 0); ``m`` the root's static children."""
        row = self.sums.setdefault(n, [0, 0.0, 0.0, 0.0, 0.0])
        row[0] += 1
        if n == 0:
            return
        keep = q > 0  # ids a copy path added to the support (q = 0) are not the store's draft
        ids, q = ids[keep], q[keep]
        on_support = p[ids] if isinstance(p, np.ndarray) else p.at(ids)
        m = min(m, len(ids))
        order = np.argsort(-q, kind="stable")
        row[1] += float(np.minimum(on_support, q).sum())
        row[2] += float(on_support[order[0]])
        row[3] += float(on_support[order[:m]].sum())
        log_q = np.log(q)
        target, q_list = on_support.tolist(), q.tolist()
        sampled = 0.0
        for _ in range(self.orders):
            slots = gumbel_top_k(log_q, m, self._rng.gumbel(size=len(q))).tolist()
            sampled += sum(acceptance_chain(target, q_list, slots, stochastic=True).accept)
        row[4] += sampled / self.orders

    def as_dict(self) -> dict:
        """Raw sums per n (mergeable with :func:`summarise_draft_quality`)."""
        return {str(n): dict(zip(self.FIELDS, r)) for n, r in sorted(self.sums.items())}


def summarise_draft_quality(parts: list[dict]) -> dict:
    """Merge :meth:`DraftQuality.as_dict` sums of several runs into shares and means per n.

    Returns:
        ``{n: {"steps", "share", "overlap", "top1", "topm", "sampled_m"}}`` with means over the steps of n and
        ``share`` the fraction of all roots (misses are n = "0"), plus ``"all"`` over the hits.
    """
    fields = DraftQuality.FIELDS
    totals: dict[str, list[float]] = {}
    for part in parts:
        for n, row in part.items():
            acc = totals.setdefault(n, [0.0] * len(fields))
            for i, key in enumerate(fields):
                acc[i] += row.get(key, 0.0)
    roots = sum(row[0] for row in totals.values())
    hits = [row for n, row in totals.items() if n != "0"]
    out = {}
    for n, row in sorted(totals.items()) + [("all", [sum(r[i] for r in hits) for i in range(len(fields))])]:
        steps = row[0]
        out[n] = {"steps": int(steps), "share": steps / roots if roots else 0.0}
        if n != "0":
            out[n].update({k: (row[i] / steps if steps else 0.0) for i, k in enumerate(fields[1:], 1)})
    return out
