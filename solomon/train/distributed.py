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
from pathlib import Path

import torch
import torch.distributed as dist

from solomon.errors import SolomonError

# A rank that dies makes torchrun stop the others at once; this only bounds a collective that never completes
# for another reason (a hung peer), so that a job cannot wait forever.
COLLECTIVE_TIMEOUT = datetime.timedelta(seconds=120)
BACKEND = "gloo"  # the collectives' tensors are CPU tensors (NCCL would need them on a GPU)
# torchrun's own variable: how many times it has restarted the group (0 on the first attempt), read from the
# environment the entry point passes to ``ProcessGroup.from_environment``.
RESTART_COUNT_ENV = "TORCHELASTIC_RESTART_COUNT"


def torchrun_command(
    nnodes: int, nproc_per_node: int, endpoint: str, rdzv_id: str, max_restarts: int, join_timeout_s: int
) -> list[str]:
    """The launcher part of one node's command in a multi-node run (after ``python``, before the stage script):
    torchrun (``solomon.train.launch``: its own, ending in one line) with c10d rendezvous at ``endpoint`` (node 0
    hosts it), each attempt waiting ``join_timeout_s`` for every node, so a node that never comes back ends the
    survivors in bounded time. The training chart renders the same (tests/test_multinode.py holds them equal)."""
    return [
        "-m",
        "solomon.train.launch",
        f"--nnodes={nnodes}",
        f"--nproc-per-node={nproc_per_node}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={endpoint}",
        f"--rdzv-id={rdzv_id}",
        f"--rdzv-conf=join_timeout={join_timeout_s}",
        f"--max-restarts={max_restarts}",
        "--monitor-interval=1",
    ]


@dataclass(frozen=True)
class ProcessGroup:
    rank: int = 0
    world_size: int = 1
    restart: int = 0  # how many times torchrun has restarted this process's group (0: the first attempt)

    @property
    def is_main(self) -> bool:
        """Rank 0: the only one that writes checkpoints, logs, tracking and the model."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @classmethod
    def from_environment(cls, expected_world_size: int, environ: Mapping[str, str]) -> ProcessGroup:
        """Join the group torchrun describes in ``environ`` (the entry point's WORLD_SIZE, RANK, MASTER_ADDR,
        TORCHELASTIC_RESTART_COUNT …), or stay a single process."""
        world_size = int(environ.get("WORLD_SIZE", "1"))
        restart = int(environ.get(RESTART_COUNT_ENV, "0"))
        if world_size != expected_world_size:
            raise SolomonError(
                f"train.nproc is {expected_world_size} but this process is one of {world_size}: launch with "
                f"`python stages/train.py …` (it starts torchrun itself) or set train.nproc to {world_size}"
            )
        if world_size == 1:
            return cls(restart=restart)
        dist.init_process_group(BACKEND, timeout=COLLECTIVE_TIMEOUT)
        return cls(rank=dist.get_rank(), world_size=dist.get_world_size(), restart=restart)

    def any(self, flag: bool) -> bool:
        """True on every rank when ``flag`` is true on any rank."""
        if not self.distributed:
            return flag
        value = torch.tensor([int(flag)])
        dist.all_reduce(value, op=dist.ReduceOp.MAX)
        return bool(value.item())

    def share(self, value: int) -> int:
        """Rank 0's ``value``, on every rank (e.g. a nonce only rank 0 draws)."""
        if not self.distributed:
            return value
        tensor = torch.tensor([value], dtype=torch.int64)
        dist.broadcast(tensor, src=0)
        return int(tensor.item())

    def gather(self, value: int) -> list[int]:
        """Every rank's ``value``, by rank."""
        if not self.distributed:
            return [value]
        values = [torch.zeros(1, dtype=torch.int64) for _ in range(self.world_size)]
        dist.all_gather(values, torch.tensor([value], dtype=torch.int64))
        return [int(v.item()) for v in values]

    def require_shared(self, directory: Path, sees_rank_0: bool) -> None:
        """Stop every rank unless each sees what rank 0 has just written in ``directory`` (``sees_rank_0``): a rank
        that does not would resume from other checkpoints than those rank 0 writes. Each blind rank, and rank 0,
        say so in one line; the others leave quietly."""
        if not self.distributed:
            return
        blind = [rank for rank, sees in enumerate(self.gather(int(sees_rank_0))) if not sees]
        if not blind:
            return
        if sees_rank_0 and not self.is_main:
            raise SystemExit(2)
        who = "rank " + ", ".join(map(str, blind)) if sees_rank_0 else f"rank {self.rank} (this one)"
        raise SolomonError(
            f"{who} cannot see what rank 0 writes in the checkpoints directory {directory.resolve()}: every node "
            'must mount one shared volume there (docs/kubernetes.md, "Several machines")'
        )

    def require_same(self, what: str, value: int, remedy: str = "") -> None:
        """Stop every rank, with one line from rank 0 naming each rank's value, unless all ranks hold the same
        ``value`` (e.g. the step they resume from: ranks reading different checkpoints would diverge or hang);
        ``remedy`` says what to do (default: about the checkpoints directory)."""
        if not self.distributed:
            return
        found = self.gather(value)
        if len(set(found)) == 1:
            return
        if not self.is_main:
            raise SystemExit(2)  # rank 0 says why
        ranks = ", ".join(f"rank {rank}: {v}" for rank, v in enumerate(found))
        remedy = remedy or (
            "every rank must read the same checkpoints directory (one shared volume); delete the stale copy or start "
            "over with `--fresh`"
        )
        raise SolomonError(f"the ranks disagree on the {what} ({ranks}): {remedy}")

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
