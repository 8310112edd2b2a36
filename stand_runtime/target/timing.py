"""Timing the target's forward (what latency profiles, :mod:`.latency`, and the kernel choice,
:func:`.fast_linear.choose_kernels`, are measured with): a KV cache holding a random prefix, and one chain forward
of random tokens on it, timed and then cropped off again."""

from __future__ import annotations

import hashlib
import sys
import time
import warnings

import torch

from ..trees.tree import DraftTree
from .forward import model_device, tree_forward, with_cache
from .kv_cache import new_cache


def architecture_digest(model) -> str:
    """What a forward's cost depends on in the model itself, as a SHA-256 hex digest: its type and every
    parameter's name and shape (not the weights, not the folder: a moved model keeps its timings)."""
    shapes = [(name, tuple(p.shape)) for name, p in model.named_parameters()]
    return hashlib.sha256(repr((getattr(model.config, "model_type", ""), shapes)).encode()).hexdigest()


def timing_disturbed() -> str | None:
    """Why timings taken now would not be this machine's, or None: a Python profiler or tracer is active
    (``cProfile``, a debugger, line coverage), adding a fixed cost to every Python call that makes a
    forward of few tokens look dear. What is measured so serves only the run that measured it."""
    if sys.getprofile() is not None:
        return "a Python profiler is active"
    if sys.gettrace() is not None:
        return "a Python tracer (debugger or coverage) is active"
    return None


def warn_kept_for_run(what: str, reason: str) -> None:
    """Say, with a :class:`StandWarning` at the caller's caller, that ``what`` (e.g. ``"the latency
    profile"``) is kept for this run only because of ``reason`` (:func:`timing_disturbed`'s answer)."""
    from ..errors import StandWarning

    warnings.warn(StandWarning(f"{what} is kept for this run only ({reason}: its timings are not this machine's)"),
                  stacklevel=3)


def warm_cache(model, prefix_len: int, longest: int, generator: torch.Generator):
    """``(cache, tokens it holds)``: a new KV cache holding ``prefix_len`` random tokens (fewer where
    the model's context has no room for them plus ``longest`` more, at least 1)."""
    positions = getattr(model.config, "max_position_embeddings", None) or 4096
    prefix_len = min(prefix_len, max(1, positions - longest - 1))
    cache = new_cache(model)
    with torch.inference_mode():
        model(input_ids=torch.randint(0, model.config.vocab_size, (1, prefix_len), generator=generator)
              .to(model_device(model)), **with_cache(model, cache))
    return cache, prefix_len


def time_chain(model, cache, chain: DraftTree, prefix_len: int, generator: torch.Generator) -> float:
    """Seconds of one tree forward of ``chain`` (n = ``chain.num_nodes + 1`` random tokens) on
    ``cache`` holding ``prefix_len`` tokens (on CUDA up to the device's end of it); the n entries are
    cropped off the cache afterwards."""
    n = chain.num_nodes + 1
    tokens = torch.randint(0, model.config.vocab_size, (n,), generator=generator).tolist()
    start = time.perf_counter()
    tree_forward(model, cache, tokens, chain.depths, chain.ancestor_mask, prefix_len)
    if model_device(model).type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    cache.crop(-n)
    return seconds
