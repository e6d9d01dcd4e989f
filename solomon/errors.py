"""The one exception type for bad input: stages print its message as one line and exit non-zero."""

import sys
from collections.abc import Callable


class SolomonError(Exception):
    """Bad input (params, corpus, checkpoint, CLI flags): the message says what is wrong and how to fix it."""


def first_line(exc: BaseException, limit: int = 200) -> str:
    """An exception as one short line for a warning or refusal: its first line, else its type's name."""
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:limit]


def last_line(text: str) -> str:
    """The last non-blank line of a subprocess's stderr (where its error usually is), or "no message"."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "no message"


def run_main(main: Callable[[], object]) -> None:
    """Run a stage or command: bad input becomes one line on stderr and exit status 2."""
    try:
        main()
    except SolomonError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
