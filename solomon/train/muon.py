"""Muon whose Newton-Schulz orthogonalisation runs once per matrix shape, on every matrix of that shape stacked.

The update is torch.optim.Muon's (torch/optim/_muon.py) term for term: the momentum buffer ``B ← μB + (1-μ)g``
(``lerp``), Nesterov's ``g + μ(B - g)``, Newton-Schulz in bf16 on the wide orientation (a tall matrix is
transposed) after dividing by its Frobenius norm (at least ``eps``), decoupled weight decay ``θ ← θ(1 - γλ)``,
then ``θ ← θ - γ' O`` with γ' from the ``adjust_lr_fn`` rule. Only the matrices' grouping differs: torch runs a
Python loop of 2-D matmuls per matrix, this one ``baddbmm`` over the stack of every matrix of one shape. A tall
stack is orthogonalised through a transposed view, as torch does each tall matrix: the first product then sees the
same memory layout, and where it was measured the result is torch's bit for bit (docs/training.md). A batched
GEMM may sum in another order than one matmul elsewhere, so equality is promised to fp32 tolerance only; the same
inputs always give the same bytes. (Merging the MLP's up-projection, transposed, with its down-projection would save
one more product but change that first layout, and with it the bits.)

The state is torch's: ``state[p]["momentum_buffer"]`` per parameter and the same group keys, so a checkpoint
written by either loads into the other.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch.optim._muon import DEFAULT_A, DEFAULT_B, DEFAULT_C, EPS, _adjust_lr

# called once per Newton-Schulz batch with the stack's shape (matrices, rows, columns): a test's counter
NsHook = Callable[[tuple[int, int, int]], None]


def newton_schulz(
    stack: torch.Tensor, coefficients: tuple[float, float, float], steps: int, eps: float
) -> torch.Tensor:
    """torch.optim.Muon's quintic Newton-Schulz iteration on a (n, rows, columns) stack, rows ≤ columns."""
    a, b, c = coefficients
    x = stack / torch.linalg.vector_norm(stack, dim=(-2, -1), keepdim=True).clamp(min=eps)
    for _ in range(steps):
        gram = x @ x.mT
        update = torch.baddbmm(gram, gram, gram, beta=b, alpha=c)
        x = torch.baddbmm(x, update, x, beta=a)
    return x


class BatchedMuon(torch.optim.Optimizer):
    """torch.optim.Muon's arguments and update, with one Newton-Schulz product per matrix shape (module doc)."""

    def __init__(
        self,
        params: Iterable[torch.nn.Parameter],
        lr: float = 1e-3,
        weight_decay: float = 0.1,
        momentum: float = 0.95,
        nesterov: bool = True,
        ns_coefficients: tuple[float, float, float] = (DEFAULT_A, DEFAULT_B, DEFAULT_C),
        eps: float = EPS,
        ns_steps: int = 5,
        adjust_lr_fn: str | None = None,
        ns_hook: NsHook | None = None,
        ns_dtype: torch.dtype = torch.bfloat16,
    ) -> None:
        defaults = {
            "lr": lr,
            "weight_decay": weight_decay,
            "momentum": momentum,
            "nesterov": nesterov,
            "ns_coefficients": ns_coefficients,
            "eps": eps,
            "ns_steps": ns_steps,
            "adjust_lr_fn": adjust_lr_fn,
        }
        super().__init__(params, defaults)
        if any(p.ndim != 2 for group in self.param_groups for p in group["params"]):
            raise ValueError("Muon takes 2-D parameters only: give embeddings, biases and norm gains to AdamW")
        self.ns_hook = ns_hook
        # torch's bf16 by default; fp32 where bf16 matmuls would take another kernel on another CPU (the portable mode)
        self.ns_dtype = ns_dtype

    @torch.no_grad()
    def step(self, closure: None = None) -> None:  # type: ignore[override]
        for group in self.param_groups:
            self._step_group(group)

    def _step_group(self, group: dict) -> None:
        momentum = group["momentum"]
        by_shape: dict[torch.Size, list[tuple[torch.nn.Parameter, torch.Tensor]]] = {}
        for p in group["params"]:
            if p.grad is None:
                continue
            state = self.state[p]
            if "momentum_buffer" not in state:
                state["momentum_buffer"] = torch.zeros_like(p.grad, memory_format=torch.preserve_format)
            buf = state["momentum_buffer"]
            buf.lerp_(p.grad, 1 - momentum)
            by_shape.setdefault(p.shape, []).append((p, p.grad.lerp(buf, momentum) if group["nesterov"] else buf))
        lr, decay = group["lr"], group["weight_decay"]
        for shape, members in by_shape.items():
            if self.ns_hook is not None:
                self.ns_hook((len(members), *shape))
            stack = torch.empty((len(members), *shape), dtype=self.ns_dtype, device=members[0][0].device)
            for row, (_, update) in zip(stack, members, strict=True):
                row.copy_(update)  # straight to bf16 in one pass, as torch's ``grad.bfloat16()``
            tall = shape[0] > shape[1]  # orthogonalised as its transpose: a view, as torch's ``.T``
            orthogonal = newton_schulz(
                stack.mT if tall else stack, group["ns_coefficients"], group["ns_steps"], group["eps"]
            )
            adjusted_lr = _adjust_lr(lr, group["adjust_lr_fn"], shape)
            for (p, _), o in zip(members, orthogonal.mT if tall else orthogonal, strict=True):
                p.mul_(1 - lr * decay)
                p.add_(o, alpha=-adjusted_lr)
