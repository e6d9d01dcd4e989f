"""A scratch copy of the pipeline: the tracked files in a new git + DVC repository, with params overridden.

``make smoke`` runs the whole pipeline there on a tiny config, and the tests build their repositories the same
way, so the workspace is never touched.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import yaml

from solomon.params import read_yaml
from solomon.pipeline import dvc_executable, pipeline_env, run
from solomon.records import PARAMS_FILE

LAB_ROOT = Path(__file__).resolve().parents[1]  # the checkout that holds lab/
# The pipeline's own files; data/, models/ and reports/ are produced in the copy.
PIPELINE_FILES = ("dvc.yaml", PARAMS_FILE, "requirements.lock", "stages", "solomon", "corpus", "tasks", ".dvcignore")


def lab_env() -> dict[str, str]:
    """``pipeline_env()`` with the repository root importable, so a child process runs lab code (``python -m lab``,
    ``-c "from lab..."``) from any directory: the lab is not installed with the product."""
    env = pipeline_env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(LAB_ROOT), env.get("PYTHONPATH")]))
    return env


def merge(base: dict, overrides: dict) -> dict:
    merged = dict(base)
    for key, value in overrides.items():
        merged[key] = merge(merged.get(key) or {}, value) if isinstance(value, dict) else value
    return merged


def write_params(repo: Path, overrides: dict) -> None:
    params = read_yaml(repo / PARAMS_FILE)
    (repo / PARAMS_FILE).write_text(yaml.safe_dump(merge(params, overrides), sort_keys=False), encoding="utf-8")


def make_scratch_repo(source: Path, dest: Path, overrides: dict) -> Path:
    """Copy the pipeline from ``source`` into ``dest``, override params, and commit it in new git + DVC repos."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in PIPELINE_FILES:
        src = source / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
        elif src.exists():
            shutil.copy2(src, dest / name)
    write_params(dest, overrides)
    for args in (
        ["git", "init", "-q", "-b", "main"],
        ["git", "config", "user.email", "scratch@solomon.invalid"],
        ["git", "config", "user.name", "solomon scratch"],
        [dvc_executable(), "init", "-q"],
        ["git", "add", "-A"],
        ["git", "commit", "-q", "-m", "scratch pipeline"],
    ):
        run(args, dest)
    return dest
