"""The machine and the training process as training goes: CPU, memory, disk and network, sampled with psutil.

The machine's measures are MLflow's system metrics, under its names and in its units (megabytes of 10^6 bytes),
taken as its monitors (``mlflow.system_metrics``) take them: importing those monitors imports all of MLflow, seconds
a training start would pay even with tracking off. The disk is the one the workspace is on (the checkpoints' disk),
not the root. Beside them, the training process's own CPU share (of the cores it may use, like the machine's),
resident memory and peak resident memory. The loop's recorder samples; the run log keeps the rows
(``records.SYSTEM_COLUMNS``) and the tracker sends them to MLflow as ``system/<name>``."""

from __future__ import annotations

import os
import resource
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import psutil

MB = 1e6  # MLflow's system metrics count megabytes of 10^6 bytes
INTERVAL_S = 5.0  # a sample at least this often (seconds) ...
INTERVAL_STEPS = 100  # ... or every this many steps, and at each evaluation and the last step, once per step


class SystemSampler:
    """Averages since the previous sample (CPU), the state at the sample (memory, disk), totals since the
    sampler was made (network, as MLflow counts it: from the start of this process's training)."""

    def __init__(self, workspace: Path = Path(".")) -> None:
        self._workspace = workspace
        self._process = psutil.Process()
        self._cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        self._maxrss_unit = 1 if sys.platform == "darwin" else 1024  # Linux reports ru_maxrss in KiB
        network = psutil.net_io_counters()
        self._network_start = (network.bytes_recv, network.bytes_sent) if network else (0, 0)
        psutil.cpu_percent(None)  # the machine's and the process's CPU shares count from these first calls
        self._process.cpu_percent(None)

    def sample(self) -> dict[str, float]:
        """The measures now, keyed by ``records.SYSTEM_COLUMNS``' names (without step and time)."""
        memory, disk, network = psutil.virtual_memory(), psutil.disk_usage(self._workspace), psutil.net_io_counters()
        received, sent = (network.bytes_recv, network.bytes_sent) if network else self._network_start
        rss = self._process.memory_info().rss / MB
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * self._maxrss_unit / MB
        values = {
            "cpu_utilization_percentage": psutil.cpu_percent(None),
            "system_memory_usage_megabytes": memory.used / MB,
            "system_memory_usage_percentage": memory.used / memory.total * 100,
            "process_cpu_utilization_percentage": self._process.cpu_percent(None) / self._cores,
            "process_rss_megabytes": rss,
            # The kernel updates its high-water mark lazily: it can trail the resident size just read.
            "process_peak_rss_megabytes": max(peak, rss),
            "disk_usage_percentage": disk.percent,
            "disk_usage_megabytes": disk.used / MB,
            "disk_available_megabytes": disk.free / MB,
            "network_receive_megabytes": (received - self._network_start[0]) / MB,
            "network_transmit_megabytes": (sent - self._network_start[1]) / MB,
        }
        return {name: round(value, 1) for name, value in values.items()}


class SystemSchedule:
    """When the recorder samples: every ``INTERVAL_S`` seconds or ``INTERVAL_STEPS`` steps, and whenever told
    (an evaluation, the last step); never twice at one step. ``row`` gives the sample as a system-log row."""

    def __init__(self, start_step: int, workspace: Path = Path(".")) -> None:
        self._sampler = SystemSampler(workspace)
        self._sampled_step, self._sampled_at = start_step, time.monotonic()

    def row(self, step: int, now: bool = False) -> dict | None:
        due = step - self._sampled_step >= INTERVAL_STEPS or time.monotonic() - self._sampled_at >= INTERVAL_S
        if step == self._sampled_step or not (due or now):
            return None
        self._sampled_step, self._sampled_at = step, time.monotonic()
        utc = datetime.now(UTC).isoformat(timespec="seconds")
        return {"step": step, "utc": utc} | self._sampler.sample()
