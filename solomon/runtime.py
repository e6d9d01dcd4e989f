"""Process-wide torch settings shared by every stage that runs the model."""

from __future__ import annotations

import torch


def configure_torch(threads: int) -> None:
    """Fix the thread count (float reductions depend on it) and refuse non-deterministic kernels."""
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
