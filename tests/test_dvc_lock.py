"""A dvc.lock left empty or cut by a kill during DVC's own write: restored from git, or removed when untracked."""

from __future__ import annotations

import subprocess
from pathlib import Path

from solomon.dvc_lock import lock_problem, repair_lock

LOCK = "schema: '2.0'\nstages:\n  check:\n    cmd: python stages/check.py data/checked.json\n"


def git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.email=t@t", "-c", "user.name=t", *args], cwd=repo, check=True, capture_output=True
    )


def test_a_readable_or_absent_lock_is_left_alone(tmp_path: Path) -> None:
    assert repair_lock(tmp_path) is None
    (tmp_path / "dvc.lock").write_text(LOCK)
    assert lock_problem(tmp_path) is None and repair_lock(tmp_path) is None
    assert (tmp_path / "dvc.lock").read_text() == LOCK


def test_an_empty_tracked_lock_is_restored_from_git(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q")
    (tmp_path / "dvc.lock").write_text(LOCK)
    git(tmp_path, "add", "dvc.lock")
    git(tmp_path, "commit", "-qm", "lock")
    (tmp_path / "dvc.lock").write_text("")
    assert "it is empty" in repair_lock(tmp_path)
    assert (tmp_path / "dvc.lock").read_text() == LOCK


def test_a_cut_untracked_lock_is_removed(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q")
    (tmp_path / "dvc.lock").write_text(LOCK[:25])  # "schema: '2.0'\nstages:\n  c"
    message = repair_lock(tmp_path)
    assert "removed it" in message and not (tmp_path / "dvc.lock").exists()


def test_an_empty_rwlock_is_removed(tmp_path: Path) -> None:
    rwlock = tmp_path / ".dvc/tmp/rwlock"
    rwlock.parent.mkdir(parents=True)
    rwlock.write_text('{"read": {}, "write": {}}')
    assert repair_lock(tmp_path) is None and rwlock.exists()
    rwlock.write_text("")
    assert "rwlock was unreadable" in repair_lock(tmp_path) and not rwlock.exists()
