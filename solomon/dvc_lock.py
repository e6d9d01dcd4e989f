"""Repair what a kill during DVC's own writes leaves unreadable: ``dvc.lock`` and DVC's read-write lock file.

DVC rewrites ``dvc.lock`` after each stage, and its lock file ``.dvc/tmp/rwlock`` (JSON) around every command, in
place (open for writing, then dump), so a SIGKILL in that window leaves an empty or partial file and every later
``dvc repro`` stops ("dvc.lock validation failed", "Unable to read RWLock-file") before any stage runs. Nothing of
Solomon's runs inside DVC, so the repair runs before it: the committed ``dvc.lock`` is restored when git tracks it,
otherwise the file is removed; an unreadable ``rwlock`` is removed (it only records the DVC processes running, and
none is when this runs). ``dvc repro`` then reruns what it cannot prove up to date — the data stages rebuild the same
bytes, training resumes from its checkpoint — and ends with the bytes of an uninterrupted run.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from solomon.params import parse_yaml
from solomon.records import DVC_LOCK

RWLOCK = ".dvc/tmp/rwlock"  # DVC's record of which running commands read or write which paths


def lock_problem(repo: Path) -> str | None:
    """Why ``repo``'s dvc.lock cannot be read as DVC writes it; None when it is readable or absent."""
    path = repo / DVC_LOCK
    if not path.exists():
        return None
    text = path.read_text(encoding="utf-8", errors="replace")
    if not text.strip():
        return "it is empty"
    try:
        lock = parse_yaml(text)
    except yaml.YAMLError as exc:
        return f"it is not valid YAML ({str(exc).splitlines()[0]})"
    if not isinstance(lock, dict) or not isinstance(lock.get("stages"), dict):
        return "it has no stages mapping"
    return None


def rwlock_problem(repo: Path) -> str | None:
    """Why DVC's rwlock file cannot be read; None when it is readable or absent."""
    path = repo / RWLOCK
    if not path.exists():
        return None
    try:
        json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return f"it is not JSON ({exc})"
    return None


def repair_lock(repo: Path) -> str | None:
    """Restore or remove a broken dvc.lock, remove a broken rwlock; returns what was done, or None when both were
    fine. Run it only while no DVC command runs in ``repo``."""
    repaired = []
    problem = rwlock_problem(repo)
    if problem is not None:
        (repo / RWLOCK).unlink()
        repaired.append(f"{RWLOCK} was unreadable ({problem}: a kill during DVC's own write of it); removed it")
    dvc_lock = _repair_dvc_lock(repo)
    if dvc_lock is not None:
        repaired.append(dvc_lock)
    return "; ".join(repaired) or None


def _repair_dvc_lock(repo: Path) -> str | None:
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
