"""Prompt lookup decoding (Saxena, 2023): copy what followed the latest earlier occurrence.

The longest suffix n-gram (n <= 3) of prompt + output is matched at its latest earlier occurrence
and the tokens that followed it are proposed as a chain (10 by default). Drafts carry no
probabilities, so they are verified with the deterministic-draft rule.
"""

from __future__ import annotations

from ..draft import Draft


class PromptLookupDrafter:
    """Prompt lookup decoding as a :class:`stand_runtime.drafters.Drafter`.

    Args:
        max_ngram: longest suffix matched (tokens).
        num_tokens: longest chain proposed (tokens).
    """

    def __init__(self, max_ngram: int = 3, num_tokens: int = 10) -> None:
        self.max_ngram = max_ngram
        self.num_tokens = num_tokens
        self._latest: dict[tuple[int, ...], int] = {}  # n-gram → end index of its latest occurrence
        self._indexed = 0  # n-grams ending before this index are in ``_latest``
        self._sequence: list[int] = []

    @property
    def max_nodes(self) -> int:
        """Drafted nodes per step at most."""
        return self.num_tokens

    def observe_prompt(self, prompt, logits, positions) -> None:
        pass

    def draft(self, committed: list[int], max_depth: int) -> Draft:
        if committed[: len(self._sequence)] != self._sequence:  # a new sequence: start over
            self._latest, self._indexed = {}, 0
        self._sequence = list(committed)
        last = len(committed) - 1
        for end in range(self._indexed, last):  # every n-gram ending before the current suffix
            for n in range(1, self.max_ngram + 1):
                if end - n + 1 >= 0:
                    self._latest[tuple(committed[end - n + 1 : end + 1])] = end
        self._indexed = max(self._indexed, last)
        limit = min(self.num_tokens, max_depth)
        for n in range(min(self.max_ngram, len(committed)), 0, -1):
            end = self._latest.get(tuple(committed[-n:]))
            if end is not None and limit > 0:
                return Draft.chain(committed[-1], committed[end + 1 : end + 1 + limit])
        return Draft.root_only(committed[-1])

    def observe_step(self, committed, draft, accepted, logits, rows) -> None:
        pass

    def stats(self) -> None:
        return None
