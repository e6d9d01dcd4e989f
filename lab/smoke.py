"""The whole pipeline on the tiny config: ``solomon smoke`` in a scratch copy, leaving the workspace untouched;
``solomon try`` (``make try``) as a DVC experiment in the workspace, for a user to look at."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from solomon.atomic import staged_dir
from solomon.errors import SolomonError
from solomon.params import flatten
from solomon.pipeline import dvc_executable
from solomon.records import LATEST, METRICS, read_json, read_latest
from solomon.tools.scratch import TINY_OVERRIDES, make_scratch_repo, pipeline_env, run


def smoke(source: Path, keep: bool = False, keep_run: Path | None = None) -> dict:
    """``keep_run``: copy the smoke run's report directory there (CI keeps it as a job artifact)."""
    scratch = Path(tempfile.mkdtemp(prefix="solomon-smoke-"))
    started = time.perf_counter()
    try:
        repo = make_scratch_repo(source, scratch / "repo", TINY_OVERRIDES)
        done = run([dvc_executable(), "repro"], repo, check=False)
        if done.returncode != 0:
            tail = (done.stdout + done.stderr).strip().splitlines()[-15:]
            raise SolomonError("smoke: dvc repro failed:\n" + "\n".join(tail))
        latest = read_latest(repo)
        if latest is None:
            raise SolomonError(f"smoke: dvc repro succeeded but wrote no {LATEST}")
        metrics = read_json(repo / METRICS)
        if keep_run is not None:
            with staged_dir(keep_run) as tmp:
                shutil.copytree(repo / latest["path"], tmp, dirs_exist_ok=True)
        return {
            "seconds": round(time.perf_counter() - started, 1),
            "run": latest["run_id"],
            "metrics": metrics,
            "scratch": str(repo) if keep else None,
        }
    finally:
        if not keep:
            shutil.rmtree(scratch, ignore_errors=True)


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
