"""The train stage's uncached outputs (logs, metrics, run record) are DVC `persist` outputs: a failed stage leaves
them in place (DVC would otherwise delete them before running it, and `dvc checkout` restores only cached
outputs), and the stage itself rewrites them whole, so a run after a failure ends with exactly the files of an
uninterrupted run."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from conftest import DVC, pipeline_env

from solomon import records
from solomon.train import hooks

UNCACHED = (records.STEP_LOG, records.EVAL_LOG, records.VAL_LOSS_LOG, records.TRAIN_METRICS, records.TRAIN_RUN)


def repro_train(repo: Path, *flags: str, crash: str | None = None) -> subprocess.CompletedProcess:
    env = pipeline_env()
    env.pop(hooks.CRASH_AT, None)
    if crash is not None:
        env[hooks.CRASH_AT] = crash
    return subprocess.run([DVC, "repro", "--single-item", *flags, "train"], cwd=repo, env=env, capture_output=True,
                          text=True)  # fmt: skip


def deterministic_steps(repo: Path) -> list[tuple]:
    return [tuple(row[c] for c in records.DETERMINISTIC_COLUMNS) for row in records.read_steps(repo / records.STEP_LOG)]


def test_a_failed_train_stage_keeps_its_logs_and_the_next_run_matches_an_uninterrupted_one(repo_copy: Path) -> None:
    before = {name: (repo_copy / name).read_bytes() for name in UNCACHED}
    steps_before = deterministic_steps(repo_copy)
    assert len(steps_before) == 30

    # A train stage that fails as it starts (a malformed hook variable): DVC ran it, and left the outputs alone.
    failed = repro_train(repo_copy, "--force", crash="not-a-point")
    assert failed.returncode != 0 and "bad test hook variable" in failed.stdout + failed.stderr
    assert {name: (repo_copy / name).read_bytes() for name in UNCACHED} == before

    # A fresh run (no checkpoints) killed at step 15: its own logs so far, none of the previous run's rows, and no
    # previous results beside them.
    subprocess.run(["rm", "-rf", records.CHECKPOINTS_DIR], cwd=repo_copy, check=True)
    killed = repro_train(repo_copy, "--force", crash="step-log:15")
    assert killed.returncode != 0
    assert deterministic_steps(repo_copy) == steps_before[:15]
    assert not (repo_copy / records.TRAIN_METRICS).exists() and not (repo_copy / records.TRAIN_RUN).exists()

    # The next `dvc repro` resumes (from the checkpoint at step 10) and ends with the uninterrupted run's files.
    resumed = repro_train(repo_copy)
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    assert deterministic_steps(repo_copy) == steps_before
    for name in (records.EVAL_LOG, records.VAL_LOSS_LOG, records.TRAIN_METRICS):
        assert (repo_copy / name).read_bytes() == before[name], name
    assert os.path.getsize(repo_copy / records.TRAIN_RUN) > 0
