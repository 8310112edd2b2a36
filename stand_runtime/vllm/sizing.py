"""Chain length K for STAND in vLLM, from the toolkit's calibration and vLLM's latency here.

vLLM verifies chains, not trees. The calibrated tree family (``treeopt calibrate`` → ``export``)
already holds what a chain needs: in a STAND tree a node's first child is one Gumbel draw from q, so
the first-child path from the root *is* the chain vLLM drafts, and the calibrated acceptance
probabilities α̂ of its nodes give the chain's expected acceptance length τ̂(K) = 1 + Σ_{d<=K} α̂_d.
The cost of a step with B requests of K drafts is one forward over B (K + 1) tokens, read from a
latency profile of the vLLM engine on this machine (:func:`measure_vllm_latency`). K maximises the
expected throughput B τ̂(K) / t(B (K + 1)) (:func:`stand_runtime.target.latency.choose_size`).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable

import numpy as np

from ..checks import check_int
from ..errors import StandError
from ..limits import MAX_CHAIN_TOKENS
from ..target.latency import LatencyProfile, choose_size, profile_from_rounds
from ..sizing.tree_choice import DEFAULT_FAMILY
from ..trees.tree_io import load_family
from .engine import worker_threads

VLLM_SIZES = (1, 2, 4, 8, 16, 32, 64, 128)
"""Tokens per engine step measured for vLLM's latency profile."""


def chain_acceptance(family: str = DEFAULT_FAMILY) -> np.ndarray:
    """Expected accepted drafts of a K-token STAND chain, from a calibrated tree ``family`` (a file or
    bundled name; its largest member is read): ``[D + 1]`` float64, entry K = Σ α̂ over the first K
    nodes of the first-child path, D that path's depth. Raises StandError when it cannot be loaded."""
    members = load_family(family)
    member = members.members[max(members.members)]
    tree, alpha = member.tree, member.expected_acceptance
    sums, node = [0.0], 0
    while tree.children[node]:
        node = tree.children[node][0]
        sums.append(sums[-1] + float(alpha[node - 1]))
    return np.array(sums)


def measure_vllm_latency(llm, prompt_ids: list[int], sizes=VLLM_SIZES, short: int = 4, long: int = 24,
                         rounds: int = 3) -> LatencyProfile:
    """Seconds per vLLM engine step against tokens per step, with plain decoding (``llm`` without
    speculative decoding): a step over n tokens is timed as n copies of ``prompt_ids`` decoding one
    token each, ``(t(long) - t(short)) / (long - short)`` (prefill and start-up cancel out), median of
    ``rounds``, fitted non-decreasing (:class:`stand_runtime.target.latency.LatencyProfile`). A
    speculative step of B requests with K drafts is read as ``t(B (K + 1))``.
    """
    from vllm import SamplingParams, TokensPrompt

    prompt = TokensPrompt(prompt_token_ids=list(prompt_ids))

    def run(n: int, tokens: int) -> float:
        started = time.perf_counter()
        llm.generate([prompt] * n, SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True), use_tqdm=False)
        return time.perf_counter() - started

    run(1, short)  # warm-up
    times = np.array([[(run(n, long) - run(n, short)) / (long - short) for n in sizes] for _ in range(rounds)])
    return profile_from_rounds(sizes, times)


def choose_k(profile: LatencyProfile, batch: int = 1, family: str = DEFAULT_FAMILY,
             max_k: int = 16) -> tuple[int, list[dict]]:
    """The chain length with the most expected tokens per second for ``batch`` concurrent requests.

    Args:
        profile: vLLM's forward latency here (:func:`cached_vllm_latency`).
        batch: concurrent requests (an int >= 1).
        family: the calibrated tree family whose chain acceptance prices each K.
        max_k: the longest chain considered (an int in [1, MAX_CHAIN_TOKENS]).

    Returns:
        ``(K, curve)`` as :func:`stand_runtime.target.latency.choose_size` (K >= 1).

    Raises:
        StandError: a profile that is not a LatencyProfile, or batch or max_k out of range.
    """
    if not isinstance(profile, LatencyProfile):
        raise StandError(f"profile must be a LatencyProfile, not {type(profile).__name__}")
    batch = check_int("batch", batch, 1)
    max_k = check_int("max_k", max_k, 1, MAX_CHAIN_TOKENS)
    sums = chain_acceptance(family)[: max_k + 1].copy()
    sums[0] = -np.inf  # STAND drafts at least one token
    return choose_size(sums, profile, batch)


def _cache_path(folder, dtype: str) -> Path:
    """``<cache>/latency/vllm-<folder>-<dtype>-<threads>w-<cpu>.json``, threads those of vLLM's CPU
    worker (:func:`stand_runtime.vllm.engine.worker_threads`)."""
    import torch

    from ..target.models import cache_root

    threads = worker_threads()
    cpu = torch.backends.cpu.get_cpu_capability()
    return cache_root() / "latency" / f"vllm-{Path(folder).name}-{dtype}-{threads}w-{cpu}.json"


def read_vllm_latency(folder, dtype: str) -> LatencyProfile | None:
    """The cached vLLM latency profile of ``folder`` and ``dtype`` on this machine
    (:func:`cached_vllm_latency`), or None when none was measured (or the file is damaged)."""
    path = _cache_path(folder, dtype)
    if not path.is_file():
        return None
    try:
        return LatencyProfile.from_dict(json.loads(path.read_text())["profile"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def latency_option(profile: LatencyProfile | None) -> dict | None:
    """The proposer's ``latency`` option for ``profile`` (``{"sizes", "seconds"}``; None for None)."""
    if profile is None:
        return None
    return {"sizes": [int(s) for s in profile.sizes], "seconds": [float(v) for v in profile.seconds]}


def cached_vllm_latency(llm, folder, dtype: str, prompt_ids: list[int], *, refresh: bool = False,
                        on_measure: Callable[[], None] | None = None) -> LatencyProfile:
    """:func:`measure_vllm_latency` cached on disk per model folder, dtype, worker threads and CPU
    (:func:`_cache_path`; measured under load, a profile misleads: delete the file then).

    Args:
        llm: a plain-decoding vLLM ``LLM`` of ``folder``.
        folder: the model folder (its name keys the cache).
        dtype: the engine's dtype.
        prompt_ids: a prompt for the measurement.
        refresh: measure even when cached.
        on_measure: called before measuring (e.g. to tell the user).

    With vLLM's engine in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) a profile measured under a
    Python profiler or tracer (:func:`stand_runtime.target.timing.timing_disturbed`) is returned with a
    :class:`StandWarning` and not cached; an engine in its own process is not slowed by it.
    """
    import torch

    from ..files import cache_or_warn, json_bytes
    from ..target.timing import timing_disturbed, warn_kept_for_run

    cached = None if refresh else read_vllm_latency(folder, dtype)
    if cached is not None:
        return cached  # a damaged cache file is measured again
    if on_measure is not None:
        on_measure()
    profile = measure_vllm_latency(llm, prompt_ids)
    path = _cache_path(folder, dtype)
    entry = {"engine": "vllm", "folder": str(folder), "dtype": dtype, "threads": torch.get_num_threads(),
             "cpu": torch.backends.cpu.get_cpu_capability(), "profile": profile.as_dict()}
    disturbed = timing_disturbed() if engine_in_process() else None
    if disturbed is not None:
        warn_kept_for_run("vLLM's latency profile", f"{disturbed} in vLLM's engine process")
    else:
        cache_or_warn(path, json_bytes(entry), "vLLM's latency profile")
    return profile


def engine_in_process() -> bool:
    """Whether vLLM's ``LLM`` runs its engine core in the calling process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``,
    read as vLLM reads it; on by default)."""
    import os

    try:
        return not bool(int(os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1")))
    except ValueError:
        return False
