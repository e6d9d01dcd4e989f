"""Fault injection for the resume and tracking tests; unset, this does nothing.

``SOLOMON_CRASH_AT=<point>:<step>`` makes the training process SIGKILL itself at that point, so a test can kill
it at an exact moment (mid checkpoint write, right after an evaluation) with a real signal; with several
ranks, ``SOLOMON_CRASH_RANK`` (default 0) names the one that dies.
``SOLOMON_PAUSE_AT=<step>:<path>`` makes it write ``<path>.paused`` after that step and wait until ``<path>``
exists, so a test can act (stop a server, kill the process) while a run is known to be mid-way.
``SOLOMON_RECORD_BATCHES=<dir>`` makes each rank append the window offsets it trains on to
``<dir>/rank<r>.jsonl``, so a test can compare what different process layouts actually read.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

POINTS = ("checkpoint-write", "after-eval", "after-step")


def maybe_crash(point: str, step: int, rank: int = 0) -> None:
    wanted = os.environ.get("SOLOMON_CRASH_AT")
    if wanted and wanted == f"{point}:{step}" and rank == int(os.environ.get("SOLOMON_CRASH_RANK", "0")):
        os.kill(os.getpid(), signal.SIGKILL)


def maybe_pause(step: int) -> None:
    wanted = os.environ.get("SOLOMON_PAUSE_AT")
    if not wanted or wanted.split(":", 1)[0] != str(step):
        return
    release = Path(wanted.split(":", 1)[1])
    Path(f"{release}.paused").touch()
    while not release.exists():
        time.sleep(0.05)


def record_batch(step: int, rank: int, micro_batch: int, offsets) -> None:
    directory = os.environ.get("SOLOMON_RECORD_BATCHES")
    if not directory:
        return
    record = {"step": step, "micro_batch": micro_batch, "offsets": [int(o) for o in offsets]}
    with open(Path(directory) / f"rank{rank}.jsonl", "a") as log:
        log.write(json.dumps(record) + "\n")
