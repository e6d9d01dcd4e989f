"""The learning-rate schedule: Noam (Vaswani et al. 2017), written with its peak value.

lr(s) = peak · min(s / warmup, sqrt(warmup / s)) for the 1-based step s: linear warm-up to ``peak`` at step
``warmup``, then inverse-square-root decay. The original's d_model^-0.5 factor is folded into ``peak``.
"""

from __future__ import annotations

import math

from solomon.params import LrParams


class NoamSchedule:
    def __init__(self, params: LrParams) -> None:
        self.peak = params.peak
        self.warmup = params.warmup

    def lr(self, step: int) -> float:
        """Learning rate for the 0-based optimiser step ``step``."""
        s = step + 1
        return self.peak * min(s / self.warmup, math.sqrt(self.warmup / s))

    def state_dict(self) -> dict:
        return {"schedule": "noam", "peak": self.peak, "warmup": self.warmup}

    def load_state_dict(self, state: dict) -> None:
        if state != self.state_dict():
            raise ValueError(f"checkpoint schedule {state} differs from params {self.state_dict()}")
