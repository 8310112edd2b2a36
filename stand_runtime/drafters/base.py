"""The interface between the engine and a drafting method: everything the engine calls on a drafter.

A drafter subclasses :class:`Drafter` and implements its three steps (:meth:`~Drafter.observe_prompt`,
:meth:`~Drafter.draft`, :meth:`~Drafter.observe_step`); the optional capabilities below have
defaults that a drafter without them keeps, so the engine reads every one of them directly and a new
drafter is written from this class alone (``tests/lossless/test_drafter_interface.py`` holds one).
"""

from __future__ import annotations

from ..trees.draft import Draft
from .feeds import TargetFeed


class Drafter:
    """What the engine needs from a drafting method.

    The engine calls :meth:`observe_prompt` once after prefill, then per step :meth:`draft` →
    (tree forward, verification) → :meth:`observe_step`. A drafter learns only from what the target
    computed, read through a :class:`stand_runtime.drafters.feeds.TargetFeed` (a model's logits, or a
    recorded trace's next tokens); it never changes what verification accepts, so every drafter keeps
    decoding lossless.

    Attributes:
        reads_prompt: False for a drafter whose :meth:`observe_prompt` ignores the prompt's logits (a
            batch then prefills a kept prompt prefix for it without feeding it,
            :class:`stand_runtime.target.kv_cache.PrefixCache`).
        drafts_in_batch: True when a batch's rows of this drafter draft in one call
            (:meth:`batch_request` → :func:`stand_runtime.store.native_draft.native_best_first_rows`
            → :meth:`batch_drafted`).
        feeds_in_batch: True when a batch's rows merge their step observations in one call
            (:meth:`feed_request` → :func:`stand_runtime.store.native_store.update_sequences`).
        diagnostics_s: seconds spent on optional diagnostics (kept out of the step's bookkeeping time).
        vocab: the vocabulary a drafter sized by it covers (token ids below it), or None.
    """

    reads_prompt: bool = True
    drafts_in_batch: bool = False
    feeds_in_batch: bool = False
    diagnostics_s: float = 0.0
    vocab: int | None = None

    def observe_prompt(self, prompt: list[int], feed: TargetFeed, positions: range) -> None:
        """Learn from a prefill chunk: ``feed`` has ``len(positions)`` rows; row r is the target's
        prediction after ``prompt[: positions[r] + 1]``."""
        raise NotImplementedError

    def draft(self, committed: list[int], max_depth: int) -> Draft:
        """Draft the next step's tree for ``committed`` (its last token is the root), no deeper
        than ``max_depth`` tokens."""
        raise NotImplementedError

    def observe_step(self, committed: list[int], draft: Draft, accepted: list[int], feed: TargetFeed) -> None:
        """Learn from a verified step: ``accepted`` the draft positions committed (root excluded,
        after truncation at EOS/limits), ``feed`` the target's rows of the forwarded nodes (by draft
        position; :meth:`TargetFeed.observed` says which it holds); ``committed`` is the sequence
        before the step's tokens."""
        raise NotImplementedError

    def stats(self) -> dict | None:
        """JSON-ready statistics of the drafter's memory, or None."""
        return None

    def learn_sequence(self, tokens: list[int]) -> None:
        """Register ``tokens`` (a row's committed list, fed as it grows) with the drafter's memory, where
        it keeps a ledger of what it learned (:mod:`stand_runtime.store.learned`); a no-op otherwise."""

    def batch_request(self, committed: list[int], max_depth: int):
        """With :attr:`drafts_in_batch`: this step's request for the batch's one drafting call."""
        raise NotImplementedError(f"{type(self).__name__} drafts alone")

    def batch_drafted(self, draft: Draft) -> Draft:
        """With :attr:`drafts_in_batch`: the step's draft as the batch call gave it, made final."""
        return draft

    def feed_request(self, committed: list[int], draft: Draft, accepted: list[int], feed: TargetFeed):
        """:meth:`observe_step`, its store update returned for the batch's one feeding call (with
        :attr:`feeds_in_batch`), or None where the drafter learned here (the default)."""
        self.observe_step(committed, draft, accepted, feed)
        return None
