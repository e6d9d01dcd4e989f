"""Fault injection for the resume tests: ``SOLOMON_CRASH_AT=<point>:<step>`` makes the training process
SIGKILL itself at that point, so a test can kill it at an exact moment (mid checkpoint write, right after an
evaluation) with a real signal. Unset, this does nothing."""

from __future__ import annotations

import os
import signal

POINTS = ("checkpoint-write", "after-eval", "after-step")


def maybe_crash(point: str, step: int) -> None:
    wanted = os.environ.get("SOLOMON_CRASH_AT")
    if wanted and wanted == f"{point}:{step}":
        os.kill(os.getpid(), signal.SIGKILL)
