"""The tiny config (seconds a stage), and ``solomon try`` (``make try``): the pipeline on it as a DVC experiment
in the workspace, for a user to look at. ``make smoke`` and the tests run it in scratch copies."""

from __future__ import annotations

import json
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

from solomon.errors import SolomonError
from solomon.params import flatten
from solomon.pipeline import dvc_executable, pipeline_env, run
from solomon.records import LATEST, read_latest

# what the tiny config changes in params.yaml: a model and a run small enough to train in seconds
TINY_OVERRIDES: dict = {
    "tokenizer": {"vocab_size": 512},
    "model": {"n_layer": 2, "n_head": 2, "n_embd": 64, "block_size": 32},
    "train": {
        "max_steps": 30,
        "batch_size": 8,
        "threads": 1,
        "eval_interval": 10,
        "eval_tokens": 1024,
        "ckpt_interval": 10,
        "samples": {"max_new_tokens": 8},
        # held at the ε the tiny config's recorded bytes (tests/golden/) were made with, not the default's
        "label_smoothing": 0.1,
    },
    "lr": {"warmup": 20},
    "eval": {"max_tokens": 4096, "batch_size": 16, "threads": 1},
}


def experiment_name() -> str:
    """A new name for each try: try-<UTC time>."""
    return f"try-{datetime.now(UTC):%Y%m%d-%H%M%S}"


def try_arguments(name: str) -> list[str]:
    """The arguments of ``dvc`` that run the tiny config as the experiment ``name``: one ``-S`` per tiny param, so
    params.yaml keeps its comments and ``dvc exp show`` shows exactly what the try changed."""
    sets = [arg for key, value in flatten(TINY_OVERRIDES).items() for arg in ("-S", f"{key}={json.dumps(value)}")]
    return ["exp", "run", "-n", name, *sets]


def _changed_files(root: Path) -> set[str]:
    """Tracked files that differ from HEAD."""
    return set(run(["git", "diff", "--name-only", "HEAD"], root).stdout.split())


def try_in_workspace(root: Path, name: str | None = None) -> dict:
    """Run the tiny config in the workspace ``root`` as a DVC experiment, DVC's output streaming to the terminal.
    Returns the experiment's name, seconds, run directory and the tracked files it changed (which ``git checkout
    HEAD --`` restores); files that differed from HEAD before are not among them."""
    if run(["git", "rev-parse", "--verify", "-q", "HEAD^{commit}"], root, check=False).returncode != 0:
        raise SolomonError(
            f"{root.resolve()} has no git commit: DVC records an experiment against one; commit first "
            "(git add -A && git commit -m start), or use `make smoke`, which needs none"
        )
    if not (root / ".dvc").is_dir():
        raise SolomonError(f"{root.resolve()} is not a DVC repository (no .dvc/): run it in the Solomon checkout")
    name = name or experiment_name()
    changed_before = _changed_files(root)
    started = time.perf_counter()
    done = subprocess.run([dvc_executable(), *try_arguments(name)], cwd=root, env=pipeline_env())
    if done.returncode != 0:
        raise SolomonError(f"try: `dvc exp run` failed (exit {done.returncode}): its last lines above say which stage")
    latest = read_latest(root)
    if latest is None:
        raise SolomonError(f"try: the experiment ran but wrote no {LATEST}")
    return {
        "experiment": name,
        "seconds": round(time.perf_counter() - started, 1),
        "run_dir": Path(latest["path"]) if root == Path(".") else root / latest["path"],
        "changed": sorted(_changed_files(root) - changed_before),
    }
