"""Shared fixtures: a tiny pipeline built once with real DVC in a temporary git repository."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from solomon.tools.scratch import TINY_OVERRIDES, make_scratch_repo, run

ROOT = Path(__file__).resolve().parents[1]
DVC = str(Path(sys.executable).parent / "dvc")

# One thread per process: torch with two threads beside another busy process slows down badly.
os.environ.setdefault("OMP_NUM_THREADS", "1")


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tree_digest(root: Path) -> dict[str, str]:
    """SHA256 of every file below ``root``, by relative path: equal digests mean an untouched tree."""
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def latest_run_dir(repo: Path) -> Path:
    """The run directory reports/latest.json names."""
    return repo / json.loads((repo / "reports/latest.json").read_text())["path"]


def flip_last_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))


def dvc(repo: Path, *args: str, check: bool = True):
    return run([DVC, *args], repo, check=check)


@pytest.fixture(scope="session")
def built_repo(tmp_path_factory) -> Path:
    """The tiny pipeline after one full `dvc repro`; copy it (see `repo_copy`) before changing it."""
    repo = make_scratch_repo(ROOT, tmp_path_factory.mktemp("built") / "repo", TINY_OVERRIDES)
    done = dvc(repo, "repro", check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return repo


@pytest.fixture
def repo_copy(built_repo: Path, tmp_path: Path) -> Path:
    """A private copy of the built pipeline (git history, DVC cache and outputs included), without its MLflow
    store: the embedded store records absolute artifact paths, so a copy of it would write into the built repo."""
    copy = tmp_path / "repo"
    shutil.copytree(built_repo, copy, symlinks=True, ignore=shutil.ignore_patterns("mlflow.db", "mlartifacts"))
    return copy


@pytest.fixture
def tiny_run(built_repo: Path, tmp_path: Path):
    """Build (params, TrainPaths) for an in-process training run on the tiny pipeline's tokens."""
    import yaml

    from solomon.params import Params
    from solomon.tools.scratch import merge
    from solomon.train.loop import TrainPaths

    def make(overrides: dict | None = None, out: Path | None = None):
        base = yaml.safe_load((built_repo / "params.yaml").read_text())
        params = Params.model_validate(merge(base, overrides or {}))
        out = out or tmp_path
        paths = TrainPaths(
            tokens_dir=built_repo / "data/tokens",
            tokenizer=built_repo / "data/tokenizer.json",
            model_dir=out / "models",
            checkpoints=out / "checkpoints",
            steps_log=out / "train_log.tsv",
            evals_log=out / "train_evals.jsonl",
            metrics=out / "train_metrics.json",
        )
        return params, paths

    return make
