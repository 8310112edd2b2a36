"""Which linear kernel computes a forward of few tokens on this machine: measured on whole forwards.

:mod:`stand_runtime.target.fast_linear` holds each linear layer twice (the stock weight for MKL's
``F.linear``, a oneDNN-blocked copy) and computes calls of at most S rows with the stock kernel. The
best S differs between machines of one kind, and timing each layer shape alone does not find it (a
layer timed in a loop sits in the cache, and mixing kernels within one forward costs more than either
alone), so S is measured on the model's own forwards: :func:`measure_stock_rows` times both kernels at
each size of :data:`SIZES` on a short cached prefix, interleaved, and S is the largest size up to
which the stock kernel was faster at every measured size. Beyond the last size the packed kernel
always runs. The choice is cached per model and machine next to the latency profiles
(:func:`choose_kernels`); docs/decisions.md.
"""

from __future__ import annotations

import hashlib
import json
import platform
from pathlib import Path

import numpy as np
import torch

from ..files import json_bytes, write_cache_file
from ..trees.tree import DraftTree
from .fast_linear import PackedLinear, use_stock_up_to
from .timing import architecture_digest, time_chain, timing_disturbed, warm_cache

SIZES = (1, 2, 3, 4, 5, 6, 8)
"""Tokens per forward at which the two kernels are timed; beyond the last the packed kernel runs."""

ROUNDS = 5
"""Interleaved timing rounds (after one warm-up round); each size's time is its median."""

PREFIX = 64
"""Cached tokens the timed forwards attend to (the linears' cost does not depend on it)."""

_CPU_FIELDS = ("vendor_id", "cpu family", "model", "model name", "stepping", "cache size", "flags")
"""``/proc/cpuinfo`` fields naming the CPU (several generations share one model name)."""


def measure_stock_rows(model, sizes=SIZES, rounds: int = ROUNDS, seed: int = 0) -> tuple[int, dict]:
    """The largest S of ``sizes`` such that a forward of n tokens was faster with the stock kernel
    than with the packed one at every measured n <= S (0: packed from one token on).

    Each round times, for every size in a random order, one chain forward of n random tokens with
    each kernel (in random order), on a :data:`PREFIX`-token cache (shorter where the model's context
    is). The model's packed layers end as they were.

    Args:
        model: a model whose linears :func:`~stand_runtime.target.fast_linear.prepack_linears` packed,
            stock weights kept.
        sizes: increasing tokens per forward.
        rounds: timed rounds (>= 1).
        seed: of the random tokens and orders.

    Returns:
        ``(S, {"sizes", "stock_s", "packed_s"})``: S and the medians (seconds) it was chosen from.

    Raises:
        ValueError: ``rounds`` < 1, or a packed layer's stock weight was released.
    """
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, not {rounds}")
    layers = [m for m in model.modules() if isinstance(m, PackedLinear)]
    before = [layer.stock_up_to for layer in layers]
    gen = torch.Generator().manual_seed(seed)
    order = np.random.default_rng(seed)
    chains = {n: DraftTree.chain(n - 1) for n in sizes}
    times = {True: np.zeros((rounds, len(sizes))), False: np.zeros((rounds, len(sizes)))}
    try:
        with torch.inference_mode():
            cache, prefix = warm_cache(model, PREFIX, max(sizes), gen)
            for round_index in range(rounds + 1):
                for column in order.permutation(len(sizes)):
                    n = sizes[column]
                    for stock in order.permutation([True, False]):
                        use_stock_up_to(model, n if stock else 0)
                        seconds = time_chain(model, cache, chains[n], prefix, gen)
                        if round_index:  # round 0 warms both kernels up
                            times[bool(stock)][round_index - 1, column] = seconds
    finally:
        for layer, rows in zip(layers, before):
            layer.stock_up_to = rows
    stock_s, packed_s = np.median(times[True], axis=0), np.median(times[False], axis=0)
    rows = 0
    for n, s, p in zip(sizes, stock_s, packed_s):
        if not s < p:
            break
        rows = n
    return rows, {"sizes": list(sizes), "stock_s": stock_s.tolist(), "packed_s": packed_s.tolist()}


def machine_key(model) -> str:
    """What the choice depends on, as 16 hex digits of a SHA-256: the model (its architecture,
    :func:`~stand_runtime.target.timing.architecture_digest`, not the folder it was loaded from, so
    a moved or copied cache keeps its choice; its packed linears' shapes; a packed dtype other than
    float32), the CPU (its ``/proc/cpuinfo`` identity, else the platform's name), threads, CPU
    capability, torch and :data:`SIZES`."""
    name = platform.processor()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            first = info.read().split("\n\n")[0]  # the first processor's block
        fields = {key.strip(): value for key, value in (line.split(":", 1) for line in first.splitlines() if ":" in line)}
        identity = [fields.get(key, "").strip() for key in _CPU_FIELDS]
        if any(identity):
            name = "/".join(identity)
    except OSError:
        pass
    packed = [m for m in model.modules() if isinstance(m, PackedLinear)]
    shapes = sorted({(m.in_features, m.out_features) for m in packed})
    parts = [architecture_digest(model), repr(shapes),
             name, str(torch.get_num_threads()), torch.backends.cpu.get_cpu_capability(), torch.__version__, repr(SIZES)]
    dtypes = sorted({str(m.weight.dtype) for m in packed} - {str(torch.float32)})
    if dtypes:  # a bfloat16 model's kernels are timed apart
        parts.append(repr(dtypes))
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


def _cached_rows(path: Path | None) -> int | None:
    """S from a cache file, or None when there is none or it does not hold one of 0 and :data:`SIZES`."""
    if path is None or not path.is_file():
        return None
    try:
        rows = json.loads(path.read_text())["stock_rows"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return rows if type(rows) is int and (rows == 0 or rows in SIZES) else None


def choose_kernels(model, cache_dir: Path | None) -> int:
    """Set the stock kernel for a packed model's forwards of at most S tokens (:func:`measure_stock_rows`)
    and release the stock weights when S is 0. S is read from
    ``cache_dir/linears-<key>.json`` (``<key>``: :func:`machine_key`) when measured before on this
    machine, else measured and written there (``{"stock_rows": S, "cpu", "threads", "sizes",
    "stock_s", "packed_s"}``); a file that does not hold a valid S is measured again, and a folder
    that cannot be written only loses the cache, as do timings taken under a Python profiler or
    tracer. A model without packed layers is left alone.

    Args:
        model: a model :func:`~stand_runtime.target.fast_linear.prepack_linears` packed, stock weights kept.
        cache_dir: folder of the cache (None: measure, cache nothing).

    Returns:
        S (0 when the packed kernel runs at every size, or nothing is packed).

    Raises:
        ValueError: a packed layer's stock weight was released before.
    """
    if not any(isinstance(m, PackedLinear) for m in model.modules()):
        return 0
    path = None if cache_dir is None else Path(cache_dir) / f"linears-{machine_key(model)}.json"
    rows = _cached_rows(path)
    if rows is None:
        rows, timings = measure_stock_rows(model)
        if path is not None and timing_disturbed() is None:  # a cache folder that takes no file, or timings a
            # profiler or tracer disturbed (:func:`.timing.timing_disturbed`): measured again next time
            write_cache_file(path, json_bytes({"stock_rows": rows, "cpu": torch.backends.cpu.get_cpu_capability(),
                                               "threads": torch.get_num_threads(), **timings}))
    use_stock_up_to(model, rows, release=True)
    return rows
