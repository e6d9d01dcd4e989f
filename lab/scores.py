"""The same benchmark scores three ways (`python -m lab scores`): a run's own record (the evaluate stage, in-process),
lm-eval's ``hf`` model on its Hugging Face export, and lm-eval's ``local-completions`` against `solomon serve` in
fp32 and, where the CPU computes bf16 natively, in bf16 — each by lm-eval's own command line, offline, on the task
files the run scored — and `solomon score`'s replay of the run's recorded requests against each server. The record
(``docs/scores/three-ways.json``) is what docs/scores.md's table links to.
"""

from __future__ import annotations

import glob
import json
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from solomon.errors import SolomonError
from solomon.lineage.client import Completions
from solomon.lineage.scores import read_requests, replay
from solomon.machine import describe
from solomon.model.weights import load
from solomon.pipeline import pipeline_env
from solomon.records import TASKS, RunFiles, read_json

BIN = Path(sys.executable).parent
RECORD = Path("docs/scores/three-ways.json")


def lm_eval_scores(repo: Path, out: Path, model: str, model_args: str, task_files: list[str]) -> dict:
    """lm-eval's own command line, offline, in ``repo`` (task data paths are relative to it): {task: {metric:
    value}}; its printed table is checked to be there, as a user sees it."""
    env = pipeline_env() | {
        "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_CACHE": str(out / "cache"), "TQDM_DISABLE": "1",
    }  # fmt: skip
    names = [read_task_name(repo / path) for path in task_files]
    folders = {str((repo / path).parent) for path in task_files}
    if len(folders) != 1:
        raise SolomonError(f"the task files lie in {len(folders)} folders: lm_eval's --include_path takes one")
    command = [
        str(BIN / "lm_eval"), "run", "--model", model, "--model_args", model_args, "--tasks", ",".join(names),
        "--include_path", folders.pop(), "--batch_size", "8", "--output_path", str(out / model), "--device", "cpu",
    ]  # fmt: skip
    done = subprocess.run(command, cwd=repo, env=env, capture_output=True, text=True)
    if done.returncode != 0 or "|" not in done.stdout:
        raise SolomonError(f"lm_eval {model} failed: {(done.stderr or done.stdout).strip().splitlines()[-1:]}")
    [path] = glob.glob(str(out / model / "**" / "results_*.json"), recursive=True)
    results = json.loads(Path(path).read_text(encoding="utf-8"))["results"]
    return {name: {k.split(",")[0]: v for k, v in results[name].items() if "," in k} for name in names}


def read_task_name(path: Path) -> str:
    import yaml

    return yaml.safe_load(path.read_text(encoding="utf-8"))["task"]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _served_scores(repo: Path, run_dir: Path, out: Path, precision: str, export: Path, files: list[str]) -> dict:
    port, block = _free_port(), load(repo / "models").config.block_size
    server = subprocess.Popen(
        [str(BIN / "solomon"), "serve", str(run_dir), "--port", str(port), "--precision", precision, "--slots", "8"],
        cwd=repo, env=pipeline_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        _wait_ready(port, server)
        api = (f"base_url=http://127.0.0.1:{port}/v1/completions,tokenizer={export},tokenizer_backend=huggingface,"
               f"max_length={block + 1}")  # fmt: skip
        scores = lm_eval_scores(repo, out / precision, "local-completions", api, files)
        verdict = replay(read_requests(run_dir), Completions(f"http://127.0.0.1:{port}/v1/completions"), precision)
        replayed = {"holds": verdict.holds, "sequences": verdict.compared, "tokens": verdict.tokens}
        return scores | {"solomon score": replayed | {"worst_mean_delta_per_token": verdict.worst}}
    finally:
        server.terminate()
        server.wait(timeout=60)


def _wait_ready(port: int, server: subprocess.Popen, timeout: float = 300) -> None:
    import http.client

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SolomonError(f"solomon serve exited: {server.stderr.read().strip()}")
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            connection.request("GET", "/readyz")
            if connection.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(1)
    raise SolomonError(f"solomon serve not ready within {timeout:g} s")


_EVALUATE = """
import sys, time
start = time.monotonic()
from pathlib import Path
from solomon.evaluation.evaluate import TaskPaths, evaluate
from solomon.params import load_params
out = Path(sys.argv[2])
paths = TaskPaths(Path("data/corpus"), out / "tasks", Path.cwd(), out / "requests.jsonl")
tasks = paths if sys.argv[1] == "1" else None
evaluate(load_params().eval, Path("models"), Path("data/tokens"), Path("data/tokenizer.json"), out / "metrics.json",
         out / "reliability", tasks)
print(time.monotonic() - start)
"""


def evaluate_seconds(repo: Path, rounds: int = 2) -> dict:
    """The evaluate stage's work timed in fresh processes (imports included) without and with the tasks, A B A B:
    what scoring adds to `make run`."""
    times: dict[str, list[float]] = {"held_out": [], "with_tasks": []}
    with tempfile.TemporaryDirectory(prefix="solomon-evaluate-") as scratch:
        for _ in range(rounds):
            for key, flag in (("held_out", "0"), ("with_tasks", "1")):
                env = pipeline_env() | {"TQDM_DISABLE": "1"}
                command = [sys.executable, "-c", _EVALUATE, flag, scratch]
                done = subprocess.run(command, cwd=repo, env=env, capture_output=True, text=True)
                if done.returncode != 0:
                    raise SolomonError(f"evaluate failed: {done.stderr.strip().splitlines()[-1:]}")
                times[key].append(round(float(done.stdout.strip().splitlines()[-1]), 1))
    return times


def three_ways(repo: Path, run_dir: Path) -> dict:
    """The run's scores in-process (its record), from its HF export and through `solomon serve`, with timings."""
    tasks = read_json(run_dir / RunFiles.METRICS).get(TASKS)
    if not tasks:
        raise SolomonError(f"{run_dir} scored no tasks: rerun its evaluate stage")
    files = [section["task_file"] for section in tasks.values()]
    block = load(repo / "models").config.block_size
    machine = describe()
    record = {"run_id": run_dir.name, "host": machine, "block_size": block, "ways": {}, "wall_s": {}}
    record["evaluate_s"] = evaluate_seconds(repo)
    record["ways"]["in-process"] = {name: section for name, section in tasks.items()}
    with tempfile.TemporaryDirectory(prefix="solomon-scores-") as scratch:
        out, export = Path(scratch), Path(scratch) / "hf"
        subprocess.run([str(BIN / "solomon"), "export", str(run_dir), "--format", "hf", "--out", str(export)],
                       cwd=repo, env=pipeline_env(), check=True, capture_output=True)  # fmt: skip
        started = time.monotonic()
        hf_args = f"pretrained={export},max_length={block - 1},dtype=float32"
        record["ways"]["hf"] = lm_eval_scores(repo, out, "hf", hf_args, files)
        record["wall_s"]["hf"] = round(time.monotonic() - started, 1)
        precisions = ["fp32", "bf16"] if machine.get("bf16_matmul") == "native" else ["fp32"]
        for precision in precisions:
            started = time.monotonic()
            record["ways"][f"serve-{precision}"] = _served_scores(repo, run_dir, out, precision, export, files)
            record["wall_s"][f"serve-{precision}"] = round(time.monotonic() - started, 1)
    return record
