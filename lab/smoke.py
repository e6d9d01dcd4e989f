"""The whole pipeline on the tiny config in a scratch copy, leaving the workspace untouched (``make smoke``)."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from lab.scratch import make_scratch_repo
from solomon.atomic import staged_dir
from solomon.errors import SolomonError
from solomon.pipeline import dvc_executable, run
from solomon.records import LATEST, METRICS, read_json, read_latest
from solomon.tiny import TINY_OVERRIDES


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
