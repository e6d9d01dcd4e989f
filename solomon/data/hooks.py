"""The data stages' test hook, declared: ``SOLOMON_DATA_CRASH_AT=<stage>:<point>`` SIGKILLs that data stage at
that point of its one durable write (``solomon.atomic.staged_dir``: ``staged``, its output complete in the temporary
directory; ``swap``, between the two renames), so a test can kill it at an exact moment with a real signal. The
stage script reads the variable and passes ``crash_point`` in; unset, it does nothing."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Mapping

from solomon.atomic import no_crash

CRASH_AT = "SOLOMON_DATA_CRASH_AT"
CRASH_POINTS = ("staged", "swap")


def crash_point(environ: Mapping[str, str], stage: str) -> Callable[[str], None]:
    """What ``stage`` passes to its write: a kill at the point ``environ`` names for it, else nothing."""
    wanted_stage, _, wanted = environ.get(CRASH_AT, "").partition(":")
    if wanted_stage != stage:
        return no_crash

    def maybe_kill(point: str) -> None:
        if point == wanted:
            os.kill(os.getpid(), signal.SIGKILL)

    return maybe_kill
