"""SIGTERM, SIGINT and SIGHUP become a flag the loop checks after each step: it checkpoints, then exits 128 + signal.
SIGHUP is a closed terminal or SSH session; where it is ignored (``nohup``) it stays ignored."""

from __future__ import annotations

import signal


class StopSignals:
    def __init__(self) -> None:
        self.received: int | None = None

    def __enter__(self) -> StopSignals:
        wanted = [signal.SIGTERM, signal.SIGINT]
        if signal.getsignal(signal.SIGHUP) != signal.SIG_IGN:
            wanted.append(signal.SIGHUP)
        self._previous = {s: signal.signal(s, self._handle) for s in wanted}
        return self

    def _handle(self, signum: int, _frame) -> None:
        self.received = signum

    def __exit__(self, *exc) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
