"""A scratch copy of the pipeline: the tracked files in a new git + DVC repository, with params overridden.

``make smoke`` runs the whole pipeline there on a tiny config, and the tests build their repositories the same
way, so the workspace is never touched.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from solomon.params import read_yaml
from solomon.pipeline import dvc_executable
from solomon.records import PARAMS_FILE

# The pipeline's own files; data/, models/ and reports/ are produced in the copy.
PIPELINE_FILES = ("dvc.yaml", PARAMS_FILE, "requirements.lock", "stages", "solomon", "corpus", ".dvcignore")

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
    },
    "lr": {"warmup": 20},
    "eval": {"max_tokens": 4096, "batch_size": 16, "threads": 1},
}


def merge(base: dict, overrides: dict) -> dict:
    merged = dict(base)
    for key, value in overrides.items():
        merged[key] = merge(merged.get(key) or {}, value) if isinstance(value, dict) else value
    return merged


def pipeline_env() -> dict[str, str]:
    """Environment for DVC and the stages: this interpreter's bin first, no analytics, one thread per process."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["DVC_NO_ANALYTICS"] = "1"
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def run(args: list[str], cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, env=pipeline_env(), capture_output=True, text=True, check=check)


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
