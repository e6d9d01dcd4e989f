"""Which training windows a step sees: a pure function of (seed, step), so a resumed run reads exactly the
batches an uninterrupted one would — there is no shuffle state to lose."""

from __future__ import annotations

import numpy as np
import torch

from solomon.errors import SolomonError


class DataOrder:
    def __init__(self, seed: int, n_tokens: int, block_size: int, batch_size: int) -> None:
        if n_tokens < block_size + 2:
            raise SolomonError(
                f"the train split has {n_tokens} tokens, too few for model.block_size {block_size}: "
                "use a larger corpus or a smaller block_size"
            )
        self.seed = seed
        self.n_tokens = n_tokens
        self.block_size = block_size
        self.batch_size = batch_size

    def offsets(self, step: int) -> np.ndarray:
        """Start offsets of the ``batch_size`` windows of step ``step``: uniform, with replacement."""
        rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([self.seed, step])))
        return rng.integers(0, self.n_tokens - self.block_size - 1, size=self.batch_size, endpoint=True)

    def batch(self, tokens: np.ndarray, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs and next-token targets, each (batch_size, block_size) int64."""
        windows = np.stack([tokens[o : o + self.block_size + 1] for o in self.offsets(step)]).astype(np.int64)
        windows = torch.from_numpy(windows)
        return windows[:, :-1], windows[:, 1:]

    def state_dict(self) -> dict:
        return {
            "seed": self.seed,
            "n_tokens": self.n_tokens,
            "block_size": self.block_size,
            "batch_size": self.batch_size,
        }

    def load_state_dict(self, state: dict) -> None:
        if state != self.state_dict():
            raise ValueError(f"checkpoint data order {state} differs from this run's {self.state_dict()}")
