"""A real train stage on the workspace's tokens: its overheads, a resume's latency and a no-op ``dvc repro``
(``make bench`` part 3)."""

import subprocess
import tempfile
import time
from pathlib import Path

import yaml

from lab.bench import NOT_NATIVE
from lab.scratch import merge
from solomon.errors import SolomonError, last_line
from solomon.machine import bf16_matmul_native
from solomon.params import read_yaml
from solomon.pipeline import dvc_executable, pipeline_env, stage_command
from solomon.records import PARAMS_FILE, STEP_LOG, TRAIN_RUN, read_json, read_steps
from solomon.train.hooks import pause_environment
from solomon.train.precision import resolve


def _run(command: list[str], cwd: Path) -> float:
    started = time.perf_counter()
    subprocess.run(command, cwd=cwd, env=pipeline_env(), check=True, capture_output=True, text=True)
    return time.perf_counter() - started


def resume_latency(command: list[str], work: Path, resume_step: int) -> float:
    """Seconds from starting a train process on a mid-run checkpoint at ``resume_step`` until it trains again:
    imports, checkpoint verify and load, fingerprint, model and tracker set-up. Measured to the end of the first
    resumed step (the fault hook pauses the process there), minus that step's own time from its log row."""
    release = work / "release"
    env = pipeline_env() | pause_environment(resume_step + 1, release)
    stderr_path = work / "resume.stderr"  # a file, not a pipe: a full pipe would block the process we wait for
    with open(stderr_path, "w") as stderr:
        started = time.perf_counter()
        process = subprocess.Popen(command, cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
        paused = Path(f"{release}.paused")
        while not paused.exists():
            if process.poll() is not None:
                message = last_line(stderr_path.read_text())
                raise SolomonError(f"bench: the resumed train stage exited with {process.returncode}: {message}")
            time.sleep(0.01)
        reached = time.perf_counter() - started
        process.kill()
        process.wait()
    row = read_steps(work / STEP_LOG)[-1]
    tokens_per_step = row["tokens"] / row["step"]
    return reached - tokens_per_step / row["tokens_per_s"]


def stage_overheads(repo: Path, stage_steps: int, bf16_native: bool | None = None) -> dict:
    """A real train stage on ``repo``'s token files, in a scratch directory, with params.yaml's intervals; then
    the same run resumed (``max_steps`` raised, a resumable change) to time a resume. Not timed where params.yaml's
    steps compute in bf16 and bf16 matmuls do not run natively (``bf16_native``, None: this CPU's)."""
    base = read_yaml(repo / PARAMS_FILE)
    native = bf16_matmul_native() if bf16_native is None else bf16_native
    machine = {"bf16_matmul": "native" if native else "fallback"}
    if not native and resolve(base["train"]["precision"], base["train"].get("portable", False), machine) == "bf16":
        return {"steps": stage_steps, "not_measured": NOT_NATIVE}
    with tempfile.TemporaryDirectory(prefix="solomon-bench-") as scratch:
        work = Path(scratch)
        (work / "data").symlink_to(repo / "data")  # the stage's inputs; its outputs land in the scratch directory
        (work / PARAMS_FILE).write_text(yaml.safe_dump(merge(base, {"train": {"max_steps": stage_steps}})))
        command = stage_command(repo, "train")  # the stage exactly as dvc.yaml runs it
        process_s = _run(command, work)
        metrics = read_json(work / TRAIN_RUN)  # timings: beside metrics
        (work / PARAMS_FILE).write_text(yaml.safe_dump(merge(base, {"train": {"max_steps": stage_steps + 2}})))
        resume_s = resume_latency(command, work, stage_steps)
    wall = metrics["wall_s"]
    seconds = metrics["seconds"]
    shares = {name: round(value / wall, 4) for name, value in seconds.items()}
    result = {
        "steps": stage_steps,
        "eval_interval": base["train"]["eval_interval"],
        "ckpt_interval": base["train"]["ckpt_interval"],
        "process_s": round(process_s, 1),
        "loop_wall_s": wall,
        "tokens_per_s": metrics["tokens_per_s"],
        "seconds": seconds,
        "share_of_loop_wall": shares,
        "overhead_share": round(sum(shares.values()), 4),
        "resume_s": round(resume_s, 2),
    }
    dvc = dvc_executable()
    status = subprocess.run([dvc, "status"], cwd=repo, capture_output=True, text=True)
    if status.returncode == 0 and "up to date" in status.stdout:
        result["noop_dvc_repro_s"] = round(_run([dvc, "repro"], repo), 2)
    else:
        result["noop_dvc_repro_s"] = None  # the workspace has stages to run: not a no-op to time
    return result
