"""The interface between the decoding loop and a drafting method."""

from __future__ import annotations

from typing import Protocol

import numpy as np
import torch

from ..draft import Draft


class Drafter(Protocol):
    """What the decoding loop needs from a drafting method.

    The loop calls :meth:`observe_prompt` once after prefill, then per step :meth:`draft` →
    (tree forward, verification) → :meth:`observe_step`. A drafter learns only from what the target
    computed (logits and p); it never changes what verification accepts, so every drafter keeps
    decoding lossless.
    """

    def observe_prompt(self, prompt: list[int], logits: torch.Tensor, positions: range) -> None:
        """Learn from a prefill chunk: ``logits`` ``[len(positions), vocab]``; row r is the target's
        prediction after ``prompt[: positions[r] + 1]``."""

    def draft(self, committed: list[int], max_depth: int) -> Draft:
        """Draft the next step's tree for ``committed`` (its last token is the root), no deeper
        than ``max_depth`` tokens."""

    def observe_step(self, committed: list[int], draft: Draft, accepted: list[int], logits: torch.Tensor,
                     rows: dict[int, np.ndarray]) -> None:
        """Learn from a verified step: ``accepted`` the draft positions committed (root excluded,
        after truncation at EOS/limits), ``logits`` ``[n, vocab]`` of the forwarded nodes, ``rows``
        the ``[vocab]`` p rows verification computed (by draft position); ``committed`` is the
        sequence before the step's tokens."""

    def stats(self) -> dict | None:
        """JSON-ready statistics of the drafter's memory, or None."""
