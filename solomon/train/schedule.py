"""The learning-rate schedule: a warm-up to ``peak``, a decay shape, and an optional linear cooldown to zero.

For the 1-based step s:
- ``noam`` (Vaswani et al. 2017, written with its peak value): lr(s) = peak · min(s / warmup, sqrt(warmup / s)),
  linear warm-up to ``peak`` at step ``warmup``, then inverse-square-root decay (the original's d_model^-0.5 factor
  is folded into ``peak``);
- ``constant``: the same warm-up, then ``peak`` held: with a cooldown, warm-up–stable–decay (Hägele et al. 2024).

``cooldown`` > 0 multiplies the last ``round(cooldown · max_steps)`` steps by a factor falling linearly to zero, so
the rate reaches zero where the run ends (the step after its last one). The cooldown is fixed by ``max_steps``, so
a run with one cannot change ``train.max_steps`` on resume (``solomon.train.fingerprint.resumable``).
"""

from __future__ import annotations

import math

from solomon.errors import SolomonError
from solomon.params import LrParams


class LrSchedule:
    def __init__(self, params: LrParams, max_steps: int) -> None:
        self.shape = params.schedule
        self.peak = params.peak
        self.warmup = params.warmup
        self.cooldown = params.cooldown
        self.max_steps = max_steps
        self.cooldown_steps = round(params.cooldown * max_steps)
        if params.cooldown and not self.cooldown_steps:
            raise SolomonError(
                f"lr.cooldown {params.cooldown} of train.max_steps {max_steps} is no step: raise it to at least "
                f"{1 / max_steps:.3g}, or set 0 for no cooldown"
            )

    def lr(self, step: int) -> float:
        """Learning rate for the 0-based optimiser step ``step``."""
        s = step + 1
        decay = math.sqrt(self.warmup / s) if self.shape == "noam" else 1.0
        rate = self.peak * min(s / self.warmup, decay)
        steps_left = self.max_steps - step  # 1 at the last step
        if self.cooldown_steps and steps_left <= self.cooldown_steps:
            rate *= max(steps_left, 0) / (self.cooldown_steps + 1)
        return rate

    def state_dict(self) -> dict:
        state = {"schedule": self.shape, "peak": self.peak, "warmup": self.warmup}
        if self.cooldown_steps:  # the steps it covers are counted back from max_steps
            state |= {"cooldown": self.cooldown, "max_steps": self.max_steps}
        return state

    def load_state_dict(self, state: dict) -> None:
        # A backstop: the fingerprint (``resumable``) refuses a changed lr.* or, with a cooldown, max_steps first.
        if state != self.state_dict():
            raise ValueError(f"checkpoint schedule {state} differs from params {self.state_dict()}")
