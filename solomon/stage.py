"""How a pipeline stage ends when something besides its input stops it: Ctrl-C, SIGTERM or SIGHUP (a supervisor,
a closed terminal, or the stage's lifeline once `dvc`, `make` or whatever started it is gone: ``solomon.lifeline``),
or a full disk, give one line and a non-zero exit, as bad input does (``solomon.errors.run_main``); the stage's
previous outputs stay in place (its writes are staged: ``solomon.atomic``). The train stage checkpoints on these
signals inside its loop (``solomon.train.signals``); this covers the rest of its life and the other stages."""

from __future__ import annotations

import errno
import os
import signal
import sys
from collections.abc import Callable

from solomon import lifeline
from solomon.errors import SolomonError, run_main

STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class Stopped(BaseException):
    """A stop signal, raised where the stage is, so that its staged writes are undone on the way out."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_stopped(signum: int, _frame) -> None:
    raise Stopped(signum)


def raise_on_stop_signals() -> None:
    """From now on SIGTERM and SIGHUP raise ``Stopped`` where this process is, so that what it started and staged
    is undone on the way out (nohup's SIGHUP stays ignored)."""
    for signum in STOP_SIGNALS:
        if signal.getsignal(signum) != signal.SIG_IGN:
            signal.signal(signum, _raise_stopped)


def run_stage(main: Callable[[], object]) -> None:
    def guarded() -> None:
        raise_on_stop_signals()
        lifeline.hold()
        try:
            main()
        except KeyboardInterrupt:
            print("error: interrupted: the stage's previous outputs are left as they were", file=sys.stderr)
            sys.exit(128 + signal.SIGINT)
        except Stopped as stopped:
            name = signal.Signals(stopped.signum).name
            print(f"error: stopped by {name}: the stage's previous outputs are left as they were", file=sys.stderr)
            sys.exit(128 + stopped.signum)
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
