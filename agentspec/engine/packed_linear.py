"""Linear layers with their weights packed once for oneDNN, so small batches cost little more than one row.

Stock ``F.linear`` on the CPU goes through MKL's matrix-matrix path as soon as
more than one row comes in, and that path re-packs the whole weight matrix on
every call.  A forward over a token tree of 2-16 rows therefore cost 1.8-3x a
one-token forward, which ate most of what tree speculation saves.  oneDNN can
pack the weight once, at load time, into the blocked layout its kernels read;
measured on this project's 2-core CPU for a 8960 x 1536 matrix (one thread)::

    rows            1     2     4     8     16
    F.linear (ms)   3.3   7.6   6.9   8.2   10.3
    packed   (ms)   2.7   4.1   4.5   5.5    7.5

The packed layer is faster for one row too, so plain greedy decoding gains as
well.  It changes the order of the floating-point sums (results differ from
``F.linear`` by about 1e-6 relative), so a model is decoded with one kind of
layer throughout: both the greedy baseline and the tree verifier see the same
packed model, and greedy identity holds between them.

``AGENTSPEC_LINEAR=stock`` (or ``load_model(..., linear="stock")``) keeps the
stock layers.
"""

from __future__ import annotations

import functools
from typing import Any

from agentspec.errors import ConfigError

__all__ = ["LINEAR_KINDS", "can_pack", "pack_linears"]

LINEAR_KINDS = ("packed", "stock")


def can_pack() -> bool:
    """Whether this torch build has the oneDNN CPU kernels the packed layer needs."""
    import torch

    return bool(torch.backends.mkldnn.is_available()) and hasattr(torch.ops.mkldnn, "_linear_pointwise")


@functools.cache
def _packed_class() -> Any:
    import torch

    class PackedLinear(torch.nn.Module):
        """``nn.Linear`` computed by oneDNN from a weight packed once."""

        def __init__(self, linear: Any) -> None:
            super().__init__()
            self.in_features = linear.in_features
            self.out_features = linear.out_features
            with torch.no_grad():
                # The batch-size hint picks the blocking; any number of rows works, but with a hint of 1 eight rows
                # ran 4x slower than with 16 (measured), and tree forwards send 2-64 rows.
                packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), 16)
            self.register_buffer("packed", packed, persistent=False)
            self.bias = linear.bias

        def forward(self, x: Any) -> Any:
            rows = x.numel() // self.in_features
            if rows < 4:
                # oneDNN's kernels for 1-3 rows ran slower than its 4-row kernel here (measured 2.1-2.3 vs
                # 1.7 ms for 8960 x 1536): compute 4 rows, rows being independent, and keep the real ones.
                flat = x.reshape(rows, self.in_features)
                padded = torch.cat([flat, flat.new_zeros(4 - rows, self.in_features)])
                out = torch.ops.mkldnn._linear_pointwise(padded, self.packed, self.bias, "none", [], "")
                return out[:rows].reshape(*x.shape[:-1], self.out_features)
            return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")

        def extra_repr(self) -> str:
            return f"in_features={self.in_features}, out_features={self.out_features}, packed=onednn"

    return PackedLinear


def pack_linears(model: Any) -> int:
    """Replace every float32 ``nn.Linear`` of ``model`` by a oneDNN-packed one; returns how many were replaced.

    Layers drop their unpacked weight, so packing costs no memory, except a
    tied output embedding: its weight is the input embedding's too, which
    stays (``.weight`` still names it).
    """
    import torch

    if not can_pack():
        raise ConfigError("this torch build has no oneDNN CPU kernels; load the model with linear='stock'")
    head = model.get_output_embeddings()
    inputs = model.get_input_embeddings()
    tied = head is not None and inputs is not None and head.weight is inputs.weight
    packed_class = _packed_class()
    replaced = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is not torch.nn.Linear or child.weight.dtype != torch.float32:
                continue
            packed = packed_class(child)
            if child is head and tied:
                packed.weight = child.weight
            setattr(parent, name, packed)
            replaced += 1
    return replaced
