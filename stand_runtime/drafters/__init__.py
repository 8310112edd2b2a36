"""Drafting methods: what proposes each step's draft, and what each learns from verification.

One interface (:class:`Drafter`) for every method, so all run through the same engine and are
verified by the same lossless rules (:mod:`stand_runtime.verify`):

- ``stand``: STAND, Gumbel-Top-K drafts from the logit n-gram store (:mod:`.stand`) into a static
  tree, or into a dynamic tree spent best-first (:mod:`.best_first`, ``tree="dynamic"``);
- ``stand-det``: STAND with deterministic top-m drafts (the paper's ablation);
- ``pld``: prompt lookup decoding (:mod:`.prompt_lookup`);
- ``recycle``: Token Recycling (:mod:`.token_recycling`);
- ``suffix``: SuffixDecoding's dynamic trees from suffix trees of earlier outputs (:mod:`.suffix_decoding`,
  needs ``arctic-inference``);
- ``ar``: plain decoding (no drafter).
"""

from __future__ import annotations

import importlib.util
from typing import Sequence

from ..checks import check_bool, check_int
from ..errors import StandError
from ..limits import MAX_COPY_TOKENS, MAX_VOCAB, METHODS
from ..store.native_store import store_class
from ..store.ngram_store import NGramStore
from .base import Drafter
from ..store.drafting import DYNAMIC, DYNAMIC_MAX_N, DynamicTree, best_first_draft, draft_tree, parse_dynamic
from .prompt_lookup import PromptLookupDrafter
from .stand import STORE_TOP_K, StandDrafter, store_params
from .suffix_decoding import SUFFIX_TUNED, SuffixDecodingDrafter, SuffixMemory, SuffixSettings
from .token_recycling import RecyclingMatrix, TokenRecyclingDrafter
from ..trees.tree_walk import Extension

# METHODS, the decoding methods, is defined in stand_runtime.limits (the CLI's help lists it without numpy)

STORE_METHODS = ("stand", "stand-det")
"""The methods that draft from an n-gram store (and so take ``feed_rejected`` and ``diagnose``)."""

TREE_METHODS = ("stand", "stand-det", "recycle")
"""The methods that draft into a static tree (and so take ``tree``)."""

DYNAMIC_METHODS = STORE_METHODS
"""The methods that can draft a dynamic tree (``tree="dynamic"`` or ``"dynamic-N"``)."""

MEMORY_METHODS = STORE_METHODS + ("recycle", "suffix")
"""The methods with a drafter memory (:func:`new_memory`; ``ar`` drafts nothing, ``pld`` reads the sequence)."""

COPY_TOKENS = 10
"""STAND's default copy path: up to 10 tokens that followed the latest earlier occurrence of the
context's suffix, grafted onto the drafted tree (prompt lookup's chain, inside STAND's draft)."""

VALUE_COPY_TOKENS = MAX_COPY_TOKENS
"""A value-sized tree's default copy chain (64 tokens): the rule keeps only the tokens that pay, so a
repeated span (a loop, a copied block) is drafted as far as it holds (a fixed tree grafts its whole
copy path, so keeps :data:`COPY_TOKENS`)."""

Memory = NGramStore | RecyclingMatrix | SuffixMemory
"""A drafter's memory that several calls may share (best-of-N trajectories of one problem)."""


OPTIONAL_PACKAGES = {"suffix": ("arctic_inference", "pip install --no-deps arctic-inference")}
"""Methods that need a package beyond the toolkit's dependencies: the module and how to install it."""


def check_method(method: str, *, tree=None, memory=None, feed_rejected: bool = False,
                 copy_tokens: int | None = None, stand_switches: Sequence[str] = ()) -> None:
    """Check that ``method`` exists, can run here and takes the options given (before any model work).

    The one home of the method options' checks: every entry point (``generate``, ``generate_batch``,
    ``decode_rows``, :class:`stand_runtime.HFBackend`, the benches, the CLI) calls it, so none
    accepts what another refuses. ``stand_switches``: the STAND-only expert switches set, as words
    (:attr:`stand_runtime.method.Ablation.stand_switches`).

    Raises:
        StandError: unknown method; a method whose optional package is missing (naming the install
            command); a non-bool ``feed_rejected``; ``copy_tokens`` not None
            (the method's default) or an integer in [0, 64]; a STAND option (``feed_rejected``,
            ``copy_tokens`` other than the default, ``stand_switches``) for another method; a tree for a method without
            one; a memory of the wrong kind; a store whose contexts are shorter than a dynamic tree's.
    """
    if not isinstance(method, str) or method not in METHODS:
        raise StandError(f"unknown method {method!r} (valid: {', '.join(METHODS)})")
    check_method_available(method)
    feed_rejected = check_bool("feed_rejected", feed_rejected)
    copy_tokens = None if copy_tokens is None else check_int("copy_tokens", copy_tokens, 0, MAX_COPY_TOKENS)
    if method not in STORE_METHODS:
        given = (["feed_rejected"] if feed_rejected else []) + list(stand_switches)
        if copy_tokens not in (None, COPY_TOKENS):
            given.append(f"copy_tokens={copy_tokens}")
        if given:
            raise StandError(f"{', '.join(given)} applies to {' and '.join(STORE_METHODS)}, not {method!r}")
    if tree is not None and method not in TREE_METHODS:
        raise StandError(f"method {method!r} drafts no static tree: a tree applies to {', '.join(TREE_METHODS)}")
    dynamic = parse_dynamic(tree) if tree is not None else None
    if dynamic is not None and method not in DYNAMIC_METHODS:
        raise StandError(f"a dynamic tree applies to {', '.join(DYNAMIC_METHODS)}; {method!r} drafts into a static tree")
    if memory is None:
        return
    if method in STORE_METHODS and not isinstance(memory, NGramStore):
        raise StandError(f"method {method!r} shares an NGramStore, not {type(memory).__name__}")
    if method == "recycle" and not isinstance(memory, RecyclingMatrix):
        raise StandError(f"method 'recycle' shares a RecyclingMatrix, not {type(memory).__name__}")
    if method == "suffix" and not isinstance(memory, SuffixMemory):
        raise StandError(f"method 'suffix' shares a SuffixMemory, not {type(memory).__name__}")
    if method in ("ar", "pld"):
        raise StandError(f"method {method!r} has no memory to share (store applies to stand, stand-det, recycle, suffix)")
    if dynamic is not None and memory.max_n < DYNAMIC_MAX_N:
        raise StandError(f"a dynamic tree drafts from contexts of up to {DYNAMIC_MAX_N} tokens but the store given keeps "
                         f"{memory.max_n}: pass NGramStore(max_n={DYNAMIC_MAX_N}) (method.new_memory(vocab) gives the right "
                         f"kind), or tree='auto' for the static tree")


def check_method_available(method: str) -> None:
    """Raises StandError when ``method`` needs a package that is not installed (found without
    importing it, so a bench refuses before the model loads rather than after the first methods ran)."""
    needed = OPTIONAL_PACKAGES.get(method)
    if needed is not None and importlib.util.find_spec(needed[0]) is None:
        raise StandError(f"method {method!r} needs {needed[0].replace('_', '-')}: {needed[1]}")


def takes_tree(method: str, spec) -> bool:
    """Whether ``method`` drafts into the tree ``spec`` (tree methods; a dynamic tree only for
    :data:`DYNAMIC_METHODS`): the rule benches use to hand each method the trees it can take."""
    return method in TREE_METHODS and (method in DYNAMIC_METHODS or parse_dynamic(spec) is None)


def new_memory(method: str, vocab: int, tree=None, base: NGramStore | None = None) -> Memory | None:
    """A fresh drafter memory for ``method`` (None for methods without one); a store for a dynamic
    ``tree`` keeps contexts up to :data:`DYNAMIC_MAX_N` tokens (the paper's store: 3); where the
    extension is built (unless ``STAND_NATIVE=0``) the store is the native one, over which every STAND tree (static, fixed-budget
    or value-sized dynamic) is drafted in C++ (:mod:`stand_runtime.store.native_store`,
    :mod:`stand_runtime.store.native_draft`). ``base``: a STAND store's cross-prompt memory (a store
    from this function for the same method and tree, shared by many problems' stores: :class:`NGramStore`).

    Raises:
        StandError: ``vocab`` not an integer in [1, :data:`stand_runtime.limits.MAX_VOCAB`] (for every
            method, so none accepts what another refuses); a ``base`` for another method or one the store
            refuses (:func:`stand_runtime.store.ngram_store.check_base`).
    """
    vocab = check_int("vocab", vocab, 1, MAX_VOCAB)
    if base is not None and method not in STORE_METHODS:
        raise StandError(f"a cross-prompt memory (base) is a STAND store's: {method!r} has none")
    if method in STORE_METHODS:
        dynamic = parse_dynamic(tree)
        return store_class(True)(top_k=STORE_TOP_K, max_n=DYNAMIC_MAX_N if dynamic is not None else 3, base=base)
    if method == "recycle":
        return RecyclingMatrix(vocab)
    if method == "suffix":
        return SuffixMemory()
    return None


__all__ = [
    "COPY_TOKENS", "MAX_COPY_TOKENS", "DYNAMIC", "DYNAMIC_MAX_N", "DYNAMIC_METHODS", "Drafter", "DynamicTree",
    "Extension", "MEMORY_METHODS", "METHODS", "Memory", "OPTIONAL_PACKAGES", "PromptLookupDrafter", "RecyclingMatrix", "STORE_METHODS",
    "STORE_TOP_K", "SUFFIX_TUNED", "StandDrafter", "SuffixDecodingDrafter", "SuffixMemory", "SuffixSettings",
    "TREE_METHODS", "TokenRecyclingDrafter", "best_first_draft", "check_method", "check_method_available", "draft_tree",
    "new_memory", "parse_dynamic", "store_params", "takes_tree",
]
