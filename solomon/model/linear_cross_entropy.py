"""The output layer and its cross-entropy in one step, a chunk of tokens at a time.

Why: with an 8k vocabulary the logits of one batch are (tokens × vocab) floats — 64 MiB for 2,048 tokens — and
the plain path (matmul, cast to fp32, log_softmax, nll, then each one's backward) streams that tensor through
memory about ten times per step. On CPU that memory traffic, not the matmuls, was a large share of a bf16 step
(docs/performance.md, "What made the default path fast", has the profile's figures).
Here each chunk's logits stay small enough to live in cache: log_softmax, the loss and the gradient with
respect to the logits (softmax − target distribution) are computed while the chunk is hot, and only the
gradient, in the compute dtype, is kept for the two matmuls of the backward pass. The loss is the last node of
the graph, so computing these gradients in the forward pass wastes nothing. Same idea as Liger-Kernel's fused
linear cross-entropy; every operation is deterministic, in a fixed order.
"""

from __future__ import annotations

import torch

# rows of logits per chunk: 4 MiB of fp32 for an 8k vocabulary, small enough to stay in cache; the fastest of the
# sizes tried (docs/performance.md)
CHUNK_TOKENS = 128


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, targets, label_smoothing: float, dtype: torch.dtype, softcap: float | None):
        n_tokens, vocab = hidden.size(0), weight.size(0)
        hidden_c, weight_c = hidden.to(dtype), weight.to(dtype)
        grad_logits = torch.empty((n_tokens, vocab), dtype=dtype)
        total = torch.zeros((), dtype=torch.float32)
        for start in range(0, n_tokens, CHUNK_TOKENS):
            rows = slice(start, start + CHUNK_TOKENS)
            target = targets[rows, None]
            logits = hidden_c[rows] @ weight_c.t()
            if softcap is not None:  # y = c·tanh(z / c) in fp32, as GPT.logits computes it; dy/dz = 1 - tanh²
                squashed = torch.tanh(logits.float() / softcap)
                logits = squashed * softcap
            log_probs = torch.log_softmax(logits, dim=1, dtype=torch.float32)
            loss = -log_probs.gather(1, target)
            if label_smoothing:
                loss = (1 - label_smoothing) * loss - label_smoothing * log_probs.mean(1, keepdim=True)
            total += loss.sum()
            # d(summed loss)/d(logits) = softmax − ((1 − ε)·one_hot(target) + ε / vocab)
            probs = log_probs.exp_()
            if label_smoothing:
                probs.sub_(label_smoothing / vocab)
            probs.scatter_(1, target, probs.gather(1, target) - (1 - label_smoothing))
            if softcap is not None:
                probs.mul_(1 - squashed.square_())
            grad_logits[rows] = probs
        ctx.save_for_backward(grad_logits @ weight_c, grad_logits.t() @ hidden_c)
        ctx.dtypes = (hidden.dtype, weight.dtype)
        return total

    @staticmethod
    def backward(ctx, grad_total):
        grad_hidden, grad_weight = ctx.saved_tensors
        hidden_dtype, weight_dtype = ctx.dtypes
        grads = (grad_hidden * grad_total).to(hidden_dtype), (grad_weight * grad_total).to(weight_dtype)
        return *grads, None, None, None, None


def linear_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    label_smoothing: float = 0.0,
    softcap: float | None = None,
) -> torch.Tensor:
    """Summed token cross-entropy of ``hidden`` (N, d) @ ``weight`` (vocab, d)ᵀ against ``targets`` (N,), in fp32.

    Matmuls run in bf16 under CPU autocast, as ``nn.Linear`` would; the softmax is always fp32. ``softcap``: the
    logits are ``softcap · tanh(logits / softcap)`` (in fp32) before the softmax (None: as they are).
    """
    dtype = torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else weight.dtype
    with torch.autocast("cpu", enabled=False):
        return _LinearCrossEntropy.apply(hidden, weight, targets, float(label_smoothing), dtype, softcap)
