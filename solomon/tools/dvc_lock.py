"""Repair a ``dvc.lock`` that a kill during DVC's own write of it left empty or cut short.

DVC rewrites ``dvc.lock`` in place (open for writing, then dump) after each stage, so a SIGKILL in that window
leaves an empty or partial file, and every later ``dvc repro`` stops at "dvc.lock validation failed" before any
stage runs. Nothing of Solomon's can run inside that window, so the repair runs before DVC: the committed
``dvc.lock`` is restored when git tracks it, otherwise the file is removed. Either way ``dvc repro`` then reruns
what it cannot prove up to date — the data stages rebuild the same bytes, training resumes from its checkpoint —
and ends with the bytes of an uninterrupted run.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from solomon.records import DVC_LOCK


def lock_problem(repo: Path) -> str | None:
    """Why ``repo``'s dvc.lock cannot be read as DVC writes it; None when it is readable or absent."""
    path = repo / DVC_LOCK
    if not path.exists():
        return None
    text = path.read_text(encoding="utf-8", errors="replace")
    if not text.strip():
        return "it is empty"
    try:
        lock = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        return f"it is not valid YAML ({str(exc).splitlines()[0]})"
    if not isinstance(lock, dict) or not isinstance(lock.get("stages"), dict):
        return "it has no stages mapping"
    return None


def repair_lock(repo: Path) -> str | None:
    """Restore or remove a broken dvc.lock; returns what was done, or None when it was fine."""
    problem = lock_problem(repo)
    if problem is None:
        return None
    tracked = subprocess.run(
        ["git", "--no-optional-locks", "ls-files", "--error-unmatch", DVC_LOCK], cwd=repo, capture_output=True
    )
    if tracked.returncode == 0:
        subprocess.run(["git", "checkout", "--", DVC_LOCK], cwd=repo, check=True, capture_output=True)
        action = "restored the committed one"
    else:
        (repo / DVC_LOCK).unlink()
        action = "removed it (git does not track it)"
    return f"{DVC_LOCK} was unreadable ({problem}: a kill during DVC's own write of it); {action}"
