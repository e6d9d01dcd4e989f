"""SIGTERM and SIGINT become a flag the loop checks after each step: it checkpoints, then exits 128 + signal."""

from __future__ import annotations

import signal


class StopSignals:
    def __init__(self) -> None:
        self.received: int | None = None

    def __enter__(self) -> StopSignals:
        self._previous = {s: signal.signal(s, self._handle) for s in (signal.SIGTERM, signal.SIGINT)}
        return self

    def _handle(self, signum: int, _frame) -> None:
        self.received = signum

    def __exit__(self, *exc) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
