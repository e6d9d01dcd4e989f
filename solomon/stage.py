"""How a pipeline stage ends when something besides its input stops it: Ctrl-C, SIGTERM or SIGHUP (a supervisor,
a closed terminal, or the stage's lifeline once `dvc`, `make` or whatever started it is gone: ``solomon.lifeline``),
or a full disk, give one line and a non-zero exit, as bad input does (``solomon.errors.run_main``); the stage's
previous outputs stay in place (its writes are staged: ``solomon.atomic``). The train stage checkpoints on these
signals inside its loop (``solomon.train.signals``); this covers the rest of its life and the other stages."""

from __future__ import annotations

import errno
import os
import signal
from collections.abc import Callable

from solomon import atomic, lifeline
from solomon.errors import SolomonError, run_main

STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class Stopped(BaseException):
    """A stop signal, raised where a long-running tool is (the docs runner), so that it unwinds on the way out."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_stopped(signum: int, _frame) -> None:
    raise Stopped(signum)


def raise_on_stop_signals() -> None:
    """From now on SIGTERM and SIGHUP raise ``Stopped`` where this process is, so that what it started is undone
    on the way out (nohup's SIGHUP stays ignored). The stages do not: ``exit_on_stop_signals``."""
    for signum in STOP_SIGNALS:
        if signal.getsignal(signum) != signal.SIG_IGN:
            signal.signal(signum, _raise_stopped)


def exit_on_stop_signals() -> None:
    """From now on SIGTERM, SIGHUP and Ctrl-C end the stage where it is: what it was writing is undone
    (``atomic.abandon_writes``), one line is said, and it exits 128 + the signal (nohup's SIGHUP stays ignored).
    Nothing is raised into the stage: an exception raised at an arbitrary bytecode can land in the import system, a
    weakref callback or a library's ``except``, where it is swallowed or leaves a lock held (seen: a stopped
    tokenizer stage that ran to its end, and one blocked for ever on an import lock). Its workers are killed first
    (``_end_children``)."""
    for signum in (*STOP_SIGNALS, signal.SIGINT):
        if signal.getsignal(signum) != signal.SIG_IGN:
            signal.signal(signum, _exit_stopped)


def _exit_stopped(signum: int, _frame) -> None:
    atomic.abandon_writes()
    _end_children()
    cause = "interrupted" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}"
    line = f"error: {cause}: the stage's previous outputs are left as they were\n"
    os.write(2, line.encode())  # not print: the stage may have been stopped inside a write to stderr
    os._exit(128 + signum)


def _end_children() -> None:
    """SIGKILL what this stage started (its worker processes, quietly, even those still starting), then release
    the pool's semaphores as a normal exit would, so that multiprocessing's resource tracker has nothing left to
    warn about. The tracker itself stays: it ends once this process has."""
    import multiprocessing.util

    import psutil

    for child in psutil.Process().children():
        try:
            if "resource_tracker" not in " ".join(child.cmdline()):
                child.kill()
        except psutil.Error:
            pass
    multiprocessing.util._run_finalizers(0)  # the semaphores' (priority 0) and the queues' closing, none that waits


def run_stage(main: Callable[[], object]) -> None:
    def guarded() -> None:
        exit_on_stop_signals()
        lifeline.hold()
        try:
            main()
        except OSError as exc:
            if _working_directory_gone():
                raise SolomonError(
                    "the stage's working directory was removed while it ran (`dvc queue kill` and `dvc queue stop "
                    "--kill` remove a queued experiment's copy): nothing is left to write into"
                ) from None
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            raise SolomonError(
                f"no space left on the disk writing {exc.filename or 'the outputs'}: free some, then rerun (the "
                "previous outputs are left as they were)"
            ) from None

    run_main(guarded)


def _working_directory_gone() -> bool:
    try:
        return not os.path.isdir(os.getcwd())
    except FileNotFoundError:  # Linux's answer for a removed working directory
        return True
