"""The trace bench projected onto other hardware: speedup over plain decoding from a latency profile.

A speculative step forwards the root and K drafted nodes, costs t(K + 1) on the target's hardware
plus host(K) of drafting and feeding on the host, and emits τ tokens; plain decoding emits one token
per t(1) (+ its own host work). So the speedup over plain decoding is

    projected = τ · t(1) / (t(K + 1) + host(K))

(docs/trees.md §6.6 sizes trees with the host-free version, τ̂(K) / t(K + 1); Leviathan et al.,
2023, §3.4 give the same walltime ratio for chains). The trace bench measures τ, K (drafted nodes
per step) and host(K) (drafting and feeding); a latency profile gives t(n) for the hardware in
question. Left out: plain decoding's own host work (``ar`` is not a trace-bench method: its
denominator is t(1) alone, which favours plain decoding slightly); host time is this machine's; the
replay does no logits processing and keeps no KV cache (no compaction counted).

Profile files (:func:`load_latency_file`): a cached profile of this machine (written by
:func:`stand_runtime.target.latency.cached_latency`: ``{"model", "threads", "cpu", "profile": {"sizes",
"seconds", ...}}``; not the ``linears-*.json`` kernel choices beside it), a bare
:meth:`LatencyProfile.as_dict`, or ``benchmarks/gpu/gpu_check.py``'s output
(``{"speed": {"float32": {"latency_ms": {"1": t1, ...}}}}``, milliseconds per forward by tokens).
"""

from __future__ import annotations

import math
from pathlib import Path

from stand_runtime import LatencyProfile, StandError
from stand_runtime.files import parse_json_object

FORMULA = "tau * t(1) / (t(K + 1) + host(K))"
PLAIN_NOTE = "ar is not a trace-bench method: plain decoding's denominator is t(1) alone (its host work is not counted)"
GPU_CHECK_DTYPE = "float32"
"""The dtype of a gpu-check file's latency map that is read: the engine's default dtype."""


def profile_from_json(data: dict, where: str) -> tuple[LatencyProfile, str]:
    """A latency profile from a parsed JSON file (one of the module docstring's formats), and the name
    of its format; ``where``: the file's name, for errors.

    Raises:
        StandError: no latency in it, or sizes/latencies that are not a profile (one line).
    """
    if isinstance(data.get("speed"), dict):
        speed = data["speed"]
        if not isinstance(speed.get(GPU_CHECK_DTYPE), dict) or "latency_ms" not in speed[GPU_CHECK_DTYPE]:
            raise StandError(f"{where}: no speed.{GPU_CHECK_DTYPE}.latency_ms in this gpu-check file "
                             f"(dtypes: {', '.join(map(str, speed)) or 'none'})")
        latency = speed[GPU_CHECK_DTYPE]["latency_ms"]
        if not isinstance(latency, dict):
            raise StandError(f"{where}: speed.{GPU_CHECK_DTYPE}.latency_ms must map tokens to milliseconds")
        return checked_profile(list(latency), [_number(v, where) / 1e3 for v in latency.values()], where), "gpu-check"
    kind = "stand-latency-cache" if isinstance(data.get("profile"), dict) else "latency-profile"
    body = data["profile"] if kind == "stand-latency-cache" else data
    if "sizes" not in body or "seconds" not in body:
        raise StandError(f"{where}: no latency in this file (expected a cached latency profile with sizes and seconds, "
                         "or a gpu-check file with speed.float32.latency_ms)")
    if not isinstance(body["sizes"], list) or not isinstance(body["seconds"], list):
        raise StandError(f"{where}: sizes and seconds must be lists")
    return checked_profile(body["sizes"], [_number(v, where) for v in body["seconds"]], where), kind


def _number(value, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise StandError(f"{where}: latencies must be positive numbers, got {value!r}")
    return float(value)


def _tokens(size) -> int | None:
    """A size as a token count (an int, or a gpu-check key such as ``"16"``), None if it is not one."""
    if isinstance(size, str) and size.strip().isdigit():
        size = int(size)
    return size if isinstance(size, int) and not isinstance(size, bool) and size >= 1 else None


def checked_profile(sizes: list, seconds: list[float], where: str) -> LatencyProfile:
    """``LatencyProfile(sizes, seconds)`` after checking it can be projected with.

    Raises:
        StandError: sizes that are not whole token counts, not strictly increasing, not starting at 1
            (t(1) is plain decoding's step), fewer than two, or a length unlike ``seconds``.
    """
    tokens = [_tokens(s) for s in sizes]
    if None in tokens:
        raise StandError(f"{where}: sizes must be whole token counts of at least 1, got {sizes!r}")
    if len(tokens) != len(seconds):
        raise StandError(f"{where}: {len(tokens)} sizes but {len(seconds)} latencies")
    if len(tokens) < 2:
        raise StandError(f"{where}: a profile needs at least two sizes, got {len(tokens)}")
    if any(b <= a for a, b in zip(tokens, tokens[1:])):
        raise StandError(f"{where}: sizes must be strictly increasing, got {tokens}")
    if tokens[0] != 1:
        raise StandError(f"{where}: sizes must start at 1 token (plain decoding's forward), got {tokens[0]}")
    return LatencyProfile(tuple(tokens), tuple(seconds))


def load_latency_file(path) -> tuple[LatencyProfile, str]:
    """The latency profile in the JSON file ``path`` and its format's name (see the module's text).

    Raises:
        StandError: a missing or unreadable file, not JSON, no latency in it, or a bad profile (one line).
    """
    path = Path(path)
    if not path.is_file():
        raise StandError(f"latency profile {path} does not exist")
    try:
        text = path.read_bytes()
    except OSError as error:
        raise StandError(f"cannot read latency profile {path}: {error.strerror or error}") from None
    return profile_from_json(parse_json_object(text, str(path), "expected a latency profile"), str(path))


def projected_speedup(tau: float, nodes: float, profile: LatencyProfile, host_s: float = 0.0,
                      plain_host_s: float = 0.0) -> float:
    """Speedup over plain decoding, ``τ · (t(1) + plain_host_s) / (t(K + 1) + host_s)``: ``tau`` tokens per
    step, K = ``nodes`` drafted per step (a mean: :meth:`LatencyProfile.at` interpolates), ``host_s`` and
    ``plain_host_s`` seconds of host work per speculative and plain step."""
    return tau * (profile.at(1) + plain_host_s) / (profile.at(nodes + 1) + host_s)


def projection_block(results: list[dict], profile: LatencyProfile, source: dict) -> dict:
    """The ``"projection"`` block of the trace bench's JSON: per method of ``results``
    (:func:`treeopt.evaluate.trace_bench.trace_results_json`'s) the projected speedup with the measured
    host time and with host = 0; ``source`` (``path``, ``format``) is copied into the block.

    Returns ``{"formula", "profile" (source, sizes, seconds), "plain" (t1_ms, host_ms None, note), "methods":
    [{label, acceptance_length, nodes_per_step, forward_ms (t(K + 1)), host_ms, speedup, speedup_interval_95
    (τ's interval), speedup_host_free, host_cost (share lost to host work), extrapolated (K + 1 beyond the
    profile)}]}``."""
    t1 = profile.at(1)
    methods = []
    for r in results:
        tau, nodes = r["acceptance_pooled"], r["nodes_per_step"]
        host_s = (r["drafting_us_per_step"] + r["feeding_us_per_step"]) / 1e6
        speedup, free = projected_speedup(tau, nodes, profile, host_s), projected_speedup(tau, nodes, profile)
        low, high = r.get("interval_pooled_95") or (tau, tau)
        methods.append({"label": r["label"], "acceptance_length": tau, "nodes_per_step": nodes,
                        "forward_ms": 1e3 * profile.at(nodes + 1), "host_ms": 1e3 * host_s, "speedup": speedup,
                        "speedup_interval_95": [speedup * low / tau, speedup * high / tau],
                        "speedup_host_free": free, "host_cost": 1.0 - speedup / free,
                        "extrapolated": nodes + 1 > profile.sizes[-1]})
    return {"formula": FORMULA,
            "profile": {**source, "sizes": list(profile.sizes), "seconds": list(profile.seconds)},
            "plain": {"t1_ms": 1e3 * t1, "host_ms": None, "note": PLAIN_NOTE},
            "methods": methods}
