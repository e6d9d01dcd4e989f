"""Progress of a long data stage on stderr (tqdm): bytes done, documents, MB/s and the time left. The stage scripts
show it only on a terminal and never under ``CI=true`` (``wanted``), so logs and tests hold no progress lines."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from tqdm import tqdm


def wanted(environ: Mapping[str, str]) -> bool:
    """Whether a stage shows progress: stderr is a terminal and this is not CI."""
    terminal = sys.stderr is not None and sys.stderr.isatty()  # None: started with stderr closed
    return terminal and environ.get("CI", "").lower() != "true"


class Bar:
    def __init__(self, bar: tqdm) -> None:
        self._bar = bar

    def advance_to(self, done: int, **counts: int) -> None:
        """``done`` units of the total so far; ``counts`` shown beside (documents=…)."""
        if self._bar.disable:
            return
        self._bar.update(max(done - self._bar.n, 0))
        if counts:
            self._bar.set_postfix(counts, refresh=False)


@contextmanager
def progress_bar(stage: str, total: int | None, show: bool, unit: str = "B") -> Iterator[Bar]:
    with tqdm(
        total=total,
        desc=stage,
        unit=unit,
        unit_scale=True,
        unit_divisor=1000,
        disable=not show,
        file=sys.stderr,
        mininterval=0.5,
        dynamic_ncols=True,
    ) as bar:
        yield Bar(bar)
