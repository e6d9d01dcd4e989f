"""Streams one training run to MLflow while it trains, from a background thread: a slow or dead server never
holds up a step, and never stops one. What does not arrive is logged later by ``replay``.

The loop's system samples (``solomon.train.system_metrics``: the machine's CPU, memory, disk and network, the
training process's CPU and memory) go out the same way, as MLflow's system metrics (``system/<name>``, its "System
metrics" tab). The run log keeps them too, so the run directory has them with tracking off. (MLflow's own monitor
thread does not survive an outage: docs/tracking.md says what was measured.)"""

from __future__ import annotations

import queue
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from solomon.params import Params
from solomon.tracking.store import (
    BATCH,
    STEP_METRICS,
    Metric,
    error_line,
    eval_metrics,
    fail_fast,
    history_metrics,
    missing_metrics,
    missing_samples,
    open_run,
    param_values,
    public_uri,
    samples_markdown,
    samples_path,
    source_tags,
    step_metrics,
    system_metrics,
    warn,
)

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

FLUSH_ROWS = 100  # send after this many steps ...
FLUSH_S = 5.0  # ... or this many seconds, and at every evaluation
FINISH_TIMEOUT_S = 60.0  # how long the end of training waits for the last sends
RETRY_S = 30.0  # seconds between tries after a failed send
RETRY_ENV = "SOLOMON_TRACKING_RETRY_S"  # the train stage's setting of it (tests shorten it)


class LiveTracker:
    """The training loop's tracker (``solomon.train.tracker.Tracker``) for MLflow.

    The loop calls ``start`` (with the rows a resume brought back), then ``step`` and ``evaluation`` as they
    happen, and ``finish`` with the run's status. Each call only puts an item on a queue. A background thread
    sends batches (every ``FLUSH_ROWS`` steps or ``FLUSH_S`` seconds, and at each evaluation) and keeps what it
    could not deliver; after a failure it warns once, tries again every ``retry_s`` seconds (the stage takes it
    from ``RETRY_ENV``, default 30), and on reconnecting first asks the server what it already has, so nothing is
    sent twice.
    """

    def __init__(self, params: Params, root: Path = Path("."), retry_s: float = RETRY_S) -> None:
        fail_fast()  # here, on the training thread: the sending thread's opener then finds them set
        self.uri = public_uri(root)  # for messages: the client finds the store itself
        self._root = root
        self._params = param_values(params.model_dump(mode="json"))
        self._tags = source_tags()
        self._retry_s = retry_s
        self._queue: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None
        self._client: MlflowClient | None = None
        self._mlflow_run: str | None = None
        self._history: tuple[list[dict], list[dict]] = ([], [])
        self._pending: list[Metric] = []
        self._pending_samples: list[dict] = []
        self._connected_once = False
        self._outage = False
        self._next_try = 0.0
        self._last_send = time.monotonic()

    # --- called by the training loop (cheap, never raises) ---

    def start(self, run_id: str, steps: list[dict], evals: list[dict]) -> None:
        self.run_id = run_id
        self._history = (list(steps), list(evals))
        self._thread = threading.Thread(target=self._work, name="solomon-tracking", daemon=True)
        self._thread.start()

    def step(self, row: dict) -> None:
        self._queue.put(("step", dict(row), int(time.time() * 1000)))

    def evaluation(self, record: dict) -> None:
        self._queue.put(("eval", record, int(time.time() * 1000)))

    def system(self, row: dict) -> None:
        self._queue.put(("system", row, int(time.time() * 1000)))

    def finish(self, status: str) -> None:
        """``status``: FINISHED, KILLED or FAILED. Waits up to ``FINISH_TIMEOUT_S`` for the last sends."""
        if self._thread is None:
            return
        self._queue.put(("finish", status, 0))
        self._thread.join(FINISH_TIMEOUT_S)
        if self._thread.is_alive():
            warn(f"{self.uri} still busy after {FINISH_TIMEOUT_S:.0f} s; leaving it. {self._replay_hint()}")
        self._thread = None

    # --- the background thread ---

    def _replay_hint(self) -> str:
        return "The report stage logs what is missing, or later `solomon track sync <run-id>`."

    def _work(self) -> None:
        status = None
        while status is None:
            try:
                kind, item, timestamp_ms = self._queue.get(timeout=1.0)
            except queue.Empty:
                kind = None
            if kind == "step":
                self._pending += step_metrics(item, timestamp_ms)
            elif kind == "system":
                self._pending += system_metrics(item, timestamp_ms)
            elif kind == "eval":
                self._pending += eval_metrics(item, timestamp_ms)
                self._pending_samples.append(item)
            elif kind == "finish":
                status = item
            now = time.monotonic()
            due = kind in ("eval", "finish") or len(self._pending) >= FLUSH_ROWS * len(STEP_METRICS)
            due = due or now - self._last_send >= FLUSH_S
            if due and (now >= self._next_try or kind == "finish"):
                self._send()
        if not self._outage:
            try:
                self._client.set_terminated(self._mlflow_run, status)
            except Exception as exc:
                self._fail(exc)
        if self._outage:
            missing = sum(1 for metric in self._pending if metric.key == STEP_METRICS["loss"])
            warn(
                f"about {missing} steps of training run {self.run_id} did not reach {self.uri}. " + self._replay_hint()
            )

    def _connect(self) -> None:
        client, mlflow_run = open_run(self.run_id, self._tags, self._params, self._root)
        info = client.get_run(mlflow_run).info
        if info.status != "RUNNING":
            client.update_run(mlflow_run, status="RUNNING")
        if not self._connected_once:  # rows a resume brought back: timestamped like a replay
            steps, evals = self._history
            self._pending = history_metrics(steps, evals, info.start_time) + self._pending
            self._pending_samples = evals + self._pending_samples
        self._pending = missing_metrics(client, mlflow_run, self._pending)
        self._pending_samples = missing_samples(client, mlflow_run, self._pending_samples)
        self._client, self._mlflow_run, self._connected_once = client, mlflow_run, True

    def _send(self) -> None:
        self._last_send = time.monotonic()
        try:
            if self._client is None:
                self._connect()
                if self._outage:  # a failure after this point is a new outage, with its own warning
                    print(f"tracking: {self.uri} reachable again; catching up", file=sys.stderr, flush=True)
                    self._outage = False
            while self._pending:
                self._client.log_batch(self._mlflow_run, metrics=self._pending[:BATCH])
                del self._pending[:BATCH]
            while self._pending_samples:
                record = self._pending_samples[0]
                self._client.log_text(self._mlflow_run, samples_markdown(record), samples_path(record["step"]))
                del self._pending_samples[0]
        except Exception as exc:
            self._fail(exc)

    def _fail(self, exc: Exception) -> None:
        if not self._outage:
            warn(
                f"cannot reach {self.uri} ({error_line(exc)}); training goes on, the local log keeps every step, "
                f"and sending resumes when it answers (tried every {self._retry_s:g} s)"
            )
        self._outage = True
        self._client = None  # reconnect, and ask what arrived, before sending again
        self._next_try = time.monotonic() + self._retry_s
