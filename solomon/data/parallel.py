"""An ordered map over worker processes with a bound on the work in flight: the data stages' use of every core.

Results come back in the order of the items, so what a stage writes does not depend on the number of workers; at
most ``in_flight`` items are read ahead, so memory does not grow with the input (``multiprocessing.Pool.imap``
would read its whole input ahead when the workers fall behind).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from functools import partial
from typing import TypeVar

from solomon.errors import SolomonError
from solomon.lifeline import parent_death_signal

Item = TypeVar("Item")
Result = TypeVar("Result")


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity, which containers and taskset narrow)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def pool_size(work_bytes: int, bytes_per_worker: int, cores: int | None = None) -> int:
    """Workers for ``work_bytes`` of input: every core, but at most one per ``bytes_per_worker`` (and at least one,
    which runs in this process). A worker is a fresh interpreter importing the stage's libraries, which costs more
    than a small input's whole work: the default corpus runs faster without a pool."""
    return max(1, min(cores or available_cores(), work_bytes // bytes_per_worker))


def ordered_map(
    function: Callable[[Item], Result],
    items: Iterable[Item],
    workers: int,
    in_flight: int | None = None,
    initializer: Callable[[], None] | None = None,
) -> Iterator[Result]:
    """``map(function, items)`` on ``workers`` processes (in this process when 1; ``initializer`` runs first in
    each worker process). ``function`` and the items must pickle; an exception raised for an item is raised here,
    in item order, and stops the workers."""
    if workers <= 1:
        yield from map(function, items)
        return
    limit = in_flight or 2 * workers + 1
    # spawn, not fork: the stages run threads (progress bars, tokenizers' pool) that a fork would copy half-held.
    # A worker that dies (killed, out of memory) fails the map with BrokenProcessPool rather than hanging it.
    start = partial(_worker_start, initializer, os.getpid())
    pool = ProcessPoolExecutor(workers, multiprocessing.get_context("spawn"), start)
    pending: deque = deque()
    finished = False
    try:
        for item in items:
            pending.append(pool.submit(function, item))
            if len(pending) >= limit:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
        finished = True
    except BrokenProcessPool:
        raise SolomonError(
            "a worker process died (killed, or out of memory): rerun, with --workers 1 to use less memory"
        ) from None
    finally:
        if finished:
            pool.shutdown()
        else:  # a stop signal, an error or a reader that left: no result is wanted, so none is waited for
            _kill_workers(pool)


def _kill_workers(pool: ProcessPoolExecutor) -> None:
    """End the pool now: waiting for the items in the workers would hold a stop for as long as an item takes, and
    for ever where one is stuck."""
    kill = getattr(pool, "kill_workers", None)  # Python 3.14
    if kill is not None:
        kill()
    else:
        for process in list((pool._processes or {}).values()):
            process.kill()
    pool.shutdown(wait=False, cancel_futures=True)


def _worker_start(initializer: Callable[[], None] | None, stage_pid: int) -> None:
    """In each worker: die with the stage's process (a worker left behind would wait on its queue for ever), and
    leave Ctrl-C to it (the stage stops once, in one line); then the stage's own ``initializer``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent_death_signal(signal.SIGKILL)  # Linux; elsewhere a worker outlives a stage killed with -9
    if os.getppid() != stage_pid:  # the stage died before the line above took effect
        os._exit(1)
    if initializer is not None:
        initializer()
