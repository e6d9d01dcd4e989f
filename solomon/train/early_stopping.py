"""Early stopping on validation loss, with the best value and step kept for choosing the output model."""

from __future__ import annotations

import math

from solomon.params import EarlyStoppingParams


class EarlyStopping:
    def __init__(self, params: EarlyStoppingParams) -> None:
        self.patience = params.patience
        self.min_delta = params.min_delta
        self.best = math.inf
        self.best_step = 0
        self.bad_evals = 0

    def update(self, step: int, val_loss: float) -> bool:
        """Record an evaluation; True when it is a new best (the caller keeps that model)."""
        if val_loss < self.best - self.min_delta:
            self.best, self.best_step, self.bad_evals = val_loss, step, 0
            return True
        self.bad_evals += 1
        return False

    @property
    def should_stop(self) -> bool:
        return self.patience is not None and self.bad_evals >= self.patience

    def state_dict(self) -> dict:
        return {"best": self.best, "best_step": self.best_step, "bad_evals": self.bad_evals}

    def load_state_dict(self, state: dict) -> None:
        self.best, self.best_step, self.bad_evals = state["best"], state["best_step"], state["bad_evals"]
