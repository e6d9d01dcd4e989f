"""How a data stage ends when something besides its input stops it: Ctrl-C or a full disk give one line and a
non-zero exit, as bad input does (``solomon.errors.run_main``), and the stage's previous outputs stay in place (its
write is staged: ``solomon.atomic.staged_dir``)."""

from __future__ import annotations

import errno
import sys
from collections.abc import Callable

from solomon.errors import SolomonError, run_main

INTERRUPTED = 130  # the shell's status for a process ended by Ctrl-C


def run_stage(main: Callable[[], object]) -> None:
    def guarded() -> None:
        try:
            main()
        except KeyboardInterrupt:
            print("error: interrupted: the stage's previous outputs are left as they were", file=sys.stderr)
            sys.exit(INTERRUPTED)
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            raise SolomonError(
                f"no space left on the disk writing {exc.filename or 'the outputs'}: free some, then rerun (the "
                "previous outputs are left as they were)"
            ) from None

    run_main(guarded)
