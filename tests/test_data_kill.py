"""A data stage killed with SIGKILL at any moment, then `dvc repro` again: the same bytes as an uninterrupted run,
and no half-written output counted (real DVC, real processes, real signals)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import DVC, tree_digest

from lab.bench.data import synthetic_corpus
from lab.scratch import merge
from solomon.data.hooks import CRASH_AT, CRASH_POINTS
from solomon.params import read_yaml
from solomon.pipeline import pipeline_env

pytestmark = pytest.mark.slow
DATA_STAGES = ("check", "prepare", "tokenizer", "datacard")


def with_corpus(repo: Path, corpus: Path) -> Path:
    shutil.copy(corpus, repo / "corpus/synthetic.jsonl")
    params = merge(read_yaml(repo / "params.yaml"), {"corpus": {"source": "corpus/synthetic.jsonl"}})
    (repo / "params.yaml").write_text(yaml.safe_dump(params))
    return repo


def repro(repo: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    subprocess.run([str(Path(DVC).parent / "solomon"), "repair-lock"], cwd=repo, env=pipeline_env(), check=True)
    return subprocess.run(
        [DVC, "repro", "datacard"], cwd=repo, env=pipeline_env() | (env or {}), capture_output=True, text=True
    )


def killed_after(repo: Path, seconds: float) -> None:
    """`dvc repro datacard` with its whole process group (stages and their workers) SIGKILLed after ``seconds``."""
    process = subprocess.Popen(
        [DVC, "repro", "datacard"], cwd=repo, env=pipeline_env(), start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def data_outputs(repo: Path) -> dict[str, str]:
    found = tree_digest(repo / "data")
    leftovers = [name for name in found if name.endswith((".tmp", ".old")) or ".tmp/" in name or ".old/" in name]
    assert not leftovers, leftovers  # nothing half-written left beside an output
    return found


def lock_entries(repo: Path) -> dict:
    stages = yaml.safe_load((repo / "dvc.lock").read_text())["stages"]
    return {name: stages[name]["outs"] for name in DATA_STAGES if "outs" in stages[name]}


def test_data_stages_killed_anywhere_rerun_to_the_same_bytes(built_repo: Path, tmp_path: Path) -> None:
    corpus = tmp_path / "synthetic.jsonl"
    synthetic_corpus(corpus, 12)
    clean = with_corpus(shutil.copytree(built_repo, tmp_path / "clean", symlinks=True), corpus)
    done = repro(clean)
    assert done.returncode == 0, done.stdout + done.stderr
    expected = data_outputs(clean)

    killed = with_corpus(shutil.copytree(built_repo, tmp_path / "killed", symlinks=True), corpus)
    for stage in ("prepare", "tokenizer"):  # inside the one durable write of each
        for point in CRASH_POINTS:
            done = repro(killed, {CRASH_AT: f"{stage}:{point}"})
            assert done.returncode != 0, f"{stage}:{point} did not kill the stage"
    for seconds in (1.5, 4.0, 7.0, 10.0):  # at moments while the stages read, encode and write
        killed_after(killed, seconds)
    done = repro(killed)
    assert done.returncode == 0, done.stdout + done.stderr
    assert data_outputs(killed) == expected
    assert lock_entries(killed) == lock_entries(clean)
