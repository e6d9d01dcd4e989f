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

A launcher can also be gone before anything watches it: killed while this process was still starting (the
interpreter, the imports). ``tether`` closes that window at the top of a stage script, before its heavy imports:
on Linux it asks the kernel for SIGTERM once the parent dies (the parent-death signal), then checks that no
launcher is gone already (``orphaned``), and stops the process, in one line, if one is. Gone launchers leave a
trace: their children are re-parented (to PID 1 or a subreaper) outside the process group, so the chain of parents
no longer reaches the group's leader. macOS has no parent-death signal: there the same check runs again when the
lifeline starts (``hold``), after the imports and before any output is opened.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import MutableMapping

import psutil

POLL_S = 0.25  # how often the launchers are looked at: the stop comes at most this late
# Set by a Solomon process for the children it starts in sessions of their own (torchrun's workers): its PID,
# which such a child, leading its own group, cannot otherwise tell from the PID 1 or subreaper it was re-parented to.
LAUNCHER_ENV = "SOLOMON_LAUNCHER_PID"
_PR_SET_PDEATHSIG = 1  # prctl(2), Linux
STOPPED_EXIT = 128 + signal.SIGTERM  # as if the launcher's SIGTERM had reached this process


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


def orphaned(process: psutil.Process | None = None, recorded_launcher: int | None = None) -> str | None:
    """Why a launcher of ``process`` (default: this one) is already gone, or None while they are all there.

    A process inside a group (`dvc`'s shell and stage, under `dvc` or `make`): its chain of parents in the group
    must reach the group's leader; a chain that leaves the group below the leader was cut, its lower end
    re-parented: a cut at this process, or at the shell it runs in (`dvc`'s `sh -c`), means the launcher that ran it
    died; a cut higher up (a script that started `dvc repro &` and exited) is the affair of the living launcher
    below it. A `make` on the chain that has received a stop signal counts as gone (``stopping``). The one chain
    that legitimately leaves the group early, a pipeline's later command (`a | stage`, whose leader `a` is a
    sibling), hangs from the shell that leads the session. A group's leader: its parent must be ``recorded_launcher``
    where one was recorded (``LAUNCHER_ENV``); nothing else tells a parent that died from one that was never there.
    """
    process = process or psutil.Process()
    group = os.getpgid(process.pid)
    if group == process.pid:
        if recorded_launcher is None or process.ppid() == recorded_launcher:
            return None
        return f"its launcher (pid {recorded_launcher}) is gone"
    lowest = process
    parent = process.parent()
    depth = 0  # of ``lowest`` above ``process``
    while parent is not None:
        if not _alive(parent):  # exiting: a launcher's last threads hold its children for a moment after its main one
            return f"its launcher is gone (pid {parent.pid} above it is exiting)"
        try:
            if os.getpgid(parent.pid) != group:
                break
        except ProcessLookupError:  # gone while looked at: the next look sees its children re-parented
            break
        received = stopping(parent)
        if received:
            return f"{_name(parent)} (pid {parent.pid}) above it got {received} and waits for its children to end"
        if parent.pid == group:
            return None
        lowest, parent, depth = parent, parent.parent(), depth + 1
    if parent is None or parent.pid == os.getsid(process.pid):
        return None
    if depth > 1 or (depth == 1 and not _is_shell(lowest)):  # a cut above the launcher that runs this process
        return None  # (a script that left `make run &` running): that launcher lives, and this process goes with it
    which = "this process" if lowest.pid == process.pid else f"{_name(lowest)} (pid {lowest.pid}), which started it,"
    return f"its launcher is gone ({which} was re-parented to pid {parent.pid})"


def tether(environ: MutableMapping[str, str]) -> None:
    """At the top of a stage, before its heavy imports: stop now if a launcher is gone, and from here on until
    ``hold`` takes over, stop once the parent dies or a stop signal comes, in one line (nothing is written yet).
    ``environ`` (the process's environment) may hold the launcher recorded for it, which is taken out of it."""
    for signum in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(signum) != signal.SIG_IGN:
            signal.signal(signum, _stop_while_starting)
    parent_death_signal(signal.SIGTERM)  # before the check: a death after it is signalled, one before it is seen
    recorded = environ.pop(LAUNCHER_ENV, None)  # meant for this process alone, not for what it starts
    reason = orphaned(recorded_launcher=int(recorded) if recorded and recorded.isdigit() else None)
    if reason:
        _stop_now(f"error: stopping before it starts: {reason}: nothing was written")


def hold(interval_s: float = POLL_S) -> threading.Thread | None:
    """Start watching this process's launchers, before the work starts; None when there is none to watch. A
    launcher already gone ends this process here, in one line, with the exit status of a stop (143)."""
    watched = [(launcher, _name(launcher)) for launcher in launchers()]
    reason = orphaned()  # after the launchers are listed: one gone since is in the list, one gone before is seen here
    parent_death_signal(0)  # the lifeline names the launcher that went; the kernel's signal would not
    if reason:  # hold is called before the work starts: there is nothing to undo yet
        print(f"error: stopping before it starts: {reason}: nothing was written", file=sys.stderr, flush=True)
        sys.exit(STOPPED_EXIT)
    if not watched:
        return None
    thread = threading.Thread(target=_watch, args=(watched, interval_s), name="lifeline", daemon=True)
    thread.start()
    return thread


def parent_death_signal(signum: int) -> bool:
    """Ask Linux to send ``signum`` to this process once its parent dies (0: not to); False where it cannot. It
    survives exec (torchrun, started in place of the train stage, inherits it) but not fork."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signum) == 0
    except (OSError, AttributeError):
        return False


def _stop_while_starting(signum: int, _frame) -> None:
    reason = orphaned()  # the parent-death signal, or a signal sent to this process by name
    cause = (
        f"stopping before it starts: {reason}" if reason else f"stopped by {signal.Signals(signum).name} while starting"
    )
    _stop_now(f"error: {cause}: nothing was written")


def _stop_now(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
    os._exit(STOPPED_EXIT)  # nothing to undo: no output is open yet, and the imports in progress are abandoned


def _watch(watched: list[tuple[psutil.Process, str]], interval_s: float) -> None:
    while True:
        for launcher, name in watched:
            if not _alive(launcher):
                print(f"error: stopping: {name} (pid {launcher.pid}), which started this process, is gone",
                      file=sys.stderr, flush=True)  # fmt: skip
                os.kill(os.getpid(), signal.SIGTERM)
                return
            received = stopping(launcher)
            if received:
                print(f"error: stopping: {name} (pid {launcher.pid}), which started this process, got {received} and "
                      "waits for its children to end", file=sys.stderr, flush=True)  # fmt: skip
                os.kill(os.getpid(), signal.SIGTERM)
                return
        time.sleep(interval_s)


def stopping(process: psutil.Process) -> str | None:
    """The stop signal GNU make has received, or None: make catches SIGHUP and SIGTERM from its start (unless they
    are ignored: ``nohup``), and on one puts the default action back, forwards only SIGTERM to its children, waits
    for them all (it takes a SIGHUP or SIGINT to have reached them from the terminal too) and then re-raises it.
    Signalled by PID, it would wait for the whole pipeline under it. Linux shows the handlers in /proc."""
    try:
        if os.path.basename(process.exe() or "") not in ("make", "gmake"):
            return None
    except psutil.Error:
        return None
    caught, ignored = _signal_set(process.pid, "SigCgt"), _signal_set(process.pid, "SigIgn")
    received = [signum for signum in (signal.SIGHUP, signal.SIGTERM) if signum not in caught | ignored]
    return signal.Signals(received[0]).name if received and caught else None  # no mask read: nothing known


def _signal_set(pid: int, field: str) -> frozenset[int]:
    """The signals in one of /proc/PID/status's masks; empty where there is no /proc (macOS) or no process."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith(field + ":"):
                    mask = int(line.split()[1], 16)
                    return frozenset(n + 1 for n in range(64) if mask >> n & 1)
    except (OSError, ValueError):
        pass
    return frozenset()


def _is_shell(process: psutil.Process) -> bool:
    """A shell running a command line (`sh -c`): what `dvc` runs a stage's command in."""
    try:
        return os.path.basename(process.exe() or "") in ("sh", "dash", "bash", "zsh", "ksh")
    except psutil.Error:
        return False


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
