"""Exact resume with ``train.optimizer: muon``: a train process SIGKILLed between checkpoints resumes from the last
one (Muon's momentum buffers and AdamW's moments in it) to the same bytes as an uninterrupted run. With label
smoothing on: the promised baseline's loss, under the optimiser a sweep tries against AdamW."""

from __future__ import annotations

import signal
from pathlib import Path

import torch
from conftest import logged_steps, run_train, workdir
from test_resume import outcome

from solomon.train.checkpoint import checkpoint_name, load_file

MUON = {"train": {"optimizer": "muon", "label_smoothing": 0.1}}


def test_a_muon_run_killed_between_checkpoints_resumes_to_the_same_bytes(built_repo: Path, tmp_path: Path) -> None:
    reference = workdir(built_repo, tmp_path / "reference", MUON)
    done = run_train(built_repo, reference)
    assert done.returncode == 0, done.stderr

    cwd = workdir(built_repo, tmp_path / "killed", MUON)
    killed = run_train(built_repo, cwd, crash_at="after-step:25")  # 5 steps past the checkpoint of step 20
    assert killed.returncode == -signal.SIGKILL and logged_steps(cwd) == 25
    state = load_file(cwd / "checkpoints" / checkpoint_name(20))["optimizer"]
    buffers = [entry["momentum_buffer"] for entry in state["muon"]["state"].values()]
    assert len(buffers) == 8 and all(torch.count_nonzero(b) > 0 for b in buffers)  # 2 layers × 4 matrices
    finished = run_train(built_repo, cwd)
    assert finished.returncode == 0, finished.stderr
    assert "(step 20)" in finished.stderr
    assert outcome(cwd) == outcome(reference)
