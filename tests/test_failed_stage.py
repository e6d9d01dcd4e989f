"""The train stage's uncached outputs (logs, metrics, run record) are DVC `persist` outputs: a failed stage leaves
them in place (DVC would otherwise delete them before running it, and `dvc checkout` restores only cached
outputs), and the stage itself rewrites them whole, so a run after a failure ends with exactly the files of an
uninterrupted run."""

from __future__ import annotations

import dataclasses
import os
import subprocess
from pathlib import Path

import pytest
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


def test_a_run_that_fails_while_it_finishes_is_failed_in_mlflow(tiny_run, tmp_path: Path, monkeypatch) -> None:
    """Training done, then writing the output model fails: the MLflow run says FAILED, never FINISHED."""
    from mlflow.tracking import MlflowClient

    from solomon.tracking.live import LiveTracker
    from solomon.tracking.store import RUN_ID_TAG, tracking_uri
    from solomon.train.loop import train
    from solomon.train.recorder import Recorder

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)  # the embedded store in tmp_path
    params, paths = tiny_run({"train": {"max_steps": 10}})
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    paths = dataclasses.replace(paths, model_dir=blocker / "models")  # the model's directory cannot be made
    with pytest.raises(OSError):
        train(params, paths, fresh=True, recorder=Recorder(LiveTracker(params, tmp_path)))
    client = MlflowClient(tracking_uri(tmp_path))
    [run] = client.search_runs([client.get_experiment_by_name("solomon").experiment_id])
    assert run.data.tags[RUN_ID_TAG] and [m.step for m in client.get_metric_history(run.info.run_id, "train/loss")]
    assert run.info.status == "FAILED"
