"""``solomon serve``'s test hooks, declared: the server is handed a ``Hooks`` object and never reads the
environment. The command builds it with ``Hooks.from_environment`` from these variables, which are the interface
tests use to drive a real server process:

- ``SOLOMON_SERVE_HOLD_UNTIL=<path>`` makes the loading thread wait until ``<path>`` exists before it verifies,
  so a test sees the server listening, ``/healthz`` alive and ``/readyz`` answering 503, for as long as it needs.

Unset, a hook does nothing.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from solomon.hooks import hook_variable

HOLD_UNTIL = "SOLOMON_SERVE_HOLD_UNTIL"


@dataclass(frozen=True)
class Hooks:
    hold_until: Path | None = None

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> Hooks:
        return cls(hook_variable(environ, HOLD_UNTIL, Path, "<path>"))

    def before_loading(self) -> None:
        """Wait, on the loading thread, until ``hold_until`` exists (when it names a file)."""
        while self.hold_until is not None and not self.hold_until.exists():
            time.sleep(0.05)


NO_HOOKS = Hooks()
