"""A faithful faster CPU forward: each ``nn.Linear`` computed by the faster of two kernels for its row count.

On a CPU, a transformer forward of a few tokens is dominated by its linear layers, and which fp32
GEMM is fastest for 1-16 rows (the shapes of a draft-tree step: docs/algorithms.md §5.3) depends on the
machine: on some CPUs oneDNN with the weight reordered once into its blocked layout
(``torch.ops.mkldnn._reorder_linear_weight``, then ``_linear_pointwise`` per call: the private ops
torch.compile's inductor emits for CPU linears) is faster at every row count, on others stock MKL is
faster for the fewest rows (docs/decisions.md). So every packed layer keeps its stock weight (a
reference: no copy) and computes calls of up to S rows with it. Both kernels compute the same product
in the same dtype: every layer is checked against ``F.linear`` when it is packed and left stock if it
disagrees, and tests compare the whole model's logits and greedy output with the stock model's. A
bfloat16 model is packed too where the CPU computes bfloat16 natively (:func:`packable_dtypes`).

**Choosing S.** The best S differs between machines of one kind, and timing each layer shape alone
does not find it (a layer timed in a loop sits in the cache, and mixing kernels within one forward
costs more than either alone), so S is measured on the model's own forwards: :func:`measure_stock_rows`
times both kernels at each size of :data:`SIZES` on a short cached prefix, interleaved, and S is the
largest size up to which the stock kernel was faster at every measured size (0 where the packed
kernel wins from one row on; beyond the last size it always runs). The choice is cached per model
and machine next to the latency profiles (:func:`choose_kernels`).
"""

from __future__ import annotations

import hashlib
import json
import platform
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from ..files import json_bytes, write_cache_file
from ..trees.tree import DraftTree
from .timing import architecture_digest, time_chain, timing_disturbed, warm_cache

_CHECK_ROWS = 3
_CHECK_TOLERANCE = 1e-4
"""Largest |packed - stock| of a layer's output on a random input, relative to its largest |output|."""


def native_bf16() -> bool:
    """True when this CPU computes bfloat16 natively (AVX512-BF16 or AMX); without it a bfloat16
    forward of more than one token is slower than float32 (docs/algorithms.md §5.3)."""
    cpu = torch.cpu
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(getattr(cpu, name, lambda: False)() for name in checks)


def prepacking_supported() -> bool:
    """True when this torch build has oneDNN and its linear ops (CPU builds of torch >= 2.1)."""
    ops = torch.ops.mkldnn
    return torch.backends.mkldnn.is_available() and hasattr(ops, "_reorder_linear_weight") and hasattr(ops, "_linear_pointwise")


class PackedLinear(torch.nn.Module):
    """``y = x W^T + b`` with W prepacked for oneDNN, and the stock kernel for calls of at most
    ``stock_up_to`` rows. The stock weight (a reference to the layer's own tensor, so a tied output
    layer shares its embedding's) is kept until :meth:`use_stock_up_to` releases it: ~2x the linear
    weights' memory until then.

    Args:
        linear: the stock layer (its weight is copied into the packed layout and kept as it is).
        stock_up_to: calls of at most this many rows (tokens) go to ``F.linear`` on the stock weight.
    """

    def __init__(self, linear: torch.nn.Linear, stock_up_to: int = 0) -> None:
        super().__init__()
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), None)
        self.weight = torch.nn.Parameter(packed, requires_grad=False)
        self.bias = None if linear.bias is None else torch.nn.Parameter(linear.bias.detach(), requires_grad=False)
        self.register_buffer("stock_weight", linear.weight.detach(), persistent=False)
        self.stock_up_to = int(stock_up_to)

    def check_stock_up_to(self, rows: int) -> None:
        """Raise (ValueError) what :meth:`use_stock_up_to` would raise for ``rows``, changing nothing."""
        if rows < 0 or rows > 0 and self.stock_weight is None:
            raise ValueError(f"cannot compute up to {rows} rows with the stock kernel: "
                             + ("negative" if rows < 0 else "a packed layer's stock weight was released"))

    def use_stock_up_to(self, rows: int, release: bool = False) -> None:
        """Compute calls of at most ``rows`` rows with the stock kernel from now on (0: none); with 0
        and ``release``, the stock weight is dropped for good.

        Raises:
            ValueError: ``rows`` < 0, or ``rows`` > 0 after the stock weight was released (the layer
                is left as it was).
        """
        rows = int(rows)
        self.check_stock_up_to(rows)
        self.stock_up_to = rows
        if rows == 0 and release:
            self.stock_weight = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x``: ``[..., in_features]`` → ``[..., out_features]``, the weight's dtype."""
        rows = x.reshape(-1, self.in_features)
        if rows.shape[0] <= self.stock_up_to:
            out = F.linear(rows, self.stock_weight, self.bias)
        else:
            out = torch.ops.mkldnn._linear_pointwise(rows, self.weight, self.bias, "none", [], "")
        return out.reshape(*x.shape[:-1], self.out_features)


def packable_dtypes() -> tuple[torch.dtype, ...]:
    """The weight dtypes :func:`prepack_linears` packs on this CPU: float32, and bfloat16 where the CPU
    computes it natively (:func:`native_bf16`: oneDNN's blocked bfloat16 weight then runs on AMX or
    AVX512-BF16)."""
    return (torch.float32, torch.bfloat16) if native_bf16() else (torch.float32,)


def prepack_linears(model: torch.nn.Module) -> int:
    """Replace every ``nn.Linear`` of a CPU model whose weight has a dtype of :func:`packable_dtypes`
    by a :class:`PackedLinear` (packed at every row count until :func:`use_stock_up_to`), each checked
    on a random ``[3, in_features]`` input against ``F.linear``: one off by more than 1e-4 of its
    scale stays stock.

    Returns:
        The number of layers replaced (0 when the model is not on the CPU in a packable dtype, or this
        torch build has no oneDNN).
    """
    if not prepacking_supported():
        return 0
    dtypes = packable_dtypes()
    replaced = 0
    generator = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        for parent in list(model.modules()):
            for name, child in list(parent.named_children()):
                if type(child) is not torch.nn.Linear or child.weight.device.type != "cpu" or child.weight.dtype not in dtypes:
                    continue
                packed = PackedLinear(child)
                probe = torch.randn(_CHECK_ROWS, child.in_features, generator=generator).to(child.weight.dtype)
                stock = F.linear(probe, child.weight, child.bias)
                error = (packed(probe) - stock).float().abs().max() / stock.float().abs().max().clamp_min(1e-6)
                if bool(error <= _CHECK_TOLERANCE):
                    setattr(parent, name, packed)
                    replaced += 1
    return replaced


def use_stock_up_to(model: torch.nn.Module, rows: int, release: bool = False) -> int:
    """Compute every packed layer's calls of at most ``rows`` rows with the stock kernel (0: packed
    for all; with ``release`` the stock weights are then dropped). Every layer is checked first, so
    none changes when one cannot.

    Returns:
        The layers changed.

    Raises:
        ValueError: ``rows`` < 0, or ``rows`` > 0 where a layer's stock weight was released.
    """
    layers = [layer for layer in model.modules() if isinstance(layer, PackedLinear)]
    for layer in layers:
        layer.check_stock_up_to(rows)
    for layer in layers:
        layer.use_stock_up_to(rows, release)
    return len(layers)


def dispatch_signature(model: torch.nn.Module) -> str:
    """Which kernel a model's linears use at which row counts (part of a latency profile's key):
    ``"packed=False"`` without packed layers, ``"packed=True"`` when they all run packed, else with
    ``"|stock_up_to=S"`` per distinct S."""
    rows = sorted({layer.stock_up_to for layer in model.modules() if isinstance(layer, PackedLinear)})
    return "packed=False" if not rows else "packed=True" + "".join(f"|stock_up_to={r}" for r in rows if r)


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
    than with the packed one at every measured n <= S (0: packed from one token on). Each round times
    every size, in a random order, with each kernel (in random order) on a :data:`PREFIX`-token cache;
    the model's packed layers end as they were.

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
    """What the choice depends on, as 16 hex digits of a SHA-256: the model's architecture
    (:func:`~stand_runtime.target.timing.architecture_digest`), packed linears' shapes and a packed
    dtype other than float32, the CPU (its ``/proc/cpuinfo`` identity, else the platform's name),
    threads, CPU capability, torch and :data:`SIZES`."""
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
    and release the stock weights when S is 0. S is read from ``cache_dir/linears-<key>.json``
    (:func:`machine_key`) when measured before on this machine, else measured and written there
    (unless the folder takes no file or a Python profiler or tracer disturbed the timings); a file
    without a valid S is measured again. A model without packed layers is left alone.

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
        if path is not None and timing_disturbed() is None:
            write_cache_file(path, json_bytes({"stock_rows": rows, "cpu": torch.backends.cpu.get_cpu_capability(),
                                               "threads": torch.get_num_threads(), **timings}))
    use_stock_up_to(model, rows, release=True)
    return rows
