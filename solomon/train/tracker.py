"""What the training loop tells experiment tracking: a declared interface, passed in.

``solomon.tracking.live.LiveTracker`` implements it for MLflow; the loop knows no more of tracking than this.
"""

from __future__ import annotations

from typing import Protocol


class Tracker(Protocol):
    def start(self, run_id: str, steps: list[dict], evals: list[dict]) -> None: ...
    def step(self, row: dict) -> None: ...
    def evaluation(self, record: dict) -> None: ...
    def system(self, row: dict) -> None: ...  # a system-log row (records.SYSTEM_COLUMNS)
    def finish(self, status: str) -> None: ...


class NoTracking:
    def start(self, run_id: str, steps: list[dict], evals: list[dict]) -> None:
        pass

    def step(self, row: dict) -> None:
        pass

    def evaluation(self, record: dict) -> None:
        pass

    def system(self, row: dict) -> None:
        pass

    def finish(self, status: str) -> None:
        pass
