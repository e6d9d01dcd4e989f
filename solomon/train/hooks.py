"""The train stage's test hooks, declared: named crash points, a pause, and batch recording.

The train stage hands a ``Hooks`` object to the loop's ``Recorder``, with the ``Tracker``: the loop calls the
hooks of every rank, the recorder fires the crash points of rank 0's writes, and neither reads the environment.
The stage script builds it with ``Hooks.from_environment`` from these variables, which are the
interface tests, the docs runner and ``python -m lab bench`` use to drive a real train process:

- ``SOLOMON_CRASH_AT=<point>:<step>`` SIGKILLs the process at that named point of that step, so a test can kill
  it at an exact moment with a real signal; with several ranks ``SOLOMON_CRASH_RANK`` (default 0) names the rank.
- ``SOLOMON_PAUSE_AT=<step>:<path>`` writes ``<path>.paused`` after that step and waits until ``<path>`` exists,
  so a test can act while a run is known to be mid-way.
- ``SOLOMON_RECORD_BATCHES=<dir>`` makes each rank append the window offsets it trains on to
  ``<dir>/rank<r>.jsonl``, so a test can compare what different process layouts read.

Unset, a hook costs one comparison per call and nothing per micro-batch.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from solomon.hooks import hook_variable
from solomon.train.data_order import DataOrder

CRASH_AT = "SOLOMON_CRASH_AT"
CRASH_RANK = "SOLOMON_CRASH_RANK"
PAUSE_AT = "SOLOMON_PAUSE_AT"
RECORD_BATCHES = "SOLOMON_RECORD_BATCHES"

# Every durable write of the train stage is a named crash point (the step is the one being written), listed in
# the order a run reaches them. A test kills the real stage at each in turn and resumes to the same bytes.
CRASH_POINTS = (
    "logs-open",  # the step and evaluation logs rewritten from the checkpoint at start (step: the start step)
    "step-log",  # a step's row appended to the step log
    "best-staged",  # a new best model written to its staging directory, not yet renamed into place
    "best-swap",  # between the two renames that replace the previous best model
    "eval-log",  # an evaluation's record appended to the evaluation log
    "after-eval",  # after an evaluation, before the step's checkpoint
    "checkpoint-write",  # a checkpoint written to its temporary name
    "checkpoint-index",  # a checkpoint renamed into place, not yet listed in the index
    "checkpoint-prune",  # the index written, older checkpoints not yet deleted
    "after-step",  # a step done, its checkpoint (if any) on disk
    "model-staged",  # the output model copied to its staging directory
    "model-swap",  # between the two renames that replace the previous output model
    "run-completed",  # the output model in place, the checkpoint index not yet marked completed
    "metrics-written",  # the run's metrics written to their temporary name, not yet renamed into place
)


def crash_environment(point: str, step: int) -> dict[str, str]:
    """The variables that make a train process kill itself at ``point`` of ``step``."""
    if point not in CRASH_POINTS:
        raise ValueError(f"unknown crash point {point!r}; known: {', '.join(CRASH_POINTS)}")
    return {CRASH_AT: f"{point}:{step}"}


def pause_environment(step: int, release: Path) -> dict[str, str]:
    """The variables that make a train process pause after ``step`` until ``release`` exists."""
    return {PAUSE_AT: f"{step}:{release}"}


def _crash_at(value: str) -> tuple[str, int]:
    point, step = value.rsplit(":", 1)
    if point not in CRASH_POINTS:
        raise ValueError(f"unknown crash point {point!r}")
    return point, int(step)


def _pause_at(value: str) -> tuple[int, Path]:
    step, release = value.split(":", 1)
    return int(step), Path(release)


@dataclass(frozen=True)
class Hooks:
    crash_at: tuple[str, int] | None = None
    crash_rank: int = 0
    pause_at: tuple[int, Path] | None = None
    record_batches: Path | None = None

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> Hooks:
        crash_at = hook_variable(environ, CRASH_AT, _crash_at, f"<{'|'.join(CRASH_POINTS)}>:<step>")
        pause_at = hook_variable(environ, PAUSE_AT, _pause_at, "<step>:<path>")
        crash_rank = hook_variable(environ, CRASH_RANK, int, "<rank>")
        record = hook_variable(environ, RECORD_BATCHES, Path, "<dir>")
        return cls(crash_at, crash_rank or 0, pause_at, record)

    def crash_point(self, point: str, step: int, rank: int = 0) -> None:
        """Die here, by SIGKILL, if this is the point, step and rank the hooks name."""
        if self.crash_at == (point, step) and rank == self.crash_rank:
            os.kill(os.getpid(), signal.SIGKILL)

    def write_points(self, prefix: str, step: int) -> Callable[[str], None]:
        """The crash points ``<prefix>-<stage>`` of one write (``solomon.atomic`` names its stages staged, swap and
        written; ``Checkpointer.save`` write, index and prune)."""
        return lambda stage: self.crash_point(f"{prefix}-{stage}", step)

    def after_step(self, step: int, rank: int) -> None:
        """The end of ``step`` on ``rank``: die at the "after-step" point, or pause, when the hooks say so."""
        self.crash_point("after-step", step, rank)
        if self.pause_at is None or self.pause_at[0] != step:
            return
        release = self.pause_at[1]
        Path(f"{release}.paused").touch()
        while not release.exists():
            time.sleep(0.05)

    def record_step(self, step: int, rank: int, data_order: DataOrder) -> None:
        """Append the windows this rank trains on at ``step``, by global micro-batch index, when recording;
        otherwise nothing is computed."""
        if self.record_batches is None:
            return
        with open(self.record_batches / f"rank{rank}.jsonl", "a") as log:
            for m in range(data_order.accum_steps):
                offsets = [int(o) for o in data_order.micro_offsets(step, m, rank)]
                record = {"step": step, "micro_batch": data_order.global_micro_batch(m, rank), "offsets": offsets}
                log.write(json.dumps(record) + "\n")


NO_HOOKS = Hooks()
