"""Statistics of one decoding run: tokens, target forwards, acceptance length, time split."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class DecodeStats:
    """What a decoding run did and where its time went.

    Attributes:
        prompt_tokens: tokens in the prompt.
        target_forwards: decoding steps (target forwards over root + drafted nodes), prefill excluded.
        tokens_per_step: tokens emitted by each step (accepted + 1, after truncation at EOS/limit).
        drafted_per_step: drafted nodes forwarded in each step (root excluded).
        prefill_s, drafting_s, forward_s, verification_s, bookkeeping_s: wall time in seconds of the
            prefill forward, drafting, tree forwards, verification (p and the walk), and the rest
            (KV compaction, store updates).
        store: the n-gram store's statistics at the end (``StoreStats.as_dict()``), when one was used.
    """

    prompt_tokens: int = 0
    target_forwards: int = 0
    tokens_per_step: list[int] = field(default_factory=list)
    drafted_per_step: list[int] = field(default_factory=list)
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
            "store": self.store,
        }


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
