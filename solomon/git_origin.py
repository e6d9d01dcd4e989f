"""Where a run came from: the git commit, and which tracked files differed from it.

A run writes the pipeline's own outputs (dvc.lock and the outs, metrics and plots of dvc.yaml's stages, some of
them committed) before its report is made, so a checkout that held only the committed source and params looks
changed by the time it is recorded. The record keeps the two apart: ``dirty`` and ``changed`` are the source and
params changes, ``pipeline_outputs_changed`` the pipeline's own. Records made before this hold ``dirty`` only.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from solomon.pipeline import output_paths
from solomon.records import DVC_YAML

SHOWN = 5  # changed paths a page names before "and N more"


def _git(repo: Path, *args: str) -> str | None:
    try:
        # --no-optional-locks: a status refreshes git's index under index.lock; a process killed meanwhile
        # (a killed `dvc repro`) would leave that lock and break every later git command in the checkout.
        command = ["git", "--no-optional-locks", "-C", str(repo), *args]
        return subprocess.run(command, capture_output=True, text=True, check=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def is_pipeline_output(path: str, outputs: list[str]) -> bool:
    return any(path == out or path.startswith(f"{out.rstrip('/')}/") for out in outputs)


def git_state(repo: Path | None = None) -> dict:
    """The commit of ``repo`` (the working directory by default) and its tracked files that differ from it, staged
    or not, split into source/params changes and pipeline outputs; every field None where git cannot tell."""
    repo = repo or Path.cwd()
    commit = _git(repo, "rev-parse", "HEAD")
    top = _git(repo, "rev-parse", "--show-toplevel")
    listed = _git(repo, "diff", "--name-only", "--no-renames", "-z", "HEAD", "--") if commit else None
    if commit is None or top is None or listed is None:
        return {"commit": commit and commit.strip(), "dirty": None, "changed": None, "pipeline_outputs_changed": None}
    # git names paths from the top of the work tree; dvc.yaml names them from the DVC repository, which may sit below
    prefix = Path(repo).resolve().relative_to(Path(top.strip()).resolve()).as_posix()
    prefix = "" if prefix == "." else f"{prefix}/"
    paths = sorted(p.removeprefix(prefix) for p in listed.split("\0") if p and p.startswith(prefix))
    outputs = output_paths(repo) if (repo / DVC_YAML).is_file() else []
    changed = [p for p in paths if not is_pipeline_output(p, outputs)]
    return {
        "commit": commit.strip(),
        "dirty": bool(changed),
        "changed": changed,
        "pipeline_outputs_changed": [p for p in paths if is_pipeline_output(p, outputs)],
    }


def uncommitted_note(git: dict) -> str:
    """`` (uncommitted changes: a, b)`` for a record with source or params changes, else ``""``; an older record,
    which names none, gets `` (uncommitted changes)``."""
    if not git.get("dirty"):
        return ""
    changed = git.get("changed")
    if not changed:
        return " (uncommitted changes)"
    more = f" and {len(changed) - SHOWN} more" if len(changed) > SHOWN else ""
    return f" (uncommitted changes: {', '.join(changed[:SHOWN])}{more})"
