"""Named random streams derived from one seed, so data order, initialisation, dropout and sampling never share
(or disturb) each other's randomness; and the per-step seeds drawn from them. Evaluation draws nothing: it
scores a fixed subset."""

from __future__ import annotations

import hashlib

STREAMS = ("data", "init", "dropout", "sampling")
_STEP_STRIDE = 1_000_003  # a prime larger than any micro-batch or prompt count: (step, index) pairs never collide


def stream_seed(seed: int, stream: str) -> int:
    """A 63-bit seed for ``stream``, a pure function of (seed, stream name)."""
    if stream not in STREAMS:
        raise ValueError(f"unknown random stream {stream!r}; known: {', '.join(STREAMS)}")
    digest = hashlib.sha256(f"solomon:{seed}:{stream}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def dropout_seed(seed: int, step: int, micro_batch: int) -> int:
    """Dropout's seed for one micro-batch of the global batch: a pure function of (seed, step, index), so the
    masks of a step are the same whether its micro-batches run in one process or across ranks."""
    return (stream_seed(seed, "dropout") + _STEP_STRIDE * step + micro_batch) % 2**63


def sample_seed(seed: int, step: int, prompt_index: int) -> int:
    """Sampling's seed for one prompt at one evaluation: a pure function of (seed, step, prompt)."""
    return (stream_seed(seed, "sampling") + _STEP_STRIDE * step + prompt_index) % 2**63
