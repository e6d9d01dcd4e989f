"""The pipeline as dvc.yaml declares it: each stage's params and command, read in one place.

dvc.yaml owns which params each stage reads (DVC reruns a stage when they change) and each stage's command; the
check stage, the code-dependency writer, bench and the tests read them from here rather than spelling them again.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from solomon.params import Params, read_yaml
from solomon.records import DVC_LOCK, DVC_YAML

CHECK_STAGE = "check"  # validates everything first; the stages after it depend on what it validated


def dvc_executable() -> str:
    """The dvc this interpreter installed (the project's .venv), else the one on PATH: every tool runs this one."""
    beside = Path(sys.executable).parent / "dvc"
    return str(beside) if beside.is_file() else shutil.which("dvc") or "dvc"


def pipeline_env() -> dict[str, str]:
    """Environment for DVC and the stages it runs: this interpreter's bin first, no analytics, one thread per
    process."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["DVC_NO_ANALYTICS"] = "1"
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def run(args: list[str], cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    """``args`` in ``cwd`` under ``pipeline_env()``, output captured as text."""
    return subprocess.run(args, cwd=cwd, env=pipeline_env(), capture_output=True, text=True, check=check)


def stages(repo: Path) -> dict[str, dict]:
    return read_yaml(repo / DVC_YAML)["stages"]


def output_paths(repo: Path) -> list[str]:
    """What the pipeline itself writes, repository-relative: dvc.lock and every stage's outs, metrics and plots
    (files or directories)."""
    paths = [DVC_LOCK]
    for stage in stages(repo).values():
        for key in ("outs", "metrics", "plots"):
            paths += [entry if isinstance(entry, str) else next(iter(entry)) for entry in stage.get(key, [])]
    return paths


def stage_params(repo: Path) -> dict[str, list[str]]:
    """Each stage's params as dvc.yaml lists them: sections (``model``) or dotted keys (``eval.batch_size``)."""
    return {name: [str(p) for p in stage.get("params", [])] for name, stage in stages(repo).items()}


def checked_stages(repo: Path) -> dict[str, list[str]]:
    """The stages after check that read params: the check stage writes each one's validated values."""
    return {name: names for name, names in stage_params(repo).items() if name != CHECK_STAGE and names}


def stage_and_params(text: str) -> tuple[str, list[str]]:
    """``train:model,train,lr`` → ("train", ["model", "train", "lr"]): the check stage's arguments."""
    stage, _, names = text.partition(":")
    if not stage or not names:
        raise ValueError(f"{text!r}: expected STAGE:PARAM[,PARAM...]")
    return stage, names.split(",")


def check_arguments(checked: dict[str, list[str]]) -> list[str]:
    return [f"{stage}:{','.join(names)}" for stage, names in checked.items()]


def stage_command(repo: Path, stage: str) -> list[str]:
    """A stage's command as argv, to run it outside DVC as DVC does: this interpreter for ``python``, the script
    in ``repo``; its other paths stay repository-relative (run it where ``data/`` is)."""
    argv = shlex.split(stages(repo)[stage]["cmd"])
    if argv[:1] == ["python"]:
        argv[:2] = [sys.executable, str(repo / argv[1])]
    return argv


def selected(params: Params, names: list[str]) -> dict[str, Any]:
    """The validated values of ``names`` (sections or dotted keys), as JSON-ready data keyed by those names."""
    values: dict[str, Any] = {}
    every = params.model_dump(mode="json")
    for name in names:
        value: Any = every
        for part in name.split("."):
            value = value[part]
        values[name] = value
    return values
