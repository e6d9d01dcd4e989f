"""Process-wide torch settings shared by every stage that runs the model."""

from __future__ import annotations

import torch

from solomon.portable import require_pinned


def configure_torch(threads: int, compiled: bool = False, portable: bool = False) -> None:
    """Fix the thread count (float reductions depend on it) and refuse non-deterministic kernels; ``portable``:
    refuse to go on unless this process's kernels are pinned (``solomon.portable.enter_mode`` pins them)."""
    if portable:
        require_pinned()
    torch.set_num_threads(threads)
    if compiled:
        torch.use_deterministic_algorithms(True)  # also sets inductor's flag for the kernels it generates
    else:
        # The public call imports torch._inductor (a noticeable part of every stage's start: docs/performance.md)
        # only to set that flag.
        torch._C._set_deterministic_algorithms(True)
    # Deterministic mode also fills every new tensor with NaN to expose reads of uninitialised memory: an extra
    # memory pass per allocation (a visible share of a profiled bf16 step: docs/performance.md). No kernel we use
    # reads memory it did not write, and the resume tests compare bytes, so that debugging aid is off.
    torch.utils.deterministic.fill_uninitialized_memory = False
