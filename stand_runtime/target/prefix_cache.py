"""Prompt prefixes already prefilled, kept across decoding calls (ours; docs/architecture.md §1.5).

A tree search sends the same problem again and again with a longer path: a DVTS round's prompt is the
round before's plus the chosen step, so :class:`PrefixCache` keeps the KV states of each prompt a batch prefilled; a later prompt that
starts with a kept one is prefilled from a copy of them and only its new tokens run through the
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

MAX_BYTES = 512 * 2**20
"""KV bytes kept in all (least recently used dropped beyond): ~11,000 tokens of the default model in
float32, ~22,000 in bfloat16."""


class PrefixCache:
    """KV states of prompt prefixes (module docstring), each kept as a compact copy per layer.

    Args:
        max_bytes: bytes of KV states kept in all (>= 0; 0 keeps nothing).
    """

    def __init__(self, max_bytes: int = MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[tuple, tuple[list, tuple, int]] = OrderedDict()  # tokens -> (states, learners, bytes)
        self._bytes = 0
        self.hits = 0  # prompts prefilled from a kept prefix
        self.reused = 0  # prompt tokens not run again

    def longest(self, tokens: Sequence[int], learners: Sequence[object]) -> tuple[int, list] | None:
        """The longest kept prefix of ``tokens`` fed to every one of ``learners`` (memory objects):
        ``(its length, its states)`` (per layer ``(keys, values)``, ``[1, kv_heads, length, head_dim]``;
        read-only: :func:`copied_cache` makes a cache to append to), or None."""
        best = None
        for key, (states, fed, _) in self._entries.items():
            if (len(key) <= len(tokens) and (best is None or len(key) > len(best[0]))
                    and all(any(m is learner for m in fed) for learner in learners)
                    and tuple(tokens[: len(key)]) == key):
                best = (key, states)
        if best is None:
            return None
        self._entries.move_to_end(best[0])
        self.hits += 1
        self.reused += len(best[0])
        return len(best[0]), best[1]

    def add(self, tokens: Sequence[int], cache, learners: Sequence[object]) -> None:
        """Keep a compact copy of ``cache``'s states (it holds ``tokens``) and the memories fed all of
        it (a key kept already keeps its states and adds ``learners``)."""
        key = tuple(tokens)
        if not key:
            return
        if key in self._entries:  # the same states: keep the entry, with every memory fed it
            states, fed, size = self._entries[key]
            self._entries[key] = (states, fed + tuple(m for m in learners if not any(m is f for f in fed)), size)
            self._entries.move_to_end(key)
            return
        states = [(layer.keys.clone(), layer.values.clone()) for layer in cache.layers
                  if getattr(layer, "keys", None) is not None and layer.keys.dim() == 4]
        size = sum(k.nbytes + v.nbytes for k, v in states)
        if size > self.max_bytes:
            return
        self._entries[key] = (states, tuple(learners), size)
        self._bytes += size
        while self._bytes > self.max_bytes:
            _, (_, _, dropped) = self._entries.popitem(last=False)
            self._bytes -= dropped

    def __len__(self) -> int:
        return len(self._entries)


def copied_cache(model, states: list):
    """A fresh cache (:func:`.kv_cache.new_cache`) holding a copy of kept ``states``, to append to."""
    fresh = new_cache(model)
    for index, (keys, values) in enumerate(states):
        fresh.update(keys, values, index)
    return fresh
