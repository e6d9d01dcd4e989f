"""Data-parallel training with real torchrun processes (gloo, one thread each): the global batch of a step is
the same whatever the process layout, a dead rank stops the job, and `dvc repro` resumes it exactly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from conftest import DVC, digest, dvc, logged_steps, run_train, start_train, wait_for_steps, workdir

from lab.scratch import merge
from solomon.pipeline import pipeline_env
from solomon.records import STEP_LOG, TRAIN_METRICS

TWO_RANKS = {"train": {"nproc": 2, "accum_steps": 1, "threads": 1}}
ONE_RANK_ACCUM_2 = {"train": {"nproc": 1, "accum_steps": 2, "threads": 1}}


def recorded_batches(directory: Path) -> dict[int, list[list[int]]]:
    """Step → the offsets of its micro-batches, in their global order, from every rank's record."""
    by_step: dict[int, dict[int, list[int]]] = {}
    for path in directory.glob("rank*.jsonl"):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            by_step.setdefault(record["step"], {})[record["micro_batch"]] = record["offsets"]
    return {step: [micro[i] for i in sorted(micro)] for step, micro in by_step.items()}


def step_losses(directory: Path) -> list[float]:
    lines = (directory / STEP_LOG).read_text().splitlines()
    column = lines[0].split("\t").index("loss")
    return [float(line.split("\t")[column]) for line in lines[1:]]


def train_recording(built_repo: Path, cwd: Path, overrides: dict) -> subprocess.CompletedProcess:
    workdir(built_repo, cwd, overrides)
    (cwd / "batches").mkdir()
    env = pipeline_env() | {"SOLOMON_RECORD_BATCHES": str(cwd / "batches")}
    return run_train(built_repo, cwd, env=env)


def test_two_ranks_see_the_batches_and_losses_of_one_process_accumulating_two(built_repo: Path, tmp_path: Path):
    two = train_recording(built_repo, tmp_path / "two-ranks", TWO_RANKS)
    assert two.returncode == 0, two.stderr[-3000:]
    one = train_recording(built_repo, tmp_path / "one-rank", ONE_RANK_ACCUM_2)
    assert one.returncode == 0, one.stderr[-3000:]
    assert len(list((tmp_path / "two-ranks/batches").glob("rank*.jsonl"))) == 2  # both ranks trained
    batches_two, batches_one = (
        recorded_batches(tmp_path / "two-ranks/batches"),
        recorded_batches(tmp_path / "one-rank/batches"),
    )
    assert sorted(batches_two) == list(range(30)) and batches_two == batches_one
    losses_two, losses_one = step_losses(tmp_path / "two-ranks"), step_losses(tmp_path / "one-rank")
    assert len(losses_two) == len(losses_one) == 30
    worst = max(abs(a - b) / abs(b) for a, b in zip(losses_two, losses_one, strict=True))
    print(f"2 ranks × accum 1 vs 1 process × accum 2: largest relative loss difference {worst:.2e}")
    for step, (a, b) in enumerate(zip(losses_two, losses_one, strict=True), start=1):
        assert a == pytest.approx(b, rel=1e-5), f"step {step}: {a} vs {b}"
    # only rank 0 wrote: one log, one model, one set of checkpoints
    assert (tmp_path / "two-ranks/models/model.safetensors").is_file()


def rank_pid(rank: int, cwd: Path) -> int | None:
    """The PID of the training process torchrun started as ``rank`` in ``cwd`` (found by its environment and working
    directory: other tests' ranks may run beside it)."""
    for proc in Path("/proc").iterdir():
        try:
            environ = (proc / "environ").read_bytes().split(b"\0")
            cmdline = (proc / "cmdline").read_bytes()
            here = (proc / "cwd").resolve() == cwd.resolve()
        except (OSError, ValueError):
            continue
        if f"LOCAL_RANK={rank}".encode() in environ and b"stages/train.py" in cmdline and here:
            return int(proc.name)
    return None


@pytest.fixture(scope="module")
def two_rank_model(built_repo: Path, tmp_path_factory) -> str:
    """The model digest of an uninterrupted 2-rank run."""
    cwd = workdir(built_repo, tmp_path_factory.mktemp("two-rank-reference"), TWO_RANKS)
    done = run_train(built_repo, cwd)
    assert done.returncode == 0, done.stderr[-3000:]
    return digest(cwd / "models/model.safetensors")


def test_a_killed_rank_stops_the_job_and_dvc_repro_resumes_it_exactly(repo_copy: Path, two_rank_model: str) -> None:
    params = yaml.safe_load((repo_copy / "params.yaml").read_text())
    params["train"].update(TWO_RANKS["train"])
    params["tracking"]["enabled"] = False
    (repo_copy / "params.yaml").write_text(yaml.safe_dump(params))
    log = repo_copy / "reports/train_log.tsv"
    log.unlink()
    job = subprocess.Popen(
        [DVC, "repro", "train"],
        cwd=repo_copy,
        env=pipeline_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    wait_for_steps(job, repo_copy, 13)  # past the checkpoint at step 10
    pid = rank_pid(1, repo_copy)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    killed_at = time.monotonic()
    output = job.communicate(timeout=90)[0]
    assert job.returncode != 0, output[-3000:]
    ended_after = time.monotonic() - killed_at
    print(f"the job ended {ended_after:.1f} s after rank 1 was killed")
    assert ended_after < 60  # the whole job ends, rank 0 included: no hang
    assert rank_pid(0, repo_copy) is None

    resumed = dvc(repo_copy, "repro", "train")
    assert "resuming from" in resumed.stderr + resumed.stdout
    assert digest(repo_copy / "models/model.safetensors") == two_rank_model


def test_sigterm_stops_every_rank_at_one_step_with_a_checkpoint_and_the_resume_is_exact(
    built_repo: Path, tmp_path: Path, two_rank_model: str
) -> None:
    cwd = workdir(built_repo, tmp_path / "run", TWO_RANKS)
    job = start_train(built_repo, cwd, stderr=subprocess.STDOUT)
    wait_for_steps(job, cwd, 13)
    job.send_signal(signal.SIGTERM)  # to torchrun, which forwards it to both ranks
    output = job.communicate(timeout=90)[0]
    assert job.returncode != 0
    assert "checkpoint written, exiting with 143" in output  # rank 0; rank 1 stopped at the same step
    stopped_at = logged_steps(cwd)
    index = json.loads((cwd / "checkpoints/index.json").read_text())
    assert index["checkpoints"][-1]["step"] == stopped_at < 30

    resumed = run_train(built_repo, cwd)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming from" in resumed.stderr
    assert digest(cwd / "models/model.safetensors") == two_rank_model


def test_resuming_with_another_number_of_processes_is_refused(built_repo: Path, tmp_path: Path) -> None:
    cwd = workdir(built_repo, tmp_path / "run", TWO_RANKS)
    crashed = run_train(built_repo, cwd, crash_at="after-step:12")  # rank 0 dies (SOLOMON_CRASH_RANK unset)
    assert crashed.returncode != 0
    workdir(built_repo, cwd, {"train": {"nproc": 1, "accum_steps": 1, "threads": 1}})
    refused = run_train(built_repo, cwd)
    assert refused.returncode != 0
    assert "resume refused: params.train.nproc differs from the checkpoint at step 10 (2 → 1)" in refused.stderr


def test_every_rank_stops_early_when_rank_0_decides_to(built_repo: Path, tmp_path: Path) -> None:
    overrides = merge(TWO_RANKS, {"train": {"early_stopping": {"patience": 1, "min_delta": 10.0}}})
    cwd = workdir(built_repo, tmp_path / "run", overrides)
    done = run_train(built_repo, cwd)
    assert done.returncode == 0, done.stderr[-3000:]  # rank 1 left with rank 0: no rank waits on the other
    assert "early stop at step 20" in done.stderr
    metrics = json.loads((cwd / TRAIN_METRICS).read_text())
    assert metrics["stopped_early"] and metrics["steps"] == logged_steps(cwd) == 20


def _disagreeing_rank(rank: int, init_file: str, results) -> None:
    """One rank of a real two-process gloo group, each holding another resume step."""
    import torch.distributed as dist

    from solomon.errors import SolomonError
    from solomon.train.distributed import BACKEND, ProcessGroup

    dist.init_process_group(BACKEND, init_method=f"file://{init_file}", rank=rank, world_size=2)
    try:
        ProcessGroup(rank, 2).require_same("step to resume from", 10 * (rank + 1))
        results.put((rank, "agreed"))
    except SolomonError as exc:
        results.put((rank, str(exc)))
    except SystemExit as exc:
        results.put((rank, f"exit {exc.code}"))
    finally:
        dist.destroy_process_group()


def test_ranks_that_resume_from_different_steps_stop_with_one_line(tmp_path: Path) -> None:
    import torch.multiprocessing as mp

    context = mp.get_context("spawn")
    results = context.Queue()
    processes = [
        context.Process(target=_disagreeing_rank, args=(rank, str(tmp_path / "init"), results)) for rank in (0, 1)
    ]
    for process in processes:
        process.start()
    outcome = dict(results.get(timeout=120) for _ in processes)
    for process in processes:
        process.join(timeout=60)
    assert outcome[1] == "exit 2"
    assert outcome[0].startswith("the ranks disagree on the step to resume from (rank 0: 10, rank 1: 20)")
