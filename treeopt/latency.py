"""Forward-latency profile of the target model on this hardware, for choosing the tree size.

``--nodes auto`` picks K maximising ``(1 + best sum alpha over K nodes) / latency(K + 1)``
(DESIGN §4.3): the expected tokens per second of a step that forwards the root and K nodes. The
latency of one forward over n new tokens on a fixed prefix is measured (median of a few runs) at a
few n and interpolated linearly in between. Profiles are cached per model, device and torch thread
count as JSON under ``$STAND_CACHE_DIR/latency``.
"""

from __future__ import annotations

import hashlib
import json
import time

import numpy as np
import torch

from stand_runtime import DraftTree, cache_root, new_cache, tree_forward, write_text_atomic

DEFAULT_SIZES = (1, 2, 4, 8, 16, 32, 48, 64, 80, 96, 128)


def measure_latency(model, sizes=DEFAULT_SIZES, prefix_len: int = 512, repeats: int = 3) -> dict[int, float]:
    """Median seconds of one tree forward of n new tokens on a ``prefix_len`` cached prefix.

    The tree is a chain (the mask shape does not change the cost of a dense forward).

    Returns:
        ``{n: seconds}`` for each n in ``sizes``.
    """
    device = next(model.parameters()).device
    vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(0)
    prefix = torch.randint(0, vocab, (1, prefix_len), generator=gen).to(device)
    cache = new_cache(model)
    with torch.inference_mode():
        model(input_ids=prefix, cache=cache)
    profile = {}
    for n in sizes:
        chain = DraftTree.chain(n - 1)
        tokens = torch.randint(0, vocab, (n,), generator=gen).tolist()
        times = []
        for _ in range(repeats + 1):
            start = time.perf_counter()
            tree_forward(model, cache, tokens, chain.depths, chain.ancestor_mask, prefix_len)
            if device.type == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
            cache.crop(-n)
        profile[n] = float(np.median(times[1:]))  # the first run warms caches up
    return profile


def cached_latency(model, model_name: str, refresh: bool = False, on_measure=None) -> dict[int, float]:
    """The latency profile of ``model`` on this device, measured once and cached."""
    device = next(model.parameters()).device
    key = hashlib.sha256(f"{model_name}|{device}|{torch.get_num_threads()}|{DEFAULT_SIZES}".encode()).hexdigest()[:16]
    path = cache_root() / "latency" / f"{key}.json"
    if path.is_file() and not refresh:
        try:
            data = json.loads(path.read_text())
            return {int(k): float(v) for k, v in data["latency_s"].items()}
        except (OSError, ValueError, KeyError):
            pass  # a corrupt cache entry is measured again
    if on_measure is not None:
        on_measure()
    profile = measure_latency(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps({"model": model_name, "device": str(device), "threads": torch.get_num_threads(), "latency_s": profile}))
    return profile


def interpolate(profile: dict[int, float], n: int) -> float:
    """Latency (s) of a forward over n tokens, linear between measured sizes, flat-extrapolated slope beyond."""
    sizes = sorted(profile)
    values = [profile[s] for s in sizes]
    if n <= sizes[-1]:
        return float(np.interp(n, sizes, values))
    slope = (values[-1] - values[-2]) / (sizes[-1] - sizes[-2])
    return values[-1] + slope * (n - sizes[-1])


def choose_nodes(best_sum: np.ndarray, profile: dict[int, float]) -> tuple[int, list[dict]]:
    """K maximising ``(1 + best_sum[K]) / latency(K + 1)``; also the curve (one row per K).

    Args:
        best_sum: ``[K_max + 1]`` best ``sum alpha`` per tree size (index 0 = root only).
        profile: ``{tokens: seconds}``.

    Returns:
        ``(K, curve)`` where curve rows hold ``nodes``, ``expected_acceptance_length``,
        ``latency_s`` and ``tokens_per_s``.
    """
    curve = []
    for k, total in enumerate(best_sum):
        if not np.isfinite(total):
            break
        latency = interpolate(profile, k + 1)
        curve.append({"nodes": k, "expected_acceptance_length": 1.0 + float(total), "latency_s": latency,
                      "tokens_per_s": (1.0 + float(total)) / latency})
    best = max(curve, key=lambda row: row["tokens_per_s"])
    return best["nodes"], curve
