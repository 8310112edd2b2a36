"""Statistics of one decoding run: tokens, target forwards, acceptance length, time split."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .verify import acceptance_chain


@dataclass
class DecodeStats:
    """What a decoding run did and where its time went.

    Attributes:
        prompt_tokens: tokens in the prompt.
        target_forwards: decoding steps (target forwards over root + drafted nodes), prefill excluded.
        tokens_per_step: tokens emitted by each step (accepted + 1, after truncation at EOS/limit).
        drafted_per_step: drafted nodes forwarded in each step (root excluded).
        accepted_per_step: drafted tokens verification accepted in each step (before truncation).
        bonus_per_step: per step, True when the accepted path ended at a node without drafted
            children (a bonus token; nothing deeper was offered), False when a drafted child was rejected.
        prefill_s, drafting_s, forward_s, verification_s, bookkeeping_s: wall time in seconds of the
            prefill forward, drafting, tree forwards, verification (p and the walk), and the rest
            (KV compaction, store updates).
        diagnostics_s: seconds spent on optional diagnostics (``generate(diagnose=True)``), kept out
            of every figure above and out of the throughput.
        store: the n-gram store's statistics at the end (``StoreStats.as_dict()``), when one was used.
    """

    prompt_tokens: int = 0
    target_forwards: int = 0
    tokens_per_step: list[int] = field(default_factory=list)
    drafted_per_step: list[int] = field(default_factory=list)
    accepted_per_step: list[int] = field(default_factory=list)
    bonus_per_step: list[bool] = field(default_factory=list)
    diagnostics_s: float = 0.0
    prefill_s: float = 0.0
    drafting_s: float = 0.0
    forward_s: float = 0.0
    verification_s: float = 0.0
    bookkeeping_s: float = 0.0
    store: dict | None = None

    @property
    def new_tokens(self) -> int:
        """Tokens generated."""
        return sum(self.tokens_per_step)

    @property
    def acceptance_length(self) -> float:
        """Tokens emitted per target forward (tau); 1.0 for plain decoding."""
        return self.new_tokens / self.target_forwards if self.target_forwards else 0.0

    @property
    def decode_s(self) -> float:
        """Seconds spent in decoding steps (prefill excluded)."""
        return self.drafting_s + self.forward_s + self.verification_s + self.bookkeeping_s

    @property
    def total_s(self) -> float:
        """Seconds from the start of prefill to the last token."""
        return self.prefill_s + self.decode_s

    @property
    def tokens_per_s(self) -> float:
        """Generated tokens per second of decoding (prefill excluded)."""
        return self.new_tokens / self.decode_s if self.decode_s > 0 else 0.0

    def as_dict(self) -> dict:
        """A JSON-ready summary."""
        return {
            "prompt_tokens": self.prompt_tokens,
            "new_tokens": self.new_tokens,
            "target_forwards": self.target_forwards,
            "acceptance_length": self.acceptance_length,
            "tokens_per_s": self.tokens_per_s,
            "mean_drafted_per_step": (sum(self.drafted_per_step) / len(self.drafted_per_step)) if self.drafted_per_step else 0.0,
            "time_s": {
                "prefill": self.prefill_s,
                "drafting": self.drafting_s,
                "forward": self.forward_s,
                "verification": self.verification_s,
                "bookkeeping": self.bookkeeping_s,
                "total": self.total_s,
            },
            "acceptance_by_depth": acceptance_by_depth(self.accepted_per_step, self.bonus_per_step),
            "store": self.store,
        }


def acceptance_by_depth(accepted: list[int], bonus: list[bool]) -> list[dict]:
    """Acceptance rate per draft depth over decoding steps.

    A step *offers* depth d when the verification walk reached a drafted node at depth d: it
    accepted the d - 1 tokens above it and then either accepted it or rejected every drafted child of
    the node it stood on (a step that ended with a bonus token after ``a`` accepted tokens offered
    depths 1 .. a only). It *accepts* depth d when it accepted >= d tokens. The rate is accepted /
    offered: the chance that the walk descends past depth d - 1 when it can (alpha_d of the draft-tree
    papers).

    Args:
        accepted: per step, drafted tokens accepted.
        bonus: per step, True when the walk ended at a node without drafted children.

    Returns:
        One ``{"depth", "offered", "accepted", "rate"}`` per depth 1 .. deepest offered.
    """
    acc = np.asarray(accepted, dtype=np.int64)
    reached = acc + np.where(np.asarray(bonus, dtype=bool), 0, 1)
    out = []
    for d in range(1, int(reached.max(initial=0)) + 1):
        offered = int(np.count_nonzero(reached >= d))
        taken = int(np.count_nonzero(acc >= d))
        out.append({"depth": d, "offered": offered, "accepted": taken, "rate": taken / offered if offered else 0.0})
    return out


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
        """Record one root: ``p`` ``[vocab]`` float64; ``ids``, ``q`` ``[k]`` the draft support and
        q on it (n > 0); ``m`` the root's static children."""
        row = self.sums.setdefault(n, [0, 0.0, 0.0, 0.0, 0.0])
        row[0] += 1
        if n == 0:
            return
        on_support = p[ids]
        m = min(m, len(ids))
        order = np.argsort(-q, kind="stable")
        row[1] += float(np.minimum(on_support, q).sum())
        row[2] += float(on_support[order[0]])
        row[3] += float(on_support[order[:m]].sum())
        log_q = np.log(q)
        target, q_list = on_support.tolist(), q.tolist()
        sampled = 0.0
        for _ in range(self.orders):
            slots = np.argsort(-(log_q + self._rng.gumbel(size=len(q))), kind="stable")[:m].tolist()
            sampled += sum(acceptance_chain(target, q_list, slots, stochastic=True)[0])
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


@dataclass
class GenerationResult:
    """Output of :func:`stand_runtime.generate`.

    Attributes:
        tokens: generated token ids (prompt excluded; EOS included when it ended the run).
        text: ``tokens`` decoded (empty when no tokenizer was given).
        stats: the run's :class:`DecodeStats`.
    """

    tokens: list[int]
    text: str
    stats: DecodeStats

    @property
    def acceptance_length(self) -> float:
        """Tokens emitted per target forward (prefill excluded)."""
        return self.stats.acceptance_length
