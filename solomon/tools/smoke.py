"""``solomon smoke``: the whole pipeline on a tiny config in a scratch copy; the workspace stays untouched."""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

from solomon.atomic import staged_dir
from solomon.errors import SolomonError
from solomon.records import LATEST, METRICS, read_json, read_latest
from solomon.tools.scratch import TINY_OVERRIDES, make_scratch_repo, run


def smoke(source: Path, keep: bool = False, keep_run: Path | None = None) -> dict:
    """``keep_run``: copy the smoke run's report directory there (CI keeps it as a job artifact)."""
    scratch = Path(tempfile.mkdtemp(prefix="solomon-smoke-"))
    started = time.perf_counter()
    try:
        repo = make_scratch_repo(source, scratch / "repo", TINY_OVERRIDES)
        done = run([str(Path(sys.executable).parent / "dvc"), "repro"], repo, check=False)
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
