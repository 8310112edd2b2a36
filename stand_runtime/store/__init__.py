"""The logit n-gram store: per context the target's top-k next-token distribution (STAND paper §3.1).

Modules: ``ngram_store`` (the store: update, merge, longest-match lookup, bounds), ``entry`` (a
context's entry and the store's statistics), ``observation`` (checking and truncating one
observation of p), ``admission`` (the reserve a merge keeps below the top k), ``blend`` (the
Witten-Bell blended lookup and the 0-gram table).
"""

from .blend import BLEND_WIDTH
from .entry import StoreEntry, StoreStats
from .ngram_store import MAX_CONTEXT, MAX_ENTRIES, MAX_TOP_K, NGramStore

__all__ = ["BLEND_WIDTH", "MAX_CONTEXT", "MAX_ENTRIES", "MAX_TOP_K", "NGramStore", "StoreEntry", "StoreStats"]
