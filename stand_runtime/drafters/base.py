"""The interface between the decoding loop and a drafting method."""

from __future__ import annotations

from typing import Protocol

from ..trees.draft import Draft
from .feeds import TargetFeed


class Drafter(Protocol):
    """What the decoding loop needs from a drafting method.

    The loop calls :meth:`observe_prompt` once after prefill, then per step :meth:`draft` →
    (tree forward, verification) → :meth:`observe_step`. A drafter learns only from what the target
    computed, read through a :class:`stand_runtime.drafters.feeds.TargetFeed` (a model's logits, or a recorded
    trace's next tokens); it never changes what verification accepts, so every drafter keeps
    decoding lossless.
    """

    def observe_prompt(self, prompt: list[int], feed: TargetFeed, positions: range) -> None:
        """Learn from a prefill chunk: ``feed`` has ``len(positions)`` rows; row r is the target's
        prediction after ``prompt[: positions[r] + 1]``. A drafter that ignores it may say so with a
        class attribute ``reads_prompt = False`` (a batch then prefills a kept prompt prefix for it
        without feeding it, :mod:`stand_runtime.target.prefix_cache`)."""

    def draft(self, committed: list[int], max_depth: int) -> Draft:
        """Draft the next step's tree for ``committed`` (its last token is the root), no deeper
        than ``max_depth`` tokens."""

    def observe_step(self, committed: list[int], draft: Draft, accepted: list[int], feed: TargetFeed) -> None:
        """Learn from a verified step: ``accepted`` the draft positions committed (root excluded,
        after truncation at EOS/limits), ``feed`` the target's rows of the forwarded nodes (by draft
        position; :meth:`TargetFeed.observed` says which it holds); ``committed`` is the sequence
        before the step's tokens."""

    def stats(self) -> dict | None:
        """JSON-ready statistics of the drafter's memory, or None."""
