"""Prompt lookup decoding (Saxena, 2023): copy what followed the latest earlier occurrence.

The longest suffix n-gram (n <= 3) of prompt + output is matched at its latest earlier occurrence
and the tokens that followed it are proposed as a chain (10 by default). Drafts carry no
probabilities, so they are verified with the deterministic-draft rule.
"""

from __future__ import annotations

from .base import Drafter
from ..trees.draft import Draft
from .suffix_index import PROMPT_LOOKUP_NGRAM, SuffixIndex


class PromptLookupDrafter(Drafter):
    """Prompt lookup decoding as a :class:`stand_runtime.drafters.Drafter`.

    Args:
        max_ngram: longest suffix matched (tokens).
        num_tokens: longest chain proposed (tokens).
    """

    reads_prompt = False
    """observe_prompt ignores the prompt's logits (a kept prompt prefix needs no feeding)."""

    def __init__(self, max_ngram: int = PROMPT_LOOKUP_NGRAM, num_tokens: int = 10) -> None:
        self.max_ngram = max_ngram
        self.num_tokens = num_tokens
        self._index = SuffixIndex(max_ngram)

    @property
    def max_nodes(self) -> int:
        """Drafted nodes per step at most."""
        return self.num_tokens

    def observe_prompt(self, prompt, feed, positions) -> None:
        pass

    def draft(self, committed: list[int], max_depth: int) -> Draft:
        chain = self._index.continuation(committed, min(self.num_tokens, max_depth))
        return Draft.chain(committed[-1], chain) if chain else Draft.root_only(committed[-1])

    def observe_step(self, committed, draft, accepted, feed) -> None:
        pass

