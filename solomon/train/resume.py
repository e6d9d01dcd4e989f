"""The resume decision: continue from the latest checkpoint, start over, or refuse — from the fingerprint.

- No usable checkpoint, or ``fresh``: start at step 0.
- The checkpoint's fingerprint equals this run's (params that may change between an interruption and its resume
  aside, see ``fingerprint.RESUMABLE_PARAMS``): continue from it.
- It differs and the checkpointed run had finished: a new run; start over.
- It differs and the run had not finished: refuse, naming the first key that differs, since finishing it under
  other inputs would make a run that is neither the old one nor a new one.
"""

from __future__ import annotations

import secrets
import sys

from solomon.errors import SolomonError
from solomon.train.checkpoint import Checkpointer, Loaded
from solomon.train.distributed import ProcessGroup
from solomon.train.fingerprint import REMEDIES, first_difference


def resume_point(
    checkpointer: Checkpointer, fingerprint: dict, max_steps: int, fresh: bool, group: ProcessGroup
) -> Loaded | None:
    """The checkpoint to continue from, or None to start at step 0. Rank 0 tidies the directory first; with several
    ranks it leaves a fresh mark there, and every rank must find it (one directory, shared); every rank then reads
    the same checkpoint."""
    nonce = group.share(secrets.randbits(62)) if group.distributed else 0
    if group.is_main:
        checkpointer.remove_partial()
        if fresh:
            checkpointer.clear()
        if group.distributed:
            checkpointer.write_marker(nonce)
    group.any(False)  # a barrier: the others read only what rank 0 has left
    group.require_shared(checkpointer.directory, checkpointer.sees_marker(nonce))
    loaded = checkpointer.load_latest()
    if loaded is None:
        return None
    difference = first_difference(loaded.state["fingerprint"], fingerprint)
    completed = checkpointer.read_index()["completed"]
    group.any(False)  # all ranks have read the index before rank 0 may clear it
    if difference and completed:
        if group.is_main:
            print(
                f"train: {difference[0]} changed since the finished run in {checkpointer.directory}; starting over",
                file=sys.stderr,
            )
            checkpointer.clear()
        return None
    if difference:
        key, old, new = difference
        raise SolomonError(
            f"resume refused: {key} differs from the checkpoint at step {loaded.step} ({old!r} → {new!r}); "
            f"{REMEDIES.get(key, 'restore it')}, or start over with `python stages/train.py --fresh …` (or delete "
            f"{checkpointer.directory})"
        )
    if loaded.step > max_steps:
        raise SolomonError(
            f"the checkpoint in {checkpointer.directory} is at step {loaded.step}, past train.max_steps {max_steps}: "
            "raise max_steps, or start over with `python stages/train.py --fresh …`"
        )
    if group.is_main:
        print(f"train: resuming from {loaded.path} (step {loaded.step})", file=sys.stderr)
    return loaded
