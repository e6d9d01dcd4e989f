"""A process dies with the pipeline that started it.

`dvc repro` does not forward signals to its stages, and `make`, `timeout`, a supervisor or `kill PID` stop only the
top process: the stage under it would go on training and writing into the workspace as an orphan. A lifeline is a
daemon thread that watches the processes that launched this one and, once one of them is gone, sends this process
``SIGTERM``: the train stage checkpoints at its next step boundary and exits 143, a data stage removes its staged
output and exits 143, a server drains.

Which launchers: the parent and its ancestors that share this process's process group (the job a shell, `make`,
`timeout` or `dvc` runs it in: `dvc`'s shell and `dvc` itself, `make` above them). Where this process leads its own
group (a shell started it as a job), the parent alone, unless SIGHUP is ignored: `nohup` asks to outlive the shell.
PID 1 (init, a container's entry point) is never watched. Each launcher is known by its PID and start time, so a
reused PID does not count as alive.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import psutil

POLL_S = 0.25  # how often the launchers are looked at: the stop comes at most this late


def launchers(process: psutil.Process | None = None) -> list[psutil.Process]:
    """The processes whose end should end ``process`` (default: this one), nearest first."""
    process = process or psutil.Process()
    group = os.getpgid(process.pid)
    found: list[psutil.Process] = []
    parent = process.parent()
    while parent is not None and parent.pid > 1:
        try:
            same_group = os.getpgid(parent.pid) == group
        except ProcessLookupError:
            break
        if not same_group:
            if not found and group == process.pid and signal.getsignal(signal.SIGHUP) != signal.SIG_IGN:
                found.append(parent)
            break
        found.append(parent)
        parent = parent.parent()
    return found


def hold(interval_s: float = POLL_S) -> threading.Thread | None:
    """Start watching this process's launchers; None when there is none to watch."""
    watched = [(launcher, _name(launcher)) for launcher in launchers()]
    if not watched:
        return None
    thread = threading.Thread(target=_watch, args=(watched, interval_s), name="lifeline", daemon=True)
    thread.start()
    return thread


def _watch(watched: list[tuple[psutil.Process, str]], interval_s: float) -> None:
    while True:
        for launcher, name in watched:
            if not _alive(launcher):
                print(f"error: stopping: {name} (pid {launcher.pid}), which started this process, is gone",
                      file=sys.stderr, flush=True)  # fmt: skip
                os.kill(os.getpid(), signal.SIGTERM)
                return
        time.sleep(interval_s)


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _name(process: psutil.Process) -> str:
    """``dvc repro``, ``make run``, ``sh -c``: the program (past a Python interpreter) and its first short word."""
    try:
        parts = process.cmdline()
    except psutil.Error:
        return "its launcher"
    if len(parts) > 1 and os.path.basename(parts[0]).startswith("python") and not parts[1].startswith("-"):
        parts = parts[1:]
    if not parts:
        return "its launcher"
    return " ".join([os.path.basename(parts[0]), *[word for word in parts[1:2] if len(word) <= 24]])
