"""Statistics of one decoding run: tokens, target forwards, acceptance length, time split."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


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
        diagnostics_s: seconds spent on optional diagnostics (``Method.ablated(diagnose=True)`` in ``generate``), kept out
            of every figure above and out of the throughput.
        store: the n-gram store's statistics at the end (``StoreStats.as_dict()``), when one was used.
        forwarded_tokens: the row's share of the target forwards it took part in: per step the
            forward's width (a padded batch: the longest row's root + nodes; one sequence: its own).
        padding_tokens: of those, the padding (the width minus the row's own root + nodes).
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
    forwarded_tokens: int = 0
    padding_tokens: int = 0

    def record_step(self, tokens: int, drafted: int, accepted: int, bonus: bool) -> None:
        """Count one decoding step: tokens committed, nodes drafted, drafts accepted (before
        truncation), and whether the walk ended with a bonus token."""
        self.target_forwards += 1
        self.tokens_per_step.append(tokens)
        self.drafted_per_step.append(drafted)
        self.accepted_per_step.append(accepted)
        self.bonus_per_step.append(bonus)

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

    @property
    def padding_waste(self) -> float:
        """Padded tokens / forwarded tokens of the row's share of the forwards (0 when none)."""
        return self.padding_tokens / self.forwarded_tokens if self.forwarded_tokens else 0.0

    def as_dict(self) -> dict:
        """A JSON-ready summary."""
        return {
            "prompt_tokens": self.prompt_tokens,
            "new_tokens": self.new_tokens,
            "target_forwards": self.target_forwards,
            "acceptance_length": self.acceptance_length,
            "tokens_per_s": self.tokens_per_s,
            "mean_drafted_per_step": (sum(self.drafted_per_step) / len(self.drafted_per_step)) if self.drafted_per_step else 0.0,
            "forwarded_tokens": self.forwarded_tokens,
            "padding_waste": self.padding_waste,
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


def padding_waste(stats) -> float:
    """Padded tokens / forwarded tokens over a batch's rows (``stats``: their :class:`DecodeStats`):
    each row counts its share of every forward, so the sums are the batch's forwards' (0 when none)."""
    stats = list(stats)
    forwarded = sum(s.forwarded_tokens for s in stats)
    return sum(s.padding_tokens for s in stats) / forwarded if forwarded else 0.0


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


@dataclass
class GenerationResult:
    """Output of :func:`stand_runtime.generate`.

    Attributes:
        tokens: generated token ids (prompt excluded; EOS included when it ended the run).
        text: ``tokens`` decoded (empty when no tokenizer was given); when a stop string ended the
            run, the text before it (the OpenAI convention: the stop string is left out, the tokens
            keep it).
        stats: the run's :class:`DecodeStats`.
        finish_reason: ``"eos"``, ``"stop"`` (a stop string) or ``"length"`` (``max_new_tokens``).
        logprobs: per generated token its log-probability under the target's raw logits (natural
            log, temperature 1), when asked for (``logprobs=True``); else None.
    """

    tokens: list[int]
    text: str
    stats: DecodeStats
    finish_reason: str | None = None
    logprobs: list[float] | None = None

    @property
    def acceptance_length(self) -> float:
        """Tokens emitted per target forward (prefill excluded)."""
        return self.stats.acceptance_length
