"""Prompt prefixes already prefilled, kept across decoding calls (ours; docs/design.md §1.5).

A tree search sends the same problem again and again with a longer path: a DVTS round's prompt is the
round before's plus the chosen step. Prefilling each round's prompt from its first token made the
prefill ~10% of plain decoding's DVTS time and 12-16% of STAND's (whose decoding is shorter), so
:class:`PrefixCache` keeps the single-row KV cache of each prompt a batch prefilled; a later prompt
that starts with a kept one is prefilled from a copy of it and only its new tokens run through the
target. The KV entries of a prefix do not depend on what follows it, so the cache is the one a full
prefill would give, up to the float rounding of a forward over fewer tokens.

A drafter that learns from the prompt's logits (``observe_prompt``) is only fed the new positions, so
a kept prefix is used for a row only when the row's drafter memory was fed that whole prefix (it is
named among the entry's ``learners``; a drafter whose ``reads_prompt`` is False needs nothing).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Sequence

from .kv_cache import new_cache

MAX_TOKENS = 16384
"""Cached tokens kept in all (least recently used dropped beyond): ~0.4 GB of the default model's KV in
bfloat16, ~0.8 GB in float32."""


class PrefixCache:
    """Single-row KV caches of prompt prefixes (module docstring).

    Args:
        max_tokens: tokens kept in all (>= 0; 0 keeps nothing).
    """

    def __init__(self, max_tokens: int = MAX_TOKENS) -> None:
        self.max_tokens = max_tokens
        self._entries: OrderedDict[tuple, tuple[object, tuple]] = OrderedDict()  # tokens -> (cache, learners)
        self._tokens = 0
        self.hits = 0  # prompts prefilled from a kept prefix
        self.reused = 0  # prompt tokens not run again

    def longest(self, tokens: Sequence[int], learners: Sequence[object]) -> tuple[int, object] | None:
        """The longest kept prefix of ``tokens`` fed to every one of ``learners`` (memory objects):
        ``(its length, its cache)``, or None. The cache is shared: copy it before appending."""
        best = None
        for key, (cache, fed) in self._entries.items():
            if (len(key) <= len(tokens) and (best is None or len(key) > len(best[0]))
                    and all(any(m is learner for m in fed) for learner in learners)
                    and tuple(tokens[: len(key)]) == key):
                best = (key, cache)
        if best is None:
            return None
        self._entries.move_to_end(best[0])
        self.hits += 1
        self.reused += len(best[0])
        return len(best[0]), best[1]

    def add(self, tokens: Sequence[int], cache, learners: Sequence[object]) -> None:
        """Keep ``cache`` (holding ``tokens``, read-only from now on) and the memories fed all of it
        (a key kept already keeps its cache and adds ``learners``)."""
        key = tuple(tokens)
        if not key or len(key) > self.max_tokens:
            return
        if key in self._entries:  # the same states: keep the entry, with every memory fed it
            kept, fed = self._entries[key]
            self._entries[key] = (kept, fed + tuple(m for m in learners if not any(m is f for f in fed)))
            self._entries.move_to_end(key)
            return
        self._entries[key] = (cache, tuple(learners))
        self._entries.move_to_end(key)
        self._tokens += len(key)
        while self._tokens > self.max_tokens:
            dropped, _ = self._entries.popitem(last=False)
            self._tokens -= len(dropped)

    def __len__(self) -> int:
        return len(self._entries)


def copied_cache(model, cache):
    """A fresh cache (:func:`.kv_cache.new_cache`) holding a copy of ``cache``'s states, to append to."""
    fresh = new_cache(model)
    for index, layer in enumerate(cache.layers):
        keys = getattr(layer, "keys", None)
        if keys is None or keys.dim() != 4:
            continue
        fresh.update(keys, layer.values, index)
    return fresh
