"""The data stages' test hook, declared: ``SOLOMON_DATA_CRASH_AT=<stage>:<point>`` SIGKILLs that data stage at
that point of its one durable write (``solomon.atomic.staged_dir``: ``staged``, its output complete in the temporary
directory; ``swap``, between the two renames), so a test can kill it at an exact moment with a real signal. The
stage script reads the variable and passes ``crash_point`` in; unset, it does nothing."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Mapping

from solomon.atomic import no_crash
from solomon.hooks import hook_variable

CRASH_AT = "SOLOMON_DATA_CRASH_AT"
CRASH_POINTS = ("staged", "swap")


def _crash_at(value: str) -> tuple[str, str]:
    stage, point = value.split(":", 1)
    if point not in CRASH_POINTS:
        raise ValueError(f"unknown crash point {point!r}")
    return stage, point


def crash_point(environ: Mapping[str, str], stage: str) -> Callable[[str], None]:
    """What ``stage`` passes to its write: a kill at the point ``environ`` names for it, else nothing."""
    crash_at = hook_variable(environ, CRASH_AT, _crash_at, f"<stage>:<{'|'.join(CRASH_POINTS)}>")
    if crash_at is None or crash_at[0] != stage:
        return no_crash
    wanted = crash_at[1]

    def maybe_kill(point: str) -> None:
        if point == wanted:
            os.kill(os.getpid(), signal.SIGKILL)

    return maybe_kill
