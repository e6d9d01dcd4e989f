"""The remote story (docs/remote.md), with a real DVC remote in a local directory: a run pushed there, and a fresh
`git clone` that pulls it, verifies, generates and replays without retraining."""

from __future__ import annotations

import sys
from pathlib import Path

from conftest import dvc

from solomon.pipeline import run

SOLOMON = str(Path(sys.executable).parent / "solomon")


def test_a_fresh_clone_pulls_the_run_then_verifies_generates_and_replays(repo_copy: Path, tmp_path: Path) -> None:
    remote = tmp_path / "remote"
    with open(repo_copy / ".gitignore", "a", encoding="utf-8") as ignore:  # what the repository's .gitignore holds
        ignore.write("/checkpoints/\n/mlflow.db\n/mlartifacts/\n")
    dvc(repo_copy, "remote", "add", "-d", "storage", str(remote))
    dvc(repo_copy, "push")
    for args in (["git", "add", "-A"], ["git", "commit", "-q", "-m", "a run, pushed"]):
        run(args, repo_copy)

    clone = tmp_path / "clone"
    run(["git", "clone", "-q", str(repo_copy), str(clone)], tmp_path)
    assert not (clone / "models").exists() and not (clone / "anchors").exists()
    dvc(clone, "pull")
    assert (clone / "anchors/index.json").is_file() and (clone / "models/model.safetensors").is_file()
    for args in (
        ["verify"],
        ["generate", "--prompt", "In the beginning", "--max-new-tokens", "8"],
        ["replay", "--steps", "5"],
    ):
        done = run([SOLOMON, *args], clone, check=False)
        assert done.returncode == 0, f"solomon {' '.join(args)}: {done.stdout}{done.stderr}"
    assert "verified" in run([SOLOMON, "verify"], clone).stdout
    assert "bit-identical: 5 steps" in done.stdout
