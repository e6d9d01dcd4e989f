"""A data stage killed with SIGKILL at any moment, then `dvc repro` again: the same bytes as an uninterrupted run,
and no half-written output counted (real DVC, real processes, real signals)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
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


@pytest.fixture(scope="module")
def uninterrupted(built_repo: Path, tmp_path_factory) -> tuple[Path, dict, dict]:
    """A synthetic corpus long enough to stop the data stages inside, and what an uninterrupted run makes of it."""
    base = tmp_path_factory.mktemp("uninterrupted")
    corpus = base / "synthetic.jsonl"
    synthetic_corpus(corpus, 12)
    clean = with_corpus(shutil.copytree(built_repo, base / "clean", symlinks=True), corpus)
    done = repro(clean)
    assert done.returncode == 0, done.stdout + done.stderr
    return corpus, data_outputs(clean), lock_entries(clean)


@pytest.mark.long
def test_data_stages_killed_anywhere_rerun_to_the_same_bytes(built_repo: Path, tmp_path: Path, uninterrupted) -> None:
    corpus, expected, expected_lock = uninterrupted
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
    assert lock_entries(killed) == expected_lock


@pytest.mark.parametrize(("signal_name", "stage"), [("SIGTERM", "tokenizer"), ("SIGHUP", "tokenizer")])
def test_a_signal_to_dvc_repro_alone_stops_the_data_stage_and_its_workers(
    built_repo: Path, tmp_path: Path, uninterrupted, signal_name: str, stage: str
) -> None:
    """`dvc repro` signalled alone (DVC forwards nothing): the running data stage and its worker processes end, by
    PID, within a bounded time; nothing half-written stays; `dvc repro` again makes the uninterrupted bytes."""
    import psutil
    from conftest import wait_until

    corpus, expected, expected_lock = uninterrupted
    repo = with_corpus(shutil.copytree(built_repo, tmp_path / "repo", symlinks=True), corpus)
    subprocess.run([str(Path(DVC).parent / "solomon"), "repair-lock"], cwd=repo, env=pipeline_env(), check=True)
    dvc = subprocess.Popen([DVC, "repro", "datacard"], cwd=repo, env=pipeline_env(), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, start_new_session=True)  # fmt: skip

    def command(process: psutil.Process) -> str:
        try:
            return " ".join(process.cmdline())
        except psutil.Error:  # ended (a zombie) between the listing and now
            return ""

    def running() -> list[psutil.Process]:
        tree = psutil.Process(dvc.pid).children(recursive=True)
        return tree if any(f"stages/{stage}.py" in command(p) for p in tree) else []

    wait_until(running, f"the {stage} stage", process=dvc, timeout=120, interval=0.05)
    time.sleep(1.0)  # inside its work, its workers (where it starts any) started
    started = running()
    assert started, f"the {stage} stage ended before it could be stopped: give it a larger corpus"
    dvc.send_signal(getattr(signal, signal_name))  # dvc alone, not its process group
    try:
        output, _ = dvc.communicate(timeout=120)
    except subprocess.TimeoutExpired as timeout:  # name what is still running, and what it last said
        left = [f"{p.pid} {p.status()} {command(p)}" for p in started if p.is_running()]
        raise AssertionError(f"still running: {left}; its last output: {(timeout.output or b'')[-1500:]!r}") from None
    _, alive = psutil.wait_procs(started, timeout=30)
    assert not alive, [p.cmdline() for p in alive]
    assert "error: stopping: dvc repro" in output, output[-2000:]
    assert "error: stopped by SIGTERM: the stage's previous outputs are left as they were" in output, output[-2000:]
    data_outputs(repo)  # nothing half-written beside an output
    done = repro(repo)
    assert done.returncode == 0, done.stdout + done.stderr
    assert data_outputs(repo) == expected
    assert lock_entries(repo) == expected_lock
