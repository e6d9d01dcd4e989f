"""Weight averaging: an exponential moving average (EMA) of the model's weights, kept beside the trained model.

With ``train.ema_decay`` d > 0 every optimiser step moves the average towards the new weights,
``average ← average + (1 − d_n)(weights − average)`` with ``d_n = min(d, (1 + n) / (10 + n))`` after n updates:
the first update copies the weights, and the ramp keeps the random initialisation from lingering for the ~1/(1 − d)
steps a fixed decay would give it (TensorFlow's ``ExponentialMovingAverage`` with ``num_updates``). The average is
what the periodic evaluations score, sample from and save as the best model, so it is the run's output model.

It is ``torch.optim.swa_utils.AveragedModel`` (a copy of the model, its parameters averaged, the update count a
buffer), so its ``state_dict`` is an ordinary module state a checkpoint saves and a resume restores bit for bit.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.optim.swa_utils import AveragedModel

from solomon.model.gpt import GPT

RAMP = 10  # d_n = min(d, (1 + n) / (RAMP + n)): 0.18 at the first average after the copy, 0.9 at 80, 0.99 at 890


class WeightAverage:
    """The EMA of ``model``'s parameters (buffers are not averaged: the GPT's are constant)."""

    def __init__(self, model: GPT, decay: float) -> None:
        if not 0.0 < decay < 1.0:
            raise ValueError(f"EMA decay must lie in (0, 1), got {decay}")
        self.decay = decay
        self.averaged = AveragedModel(model, multi_avg_fn=self._move, use_buffers=False)  # a deep copy of model

    @property
    def model(self) -> GPT:
        """The averaged GPT: evaluate, sample from and save this one."""
        return self.averaged.module

    def update(self, model: GPT) -> None:
        """After an optimiser step of ``model``."""
        self.averaged.update_parameters(model)

    def _move(self, averages: list[torch.Tensor], weights: list[torch.Tensor], updates: torch.Tensor) -> None:
        n = int(updates)  # updates before this one (≥ 1: AveragedModel copies the weights on the first)
        decay = min(self.decay, (1 + n) / (RAMP + n))
        for average, weight in zip(averages, weights, strict=True):
            average.lerp_(weight, 1.0 - decay)

    def state_dict(self) -> dict[str, Any]:
        return self.averaged.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.averaged.load_state_dict(state)
