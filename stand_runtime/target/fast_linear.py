"""A faithful faster CPU forward: ``nn.Linear`` weights prepacked once for oneDNN.

On a CPU, a transformer forward of a few tokens is dominated by its linear layers, and stock fp32
GEMM is slow for 2-16 rows (the shapes of a draft-tree step: docs/design.md §5.3). oneDNN with
the weight reordered once into its blocked layout (``torch.ops.mkldnn._reorder_linear_weight``,
then ``_linear_pointwise`` per call: the private ops torch.compile's inductor emits for CPU linears)
computes the same product in the same dtype, flatter in the number of rows. The target model is
unchanged up to float rounding (max |Δlogit| ~1e-4 on the default model, same argmax): every layer
is checked against ``F.linear`` when it is packed and left stock if it disagrees, and tests compare
the whole model's logits and greedy output with the stock model's.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

_CHECK_ROWS = 3
_CHECK_TOLERANCE = 1e-4
"""Largest |packed - stock| of a layer's output on a random input, relative to its largest |output|."""


def native_bf16() -> bool:
    """True when this CPU computes bfloat16 natively (AVX512-BF16 or AMX); without it a bfloat16
    forward of more than one token is slower than float32 (docs/design.md §5.3)."""
    cpu = torch.cpu
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(getattr(cpu, name, lambda: False)() for name in checks)


def prepacking_supported() -> bool:
    """True when this torch build has oneDNN and its linear ops (CPU builds of torch >= 2.1)."""
    ops = torch.ops.mkldnn
    return torch.backends.mkldnn.is_available() and hasattr(ops, "_reorder_linear_weight") and hasattr(ops, "_linear_pointwise")


class PackedLinear(torch.nn.Module):
    """``y = x W^T + b`` with W prepacked for oneDNN (same dtype, float rounding aside).

    Args:
        linear: the stock layer (its weight is copied into the packed layout).
    """

    def __init__(self, linear: torch.nn.Linear) -> None:
        super().__init__()
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), None)
        self.weight = torch.nn.Parameter(packed, requires_grad=False)
        self.bias = None if linear.bias is None else torch.nn.Parameter(linear.bias.detach(), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x``: ``[..., in_features]`` → ``[..., out_features]``, the weight's dtype."""
        rows = x.reshape(-1, self.in_features)
        out = torch.ops.mkldnn._linear_pointwise(rows, self.weight, self.bias, "none", [], "")
        return out.reshape(*x.shape[:-1], self.out_features)


def prepack_linears(model: torch.nn.Module) -> int:
    """Replace every float32 ``nn.Linear`` of a CPU model by a checked :class:`PackedLinear`.

    Each layer is packed, run on a random ``[3, in_features]`` input and compared with ``F.linear``;
    a layer whose output differs by more than 1e-4 of its scale stays stock.

    Returns:
        The number of layers replaced (0 when the model is not on the CPU in float32, or this torch
        build has no oneDNN).
    """
    if not prepacking_supported():
        return 0
    replaced = 0
    generator = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        for parent in list(model.modules()):
            for name, child in list(parent.named_children()):
                if type(child) is not torch.nn.Linear or child.weight.device.type != "cpu" or child.weight.dtype != torch.float32:
                    continue
                packed = PackedLinear(child)
                probe = torch.randn(_CHECK_ROWS, child.in_features, generator=generator)
                stock = F.linear(probe, child.weight, child.bias)
                error = (packed(probe) - stock).abs().max() / stock.abs().max().clamp_min(1e-6)
                if bool(error <= _CHECK_TOLERANCE):
                    setattr(parent, name, packed)
                    replaced += 1
    return replaced
