"""The precision a served model computes in.

- ``fp32``: as loaded, the precision the evaluate stage scored (``metrics.json``) and the exports carry.
- ``bf16``: every linear layer (the blocks' projections and the output layer) holds its weights in bf16 and casts
  its input to bf16, its output back to fp32 — CPU autocast's rule for linear layers, the one the model trained
  under — while embeddings, norms, attention and the residual stream stay fp32. A decode step reads half the bytes
  and runs bf16 GEMM kernels (AMX where the CPU has it); the text differs from fp32's for the same seed, and the
  held-out loss by what docs/serving.md measures.

Either way the weights are the verified file's: the cast happens after verification, in memory, the same each
time, so a precision is part of what gives "same seed, same text" (with the slots and threads).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from solomon.machine import bf16_matmul_native
from solomon.model.gpt import GPT
from solomon.serving.limits import PRECISIONS


class Bf16Linear(nn.Module):
    """``nn.Linear`` in bf16 for inference: the weights cast once and packed once into oneDNN's own layout (what
    torch.compile's CPU freezing does), so that no call reorders them again; fp32 in, fp32 out. Faster than
    ``F.linear``, which reorders bf16 weights for AMX at every call (docs/serving-performance.md); fp32 layers gain
    nothing packed at one row, so they stay ``nn.Linear``."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        super().__init__()
        self.weight = weight.detach().to(torch.bfloat16)
        self.bias = None if bias is None else bias.detach().to(torch.bfloat16)
        self.packed = torch.ops.mkldnn._reorder_linear_weight(self.weight, None) if PACKED else None

    def __deepcopy__(self, memo: dict) -> Bf16Linear:  # a packed tensor has no storage to copy: pack anew
        return Bf16Linear(self.weight.clone(), None if self.bias is None else self.bias.clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.to(torch.bfloat16)
        # A compiled decode step (solomon.serving.compiled_decode) takes the plain weights: the compiler cannot trace
        # through a packed (opaque) tensor.
        if self.packed is None or torch.compiler.is_compiling():
            return F.linear(x, self.weight, self.bias).float()
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "").float()


# oneDNN packs bf16 weights only on a CPU with its bf16 kernels (it refuses on an AVX2-only one); elsewhere the bf16
# layers run unpacked, through torch's scalar fallback: correct, and many times slower than fp32 there.
PACKED = bf16_matmul_native()
BF16_FALLBACK = (
    "this CPU has no native bf16 matmuls (AVX-512 or AMX): bf16 runs through torch's scalar fallback, "
    "many times slower than --precision fp32 here"
)


def in_precision(model: GPT, precision: str) -> GPT:
    """``model`` set to compute in ``precision`` (in place; returned for chaining). In bf16 every linear layer is
    a ``Bf16Linear``, and the output layer gets its own bf16 copy of the tied embedding matrix: the token
    embedding itself stays fp32."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}: use {' or '.join(PRECISIONS)}")
    if precision == "bf16":
        for parent in list(model.modules()):
            for name, child in list(parent.named_children()):
                if isinstance(child, nn.Linear):
                    setattr(parent, name, Bf16Linear(child.weight, child.bias))
    return model.eval()
