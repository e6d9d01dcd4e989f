"""Process-wide torch settings shared by every stage that runs the model."""

from __future__ import annotations

import torch


def configure_torch(threads: int) -> None:
    """Fix the thread count (float reductions depend on it) and refuse non-deterministic kernels."""
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
    # Deterministic mode also fills every new tensor with NaN to expose reads of uninitialised memory: a full
    # extra memory pass per allocation (15 % of a bf16 step). No kernel we use reads memory it did not write, and
    # the resume tests compare bytes, so that debugging aid is off.
    torch.utils.deterministic.fill_uninitialized_memory = False
