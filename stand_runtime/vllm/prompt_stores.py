"""Per-prompt n-gram stores of the vLLM proposer (docs/vllm.md §7.3): the n samples of one request
and repeated requests with the same prompt share one store; least recently used dropped."""

from __future__ import annotations

from collections import OrderedDict

from ..drafters.feeds import STORE_TOP_K
from ..store.ngram_store import NGramStore

FALLBACK_ENTRIES = 200_000
"""Contexts per table of the fallback store (least recently updated evicted)."""


class PromptStores:
    """One n-gram store per prompt, least recently used dropped beyond ``max_prompts``.

    Args:
        max_prompts: stores kept at most.
        max_n: longest n-gram context (tokens) of each store.
        store_type: the stores' class (the native store where it is built:
            :func:`stand_runtime.store.native_store.store_class`).
    """

    def __init__(self, max_prompts: int, max_n: int, store_type: type[NGramStore] = NGramStore) -> None:
        self.max_prompts = max_prompts
        self.max_n = max_n
        self.store_type = store_type
        self._stores: OrderedDict[tuple[int, ...], NGramStore] = OrderedDict()
        self.created = 0

    def get(self, prompt: tuple[int, ...]) -> NGramStore:
        """The store of ``prompt`` (made on first use)."""
        store = self._stores.get(prompt)
        if store is None:
            store = self._stores[prompt] = self.store_type(top_k=STORE_TOP_K, max_n=self.max_n)
            self.created += 1
            while len(self._stores) > self.max_prompts:
                self._stores.popitem(last=False)
        self._stores.move_to_end(prompt)
        return store

    def __len__(self) -> int:
        return len(self._stores)

    def entries(self) -> int:
        """Contexts held by all kept stores."""
        return sum(len(store) for store in self._stores.values())
