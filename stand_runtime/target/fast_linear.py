"""A faithful faster CPU forward: each ``nn.Linear`` computed by the faster of two kernels for its row count.

On a CPU, a transformer forward of a few tokens is dominated by its linear layers, and which fp32
GEMM is fastest for 1-16 rows (the shapes of a draft-tree step: docs/algorithms.md §5.3) depends on the
machine: on some CPUs oneDNN with the weight reordered once into its blocked layout
(``torch.ops.mkldnn._reorder_linear_weight``, then ``_linear_pointwise`` per call: the private ops
torch.compile's inductor emits for CPU linears) is faster at every row count, on others stock MKL is
faster for the fewest rows (docs/decisions.md). So every packed layer keeps its stock weight (a reference: no copy) and computes calls of up to S
rows with it, S measured per machine on whole forwards (:mod:`stand_runtime.target.kernel_choice`;
0 where the packed kernel wins from one row on). Both kernels compute the same product in the same
dtype: the target is unchanged up to float rounding: every layer
is checked against ``F.linear`` when it is packed and left stock if it disagrees, and tests compare
the whole model's logits and greedy output with the stock model's. A bfloat16 model is packed too where
the CPU computes bfloat16 natively (:func:`packable_dtypes`): there oneDNN's blocked weight runs on AMX
or AVX512-BF16.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

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
    ``stock_up_to`` rows (same dtype, float rounding aside).

    The stock weight is kept (a reference to the layer's own tensor, so a tied output layer shares
    its embedding's) until :meth:`use_stock_up_to` releases it: while it is kept the layer holds its
    weight twice (the packed copy and the stock one), ~2x the linear weights' memory.

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
        """Raise what :meth:`use_stock_up_to` would raise for ``rows``, changing nothing.

        Raises:
            ValueError: ``rows`` < 0, or ``rows`` > 0 after the stock weight was released.
        """
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
    AVX512-BF16, docs/algorithms.md §5.3)."""
    return (torch.float32, torch.bfloat16) if native_bf16() else (torch.float32,)


def prepack_linears(model: torch.nn.Module) -> int:
    """Replace every ``nn.Linear`` of a CPU model whose weight has a dtype of :func:`packable_dtypes`
    by a checked :class:`PackedLinear` (packed kernel at every row count until :func:`use_stock_up_to`
    says otherwise).

    Each layer is packed, run on a random ``[3, in_features]`` input (the weight's dtype) and compared
    with ``F.linear``; a layer whose output differs by more than 1e-4 of its scale stays stock.

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
