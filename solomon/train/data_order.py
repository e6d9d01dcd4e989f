"""Which training windows a step sees: a pure function of (seed, step, micro-step, rank).

Step ``s`` has one global batch of ``batch_size`` windows, drawn uniformly (with replacement) from a generator
seeded by (seed, s). Micro-step ``m`` of rank ``r`` takes its contiguous slice of that batch, so accumulating
k micro-batches sees exactly the windows of one batch k times larger, and a resumed run reads exactly the
batches an uninterrupted one would: there is no iterator or shuffle state to lose.
"""

from __future__ import annotations

import numpy as np
import torch

from solomon.errors import SolomonError


class DataOrder:
    def __init__(
        self, seed: int, n_tokens: int, block_size: int, batch_size: int, accum_steps: int = 1, world_size: int = 1
    ) -> None:
        if n_tokens < block_size + 2:
            raise SolomonError(
                f"the train split has {n_tokens} tokens, too few for model.block_size {block_size}: "
                "use a larger corpus or a smaller block_size"
            )
        if batch_size % (accum_steps * world_size):
            raise SolomonError(
                f"train.batch_size {batch_size} is not divisible by accum_steps × ranks ({accum_steps} × {world_size})"
            )
        self.seed = seed
        self.n_tokens = n_tokens
        self.block_size = block_size
        self.batch_size = batch_size
        self.accum_steps = accum_steps
        self.world_size = world_size

    @property
    def micro_batch_size(self) -> int:
        return self.batch_size // (self.accum_steps * self.world_size)

    def offsets(self, step: int) -> np.ndarray:
        """Start offsets of the global batch of step ``step``."""
        rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([self.seed, step])))
        return rng.integers(0, self.n_tokens - self.block_size - 1, size=self.batch_size, endpoint=True)

    def global_micro_batch(self, micro_step: int, rank: int) -> int:
        """The index, within the step's global batch, of rank ``rank``'s micro-step ``micro_step``: each rank
        takes ``accum_steps`` consecutive micro-batches."""
        return rank * self.accum_steps + micro_step

    def micro_offsets(self, step: int, micro_step: int = 0, rank: int = 0) -> np.ndarray:
        size = self.micro_batch_size
        start = self.global_micro_batch(micro_step, rank) * size
        return self.offsets(step)[start : start + size]

    def batch(
        self, tokens: np.ndarray, step: int, micro_step: int = 0, rank: int = 0
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs and next-token targets, each (micro_batch_size, block_size) int64."""
        offsets = self.micro_offsets(step, micro_step, rank)
        windows = np.stack([tokens[o : o + self.block_size + 1] for o in offsets]).astype(np.int64)
        windows = torch.from_numpy(windows)
        return windows[:, :-1], windows[:, 1:]

    def state_dict(self) -> dict:
        """Not a position (there is none) but the identity of the order, checked on resume."""
        return {
            "seed": self.seed,
            "n_tokens": self.n_tokens,
            "block_size": self.block_size,
            "batch_size": self.batch_size,
            "accum_steps": self.accum_steps,
            "world_size": self.world_size,
        }

    def load_state_dict(self, state: dict) -> None:
        if state != self.state_dict():
            raise SolomonError(f"checkpoint data order {state} differs from this run's {self.state_dict()}")
