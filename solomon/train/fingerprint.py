"""What a checkpoint belongs to: params, data, tokenizer, code and environment, flattened to named values.

Resume compares the checkpoint's fingerprint with the current one and names the first key that differs.
Params in ``resumable(params)`` may change between an interruption and its resume: they do not alter the
batches or updates of the steps already taken.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from solomon.hashing import sha256_file
from solomon.imports import closure, relative_names
from solomon.params import Params, flatten

# The code a checkpoint depends on: every package module the training loop runs, derived from its imports, but the
# params code, whose validated values are below (as the train stage depends on data/checked/train.json, not on it).
LOOP = Path(__file__).with_name("loop.py")
NOT_CODE = ("solomon.params",)
# The params that change what training computes or records: these sections and keys (dvc.yaml's train stage
# lists the same; a test holds them equal) ...
TRAINING_PARAMS = ("model", "train", "lr", "eval.batch_size")  # eval.batch_size: the periodic evaluations' batches
# ... except those that may change between an interruption and its resume without changing the steps taken
# (train.max_steps only without a cooldown: the cooldown's steps are counted back from it, see ``resumable``).
# train.precision is fingerprinted as what it resolved to (``environment.precision``), not as the word: an ``auto``
# run finishes under the explicit precision auto chose, and refuses a host where auto chooses otherwise.
RESUMABLE_PARAMS = frozenset({"train.max_steps", "train.ckpt_interval", "train.keep_checkpoints", "train.precision"})

# How to make a key that differs hold again, where "restore it" would not say how.
REMEDIES = {
    "environment.precision": "train.precision: auto resolves otherwise on this CPU; set train.precision to the "
    "checkpoint's value to finish the run in its own precision here",
}


def resumable(params: Params) -> frozenset[str]:
    """The params a resume may change: with ``lr.cooldown`` > 0 the rate of the steps already taken depends on
    ``train.max_steps``, so it is fingerprinted (an unfinished run refuses a change; a finished one starts over)."""
    return RESUMABLE_PARAMS - {"train.max_steps"} if params.lr.cooldown > 0 else RESUMABLE_PARAMS


def fingerprint(params: Params, tokens_dir: Path, tokenizer_path: Path | None, precision: str) -> dict:
    """The named values a checkpoint belongs to; ``precision``: ``train.precision`` as this host resolved it (an
    ``auto`` run resumed on a CPU that resolves it otherwise would compute the rest in another precision)."""
    every = flatten(params.model_dump(mode="json"), "params")
    values = {
        key: value
        for key, value in every.items()
        if any(key == f"params.{name}" or key.startswith(f"params.{name}.") for name in TRAINING_PARAMS)
        and key.removeprefix("params.") not in resumable(params)
    }
    values["data.train.bin"] = sha256_file(tokens_dir / "train.bin")
    values["data.val.bin"] = sha256_file(tokens_dir / "val.bin")
    if tokenizer_path is not None:
        values["tokenizer"] = sha256_file(tokenizer_path)
    code = closure(LOOP, exclude=NOT_CODE)
    for name, path in zip(relative_names(code), code, strict=True):
        values[f"code.{name}"] = sha256_file(path)
    # Threads and compile are params (train.*) and so already above.
    values["environment.precision"] = precision
    values["environment.torch"] = str(torch.__version__)
    values["environment.numpy"] = np.__version__  # the data order draws from numpy's generator
    values["environment.deterministic"] = torch.are_deterministic_algorithms_enabled()
    return values


def first_difference(saved: dict, current: dict) -> tuple[str, object, object] | None:
    for key in sorted(set(saved) | set(current)):
        if saved.get(key) != current.get(key):
            return key, saved.get(key), current.get(key)
    return None


class MachineHistory:
    """Which machine kind (``solomon.machine``) trained which steps of a run: a checkpoint component.

    The kind is not in the fingerprint: a resume on another kind (Kubernetes reschedules a pod on whichever node
    is free) is allowed, warned about and recorded, since the run stays the same run — its params, data and code —
    whose later steps are not bit-identical to an uninterrupted run's. Spans cover checkpointed steps only (steps
    after the last checkpoint are trained again on resume).

    It also keeps each start of the training processes: the step it began from and each rank's torchrun restart
    count (its node's agent counts the restarts after a failure there: 0 on a first attempt, or a resume by
    ``dvc repro``), so a run's record says how often it was interrupted and restarted. A start is kept once a
    checkpoint follows it.
    """

    def __init__(self, machine: dict) -> None:
        self.machine = machine
        self.spans: list[dict] = []  # {"kind", "machine", "steps": [first, last]}, oldest first
        self.starts: list[dict] = []  # {"from_step", "torchrun_restarts": [by rank]}, oldest first

    def state_dict(self) -> dict:
        return {"spans": [dict(span) for span in self.spans], "starts": [dict(start) for start in self.starts]}

    def load_state_dict(self, state: dict) -> None:
        self.spans = [dict(span) for span in state["spans"]]
        self.starts = [dict(start) for start in state.get("starts", [])]  # checkpoints before starts were kept

    def started(self, step: int, restarts: list[int]) -> None:
        """The processes (re)started at ``step``; ``restarts``: each rank's torchrun restart count."""
        self.starts.append({"from_step": step, "torchrun_restarts": restarts})

    def ran(self, step: int) -> None:
        """Steps up to ``step`` are trained (checkpointed) on this machine."""
        if self.spans and self.spans[-1]["kind"] == self.machine["kind"]:
            self.spans[-1]["steps"] = [self.spans[-1]["steps"][0], step]
        elif not self.spans or self.spans[-1]["steps"][1] < step:
            first = self.spans[-1]["steps"][1] + 1 if self.spans else 1
            self.spans.append({"kind": self.machine["kind"], "machine": self.machine, "steps": [first, step]})

    def other_kind(self, step: int) -> str | None:
        """The warning for a resume at ``step`` on another kind than the one that trained the steps before it."""
        if not self.spans or self.spans[-1]["kind"] == self.machine["kind"]:
            return None
        return (
            f"train: resuming on another machine kind ({self.machine['kind']}): steps ≥ {step + 1} will not be "
            f"bit-identical to an uninterrupted run on {self.spans[-1]['kind']} (recorded in train_run.json)"
        )

    def kinds(self) -> list[dict]:
        """The spans without the machine dicts: what ``train_run.json`` shows."""
        return [{"kind": span["kind"], "steps": span["steps"]} for span in self.spans]
