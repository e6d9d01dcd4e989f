"""Exact resume with real subprocesses and real signals: SIGKILL at chosen and arbitrary moments, SIGTERM,
corrupt and malicious checkpoints, and refusal when what the checkpoint belongs to has changed."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, digest, dvc, logged_steps, run_train, start_train, wait_for_steps, wait_until, workdir

from lab.stops import half_written
from solomon.pipeline import pipeline_env, stage_command
from solomon.records import DETERMINISTIC_COLUMNS, EVAL_LOG, STEP_LOG


def outcome(cwd: Path) -> dict:
    """What must match between an interrupted-and-resumed run and an uninterrupted one."""
    steps = [line.split("\t")[: len(DETERMINISTIC_COLUMNS)] for line in (cwd / STEP_LOG).read_text().splitlines()]
    return {
        "model": digest(cwd / "models/model.safetensors"),
        "steps": steps,
        "evals": (cwd / EVAL_LOG).read_text(),
    }


@pytest.fixture(scope="module")
def reference(built_repo: Path, tmp_path_factory) -> dict:
    """Uninterrupted tiny run (30 steps, evaluation with samples and a checkpoint every 10)."""
    cwd = workdir(built_repo, tmp_path_factory.mktemp("reference"))
    done = run_train(built_repo, cwd)
    assert done.returncode == 0, done.stderr
    # What every resume test here covers: the default precision (as auto resolves it here: bf16 where the CPU has
    # native bf16 matmuls) and dropout, RNG draws included.
    from solomon.machine import bf16_matmul_native
    from solomon.records import TRAIN_RUN

    params = yaml.safe_load((cwd / "params.yaml").read_text())
    assert params["train"]["precision"] == "auto" and params["model"]["dropout"] > 0
    computed = json.loads((cwd / TRAIN_RUN).read_text())["precision"]
    assert computed == ("bf16" if bf16_matmul_native() else "fp32")
    return outcome(cwd)


def test_uninterrupted_training_is_bit_identical_across_processes(
    built_repo: Path, reference: dict, tmp_path: Path
) -> None:
    cwd = workdir(built_repo, tmp_path)
    assert run_train(built_repo, cwd).returncode == 0
    assert outcome(cwd) == reference
    # ...and the DVC stage (another process, another hash seed) wrote the very same model and log.
    assert reference["model"] == digest(built_repo / "models/model.safetensors")
    dvc_steps = (built_repo / "reports/train_log.tsv").read_text().splitlines()
    assert [line.split("\t")[: len(DETERMINISTIC_COLUMNS)] for line in dvc_steps] == reference["steps"]
    assert len(reference["steps"]) == 31 and reference["evals"].count("\n") == 3


def test_sigkill_at_three_points_then_resume_is_exact(built_repo: Path, reference: dict, tmp_path: Path) -> None:
    cwd = workdir(built_repo, tmp_path)
    # 1. Right after the evaluation (with samples) of step 20, before its checkpoint: resumes from step 10.
    killed = run_train(built_repo, cwd, crash_at="after-eval:20")
    assert killed.returncode == -signal.SIGKILL
    assert json.loads((cwd / "checkpoints/index.json").read_text())["checkpoints"][-1]["step"] == 10
    # 2. In the middle of writing the checkpoint of step 20: the partial file is never used.
    killed = run_train(built_repo, cwd, crash_at="checkpoint-write:20")
    assert killed.returncode == -signal.SIGKILL
    assert "resuming from" in killed.stderr and "(step 10)" in killed.stderr
    assert list((cwd / "checkpoints").glob(".*.tmp")), "the kill should leave a half-done temporary file"
    # 3. Between checkpoints (step 25), after the checkpoint of step 20 was written.
    killed = run_train(built_repo, cwd, crash_at="after-step:25")
    assert killed.returncode == -signal.SIGKILL
    assert logged_steps(cwd) == 25
    finished = run_train(built_repo, cwd)
    assert finished.returncode == 0, finished.stderr
    assert "(step 20)" in finished.stderr
    assert not list((cwd / "checkpoints").glob(".*.tmp"))
    assert outcome(cwd) == reference


@pytest.fixture(scope="module")
def long_reference(built_repo: Path, tmp_path_factory) -> dict:
    cwd = workdir(built_repo, tmp_path_factory.mktemp("long"), {"train": {"max_steps": 150}})
    assert run_train(built_repo, cwd).returncode == 0
    return outcome(cwd)


def test_sigterm_checkpoints_and_exits_143_then_sigkill_anywhere_and_resume_is_exact(
    built_repo: Path, long_reference: dict, tmp_path: Path
) -> None:
    cwd = workdir(built_repo, tmp_path, {"train": {"max_steps": 150}})
    process = start_train(built_repo, cwd)
    wait_for_steps(process, cwd, 33)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 143, stderr
    stopped_at = logged_steps(cwd)
    index = json.loads((cwd / "checkpoints/index.json").read_text())
    assert index["checkpoints"][-1]["step"] == stopped_at  # the signal's own checkpoint
    assert "checkpoint written, exiting with 143" in stderr

    process = start_train(built_repo, cwd)  # resumes, then dies by SIGKILL at whatever step it has reached
    wait_for_steps(process, cwd, stopped_at + 40)
    process.kill()
    process.communicate(timeout=60)
    assert process.returncode == -signal.SIGKILL
    finished = run_train(built_repo, cwd)
    assert finished.returncode == 0, finished.stderr
    assert outcome(cwd) == long_reference


def test_resume_is_refused_when_params_or_data_changed(built_repo: Path, tmp_path: Path) -> None:
    cwd = workdir(built_repo, tmp_path)
    assert run_train(built_repo, cwd, crash_at="after-step:15").returncode == -signal.SIGKILL
    workdir(built_repo, cwd, {"lr": {"peak": 0.003}})
    refused = run_train(built_repo, cwd)
    assert refused.returncode == 2
    lines = refused.stderr.strip().splitlines()
    assert lines[-1].startswith(
        "error: resume refused: params.lr.peak differs from the checkpoint at step 10 (0.002 → 0.003)"
    ), refused.stderr

    workdir(built_repo, cwd)  # params back as they were; now the data differs
    tokens = tmp_path / "other_tokens"
    shutil.copytree(built_repo / "data/tokens", tokens)
    data = bytearray((tokens / "train.bin").read_bytes())
    data[100] ^= 1
    (tokens / "train.bin").write_bytes(bytes(data))
    refused = run_train(built_repo, cwd, tokens_dir=tokens)
    assert refused.returncode == 2
    assert "error: resume refused: data.train.bin differs" in refused.stderr

    # With the default's cooldown the rate of every step depends on max_steps: a change is refused, naming it
    # (without a cooldown it may change, and the run is extended exactly: test_model_and_training_parts.py).
    refused = run_train(built_repo, workdir(built_repo, cwd, {"train": {"max_steps": 40}}))
    assert refused.returncode == 2 and "params.train.max_steps differs from the checkpoint" in refused.stderr
    fresh = run_train(built_repo, workdir(built_repo, cwd, {"lr": {"peak": 0.003}}), extra=("--fresh",))
    assert fresh.returncode == 0, fresh.stderr
    assert "resuming" not in fresh.stderr


def test_finished_run_with_changed_params_starts_over(built_repo: Path, tmp_path: Path) -> None:
    cwd = workdir(built_repo, tmp_path)
    assert run_train(built_repo, cwd).returncode == 0
    changed = run_train(built_repo, workdir(built_repo, cwd, {"lr": {"warmup": 5}}))
    assert changed.returncode == 0, changed.stderr
    assert "changed since the finished run" in changed.stderr and "resuming" not in changed.stderr
    assert logged_steps(cwd) == 30


def test_malicious_checkpoint_is_refused_and_never_runs(built_repo: Path, tmp_path: Path) -> None:
    cwd = workdir(built_repo, tmp_path)
    assert run_train(built_repo, cwd, crash_at="after-step:25").returncode == -signal.SIGKILL
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    evil = cwd / "checkpoints/step-00000020.pt"
    import torch

    torch.save({"step": 20, "payload": Payload()}, evil)
    index = json.loads((cwd / "checkpoints/index.json").read_text())
    index["checkpoints"][-1]["sha256"] = digest(evil)  # even with a matching hash it must not load
    (cwd / "checkpoints/index.json").write_text(json.dumps(index))
    resumed = run_train(built_repo, cwd)
    assert resumed.returncode == 0, resumed.stderr
    assert "refused: not a plain tensor checkpoint" in resumed.stderr
    assert "(step 10)" in resumed.stderr
    assert not marker.exists()


@pytest.mark.long
def test_dvc_repro_killed_mid_training_resumes_with_plain_dvc_repro(repo_copy: Path, long_reference: dict) -> None:
    from conftest import DVC

    shutil.rmtree(repo_copy / "checkpoints")
    workdir(repo_copy, repo_copy, {"train": {"max_steps": 150}, "tracking": {"enabled": True}})
    dvc = subprocess.Popen(
        [DVC, "repro"],
        cwd=repo_copy,
        env=pipeline_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    wait_for_steps(dvc, repo_copy, 60)
    os.killpg(dvc.pid, signal.SIGKILL)  # dvc and the training process under it, mid-run
    dvc.communicate(timeout=60)
    done = subprocess.run([DVC, "repro"], cwd=repo_copy, env=pipeline_env(), capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "resuming from" in done.stdout + done.stderr
    steps = [
        line.split("\t")[: len(DETERMINISTIC_COLUMNS)]
        for line in (repo_copy / "reports/train_log.tsv").read_text().splitlines()
    ]
    assert steps == long_reference["steps"]
    assert digest(repo_copy / "models/model.safetensors") == long_reference["model"]
    # One MLflow run for the killed-and-resumed training run, with every step exactly once.
    from mlflow.tracking import MlflowClient

    run_id = json.loads((repo_copy / "reports/latest.json").read_text())["run_id"]
    client = MlflowClient(f"sqlite:///{repo_copy / 'mlflow.db'}")
    runs = client.search_runs(
        [client.get_experiment_by_name("solomon").experiment_id], filter_string=f"tags.`solomon.run_id` = '{run_id}'"
    )
    assert len(runs) == 1
    history = client.get_metric_history(runs[0].info.run_id, "train/loss")
    assert sorted(m.step for m in history) == list(range(1, 151))


# Where each crash point is reached on the tiny config (30 steps, evaluation and checkpoint every 10, one checkpoint
# kept), and the step the next run resumes from. The runs form one chain: each run after the first is a resume
# that is killed at the next point, and plain `dvc repro` finishes the last.
CHAIN = (
    ("logs-open", 0, 0),
    ("step-log", 3, 0),
    ("best-staged", 10, 0),
    ("eval-log", 10, 0),
    ("best-swap", 10, 0),  # the resumed run from step 0 replaces the best model the previous one saved
    ("after-eval", 10, 0),
    ("checkpoint-write", 10, 0),
    ("checkpoint-index", 10, 0),  # written but never listed: removed at the next start
    ("after-step", 10, 10),
    ("checkpoint-prune", 20, 20),  # listed, the older one not yet deleted: removed at the next start
    ("model-staged", 30, 30),
    ("model-swap", 30, 30),  # the previous models/ is put back at the next start, then replaced
    ("run-completed", 30, 30),
    ("metrics-written", 30, 30),
)


@pytest.mark.long
def test_a_kill_at_every_named_crash_point_resumes_to_the_same_bytes(repo_copy: Path, built_repo: Path) -> None:
    """The train stage, run as DVC runs it (its command from dvc.yaml), SIGKILLed at every durable write in turn;
    then `dvc repro` ends with the model, logs and metrics of the uninterrupted run."""

    from conftest import DVC

    from solomon.train.hooks import CRASH_POINTS, crash_environment

    assert {point for point, _, _ in CHAIN} == set(CRASH_POINTS), "every crash point is in the chain"
    shutil.rmtree(repo_copy / "checkpoints")
    workdir(repo_copy, repo_copy, {"train": {"keep_checkpoints": 1}})  # pruning happens; tracking off
    command = stage_command(repo_copy, "train")
    previous_resume = 0
    for point, step, resumes_from in CHAIN:
        killed = subprocess.run(
            command, cwd=repo_copy, env=pipeline_env() | crash_environment(point, step), capture_output=True, text=True
        )
        assert killed.returncode == -signal.SIGKILL, f"{point}:{step} was not reached: {killed.stderr[-500:]}"
        started = "(step" in killed.stderr and killed.stderr.split("(step", 1)[1].split(")", 1)[0].strip()
        assert int(started or 0) == previous_resume, f"the run killed at {point}:{step} resumed from {started}"
        previous_resume = resumes_from
    done = subprocess.run([DVC, "repro"], cwd=repo_copy, env=pipeline_env(), capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"(step {previous_resume})" in done.stdout + done.stderr
    for name in ("models/model.safetensors", "reports/train_evals.jsonl", "metrics.json"):
        assert digest(repo_copy / name) == digest(built_repo / name), name
    logs = [(repo / "reports/train_log.tsv").read_text().splitlines() for repo in (repo_copy, built_repo)]
    assert [[row.split("\t")[: len(DETERMINISTIC_COLUMNS)] for row in log] for log in logs] == [
        [row.split("\t")[: len(DETERMINISTIC_COLUMNS)] for row in logs[1]]
    ] * 2
    assert sorted(p.name for p in (repo_copy / "checkpoints").iterdir()) == ["best", "index.json", "step-00000030.pt"]
    assert not list(repo_copy.glob(".models*")) and not list(repo_copy.glob("reports/.*.tmp"))


@pytest.mark.long
def test_a_killed_queue_task_stops_its_training_in_one_line(repo_copy: Path) -> None:
    """A queued experiment trains in DVC's queue worker, a daemon that outlives the `dvc exp run --run-all` that
    started it; `dvc queue stop --kill` ends its task and removes its copy of the workspace. Its train stage stops
    within a bounded time (checked by PID), in one line, with no traceback."""
    import psutil
    from conftest import DVC

    workdir(repo_copy, repo_copy, {"train": {"max_steps": 100_000, "early_stopping": {"patience": None}}})
    # a queued run starts from the commit: commit the data stages' lock so that they restore, not rerun
    for args in (["git", "add", "-A"], ["git", "commit", "-q", "-m", "the pipeline, built"]):
        subprocess.run(args, cwd=repo_copy, env=pipeline_env(), capture_output=True, check=True)
    dvc(repo_copy, "exp", "run", "--queue", "-n", "endless")
    # the worker it starts is a daemon that would hold captured output open: it writes nowhere here
    subprocess.run([DVC, "queue", "start"], cwd=repo_copy, env=pipeline_env(), stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=True)  # fmt: skip
    copies = repo_copy / ".dvc" / "tmp" / "exps"

    def queued_stages() -> list[psutil.Process]:
        return [
            process
            for process in psutil.process_iter(["cmdline", "cwd", "create_time"])
            if "stages/train.py" in " ".join(process.info["cmdline"] or [])
            and str(copies) in (process.info["cwd"] or "")
        ]

    wait_until(queued_stages, "the queued run's train stage", timeout=300)
    stages = queued_stages()
    assert len(stages) == 1, stages
    copy, started = Path(stages[0].info["cwd"]), stages[0].info["create_time"]
    log = copy / STEP_LOG  # the copy holds the commit's log until the stage rewrites it

    def training() -> bool:
        return log.exists() and log.stat().st_mtime > started and logged_steps(copy) >= 20

    wait_until(training, "the queued run's step 20")
    subprocess.run([DVC, "queue", "stop", "--kill"], cwd=repo_copy, env=pipeline_env(), stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=True)  # fmt: skip
    _, alive = psutil.wait_procs(stages, timeout=30)
    assert not alive, [process.pid for process in alive]
    told = "\n".join(path.read_text(errors="replace") for path in (copies / "run").glob("*/*.out"))
    assert "Traceback" not in told, told[-3000:]
    assert "working directory was removed" in told or "checkpoint written, exiting with" in told, told[-3000:]


def make_run(bin_dir: Path) -> list[str]:
    """`make run` from the repository's own Makefile in the working directory, its venv the one running the tests
    (``-o``: setup and the offline plots template count as done, so make goes straight to `dvc repro`)."""
    return ["make", "-s", "-f", str(ROOT / "Makefile"), f"BIN={bin_dir}", "-o", "setup", "-o", "plots-template", "run"]


@pytest.mark.parametrize(
    ("launcher", "signal_name"),
    [  # the stop sweep's slice (tests/test_stops.py) stops `make run` in make test too
        ("dvc repro", "SIGTERM"),
        pytest.param("dvc repro", "SIGHUP", marks=pytest.mark.long),
        pytest.param("make run", "SIGTERM", marks=pytest.mark.long),
    ],
)
def test_a_signal_to_dvc_repro_alone_stops_its_training_and_dvc_repro_resumes_exactly(
    repo_copy: Path, long_reference: dict, launcher: str, signal_name: str
) -> None:
    """As `timeout`, a supervisor, `kill PID` or a closed SSH session stop it: the signal reaches the top process
    only (`dvc repro`, which does not forward it, or `make run`, which passes SIGTERM to `dvc repro`); the train
    stage's lifeline stops it, checkpointed, within a bounded time."""
    import psutil
    from conftest import DVC

    shutil.rmtree(repo_copy / "checkpoints")
    workdir(repo_copy, repo_copy, {"train": {"max_steps": 150}})
    command = [DVC, "repro"] if launcher == "dvc repro" else make_run(Path(DVC).parent)
    top = subprocess.Popen(command, cwd=repo_copy, env=pipeline_env(), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, start_new_session=True)  # fmt: skip
    wait_for_steps(top, repo_copy, 40)
    started = psutil.Process(top.pid).children(recursive=True)
    assert any("stages/train.py" in " ".join(p.cmdline()) for p in started), f"no train stage under {launcher}"
    top.send_signal(getattr(signal, signal_name))  # the top process alone, not its process group
    output, _ = top.communicate(timeout=120)  # ends when the stage, which shares its stdout, has exited too
    _, alive = psutil.wait_procs(started, timeout=30)
    assert not alive, [p.cmdline() for p in alive]
    # `make run`: whichever the lifeline sees first, make stopping or the dvc repro it signalled gone
    named = ["error: stopping: dvc repro"] + (["error: stopping: make"] if launcher == "make run" else [])
    assert any(line in output for line in named) and "checkpoint written, exiting with 143" in output, output[-2000:]
    stopped_at = logged_steps(repo_copy)
    assert stopped_at < 150
    assert json.loads((repo_copy / "checkpoints/index.json").read_text())["checkpoints"][-1]["step"] == stopped_at
    assert not half_written(repo_copy)
    done = subprocess.run([DVC, "repro"], cwd=repo_copy, env=pipeline_env(), capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"(step {stopped_at})" in done.stdout + done.stderr
    assert outcome(repo_copy) == long_reference
