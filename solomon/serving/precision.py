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

from solomon.model.gpt import GPT
from solomon.serving.limits import PRECISIONS


class Bf16Linear(nn.Module):
    """``nn.Linear`` with bf16 weights: fp32 in, fp32 out, the matmul in bf16 (fp32 accumulation in the kernel)."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.weight = nn.Parameter(linear.weight.detach().to(torch.bfloat16), requires_grad=False)
        bias = linear.bias
        self.bias = None if bias is None else nn.Parameter(bias.detach().to(torch.bfloat16), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x.to(torch.bfloat16), self.weight, self.bias).float()


def in_precision(model: GPT, precision: str) -> GPT:
    """``model`` set to compute in ``precision`` (in place; returned for chaining). In bf16 the output layer gets
    its own bf16 copy of the tied embedding matrix: the token embedding itself stays fp32."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}: use {' or '.join(PRECISIONS)}")
    if precision == "bf16":
        for parent in list(model.modules()):
            for name, child in list(parent.named_children()):
                if isinstance(child, nn.Linear):
                    setattr(parent, name, Bf16Linear(child))
    return model.eval()
