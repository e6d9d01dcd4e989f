"""The process group a training run belongs to: one process by default, or the ranks ``torchrun`` started.

A small component with one job: know this process's rank and the world size, and make every rank agree on a
decision (stop early, stop on a signal) through one collective, so that no rank waits on a barrier another has
left. The backend follows the device of the tensors the collectives carry: the model and every collective's
tensors live on the CPU, so it is gloo whether or not a GPU is visible. Data order and gradient averaging stay
where they are (``DataOrder`` slices each step's global batch by rank; ``DistributedDataParallel`` averages
gradients).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.distributed as dist

from solomon.errors import SolomonError

# A rank that dies makes torchrun stop the others at once; this only bounds a collective that never completes
# for another reason (a hung peer), so that a job cannot wait forever.
COLLECTIVE_TIMEOUT = datetime.timedelta(seconds=120)
BACKEND = "gloo"  # the collectives' tensors are CPU tensors (NCCL would need them on a GPU)


@dataclass(frozen=True)
class ProcessGroup:
    rank: int = 0
    world_size: int = 1

    @property
    def is_main(self) -> bool:
        """Rank 0: the only one that writes checkpoints, logs, tracking and the model."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @classmethod
    def from_environment(cls, expected_world_size: int, environ: Mapping[str, str]) -> ProcessGroup:
        """Join the group torchrun describes in ``environ`` (the entry point's WORLD_SIZE, RANK, MASTER_ADDR …),
        or stay a single process."""
        world_size = int(environ.get("WORLD_SIZE", "1"))
        if world_size != expected_world_size:
            raise SolomonError(
                f"train.nproc is {expected_world_size} but this process is one of {world_size}: launch with "
                f"`python stages/train.py …` (it starts torchrun itself) or set train.nproc to {world_size}"
            )
        if world_size == 1:
            return cls()
        dist.init_process_group(BACKEND, timeout=COLLECTIVE_TIMEOUT)
        return cls(rank=dist.get_rank(), world_size=dist.get_world_size())

    def any(self, flag: bool) -> bool:
        """True on every rank when ``flag`` is true on any rank."""
        if not self.distributed:
            return flag
        value = torch.tensor([int(flag)])
        dist.all_reduce(value, op=dist.ReduceOp.MAX)
        return bool(value.item())

    def require_same(self, what: str, value: int) -> None:
        """Stop every rank, with one line from rank 0 naming each rank's value, unless all ranks hold the same
        ``value`` (e.g. the step they resume from: ranks reading different checkpoints would diverge or hang)."""
        if not self.distributed:
            return
        values = [torch.zeros(1, dtype=torch.int64) for _ in range(self.world_size)]
        dist.all_gather(values, torch.tensor([value], dtype=torch.int64))
        found = [int(v.item()) for v in values]
        if len(set(found)) == 1:
            return
        if not self.is_main:
            raise SystemExit(2)  # rank 0 says why
        ranks = ", ".join(f"rank {rank}: {v}" for rank, v in enumerate(found))
        raise SolomonError(
            f"the ranks disagree on the {what} ({ranks}): every rank must read the same checkpoints directory "
            "(one shared volume); delete the stale copy or start over with `--fresh`"
        )

    def mean(self, value: float) -> float:
        """The mean of ``value`` over the ranks (fp64, so the step loss is not rounded on the way)."""
        if not self.distributed:
            return value
        total = torch.tensor([value], dtype=torch.float64)
        dist.all_reduce(total)
        return total.item() / self.world_size

    def close(self) -> None:
        if self.distributed and dist.is_initialized():
            dist.destroy_process_group()
