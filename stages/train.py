"""Stage train: fit the GPT decoder on the train tokens, resuming from checkpoints/ after an interruption.

Writes the best evaluated model to models/, the per-step log, the evaluation/sample log, the train metrics
(results) and the run record (timings, environment — the host's GEMM peak, measured at the start — run id), and
streams the run to MLflow as it goes when tracking.enabled (never a reason to stop).
Exit status 128 + N after signal N (SIGTERM: 143, SIGINT: 130), once a checkpoint is written.
With train.nproc > 1 it starts itself again under ``torchrun --standalone`` as that many ranks.
"""

import os

from solomon.lifeline import tether

tether(os.environ)  # first, before the imports below: a launcher gone while this stage was starting stops it here

import argparse
import sys
from pathlib import Path

from solomon.lifeline import LAUNCHER_ENV
from solomon.machine import describe, gemm_peaks
from solomon.params import load_params
from solomon.portable import enter_mode
from solomon.runtime import configure_torch
from solomon.stage import run_stage
from solomon.train.distributed import ProcessGroup
from solomon.train.hooks import Hooks
from solomon.train.loop import TrainPaths, train
from solomon.train.recorder import Recorder


def relaunch_under_torchrun(nproc: int) -> None:
    """Replace this process with torchrun running this script as ``nproc`` local ranks. torchrun forwards
    SIGTERM/SIGINT to every rank, and stops them all, non-zero, when one dies."""
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={nproc}",
        "--monitor-interval=1",
        os.path.abspath(__file__),
        *sys.argv[1:],
    ]
    tether(os.environ)  # torchrun holds no lifeline: the parent-death signal instead (it stops its workers on it)
    os.environ[LAUNCHER_ENV] = str(os.getpid())  # torchrun keeps this PID; its workers lead sessions of their own
    os.execv(sys.executable, command)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    for name in ("tokens_dir", "tokenizer", "model_dir", "checkpoints", "steps_log", "evals_log", "metrics"):
        parser.add_argument(name, type=Path)
    parser.add_argument("--fresh", action="store_true", help="delete existing checkpoints and start at step 0")
    parser.add_argument("--anchors", type=Path, help="where to keep the last two checkpoints for `solomon replay`")
    parser.add_argument(
        "--run-record", type=Path, help="where to write the run's timings and environment (default: beside metrics)"
    )
    parser.add_argument("--no-gemm-peak", action="store_true", help="do not measure the host's GEMM peak at the start")
    args = parser.parse_args()
    paths = TrainPaths(**{k: v for k, v in vars(args).items() if k not in ("fresh", "no_gemm_peak")})
    params = load_params()
    enter_mode(params.train.portable)  # may replace this process with one whose kernels are pinned (or not)
    if params.train.nproc > 1 and "LOCAL_RANK" not in os.environ:
        relaunch_under_torchrun(params.train.nproc)
    group = ProcessGroup.from_environment(params.train.nproc, os.environ)
    tracker = None
    if params.tracking.enabled and group.is_main:
        from solomon.tracking.live import RETRY_ENV, RETRY_S, LiveTracker  # imports mlflow: only when tracking

        tracker = LiveTracker(params, retry_s=float(os.environ.get(RETRY_ENV, RETRY_S)))
    peaks = None
    if group.is_main and not args.no_gemm_peak:
        # the peak at training's thread count, in its mode
        configure_torch(params.train.threads, params.train.compile, params.train.portable)
        peaks = gemm_peaks()
    try:
        # What the run record says of this process (its machine, its GEMM peak), with the tracker and the test hooks:
        # rank 0 records through it, the other ranks hold it silent.
        recorder = Recorder(tracker, Hooks.from_environment(os.environ), describe(), peaks)
        metrics = train(params, paths, args.fresh, group, recorder)
    finally:
        group.close()
    if group.is_main:
        print(f"train: {metrics}")


if __name__ == "__main__":
    run_stage(main)
