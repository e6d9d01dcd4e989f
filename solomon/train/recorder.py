"""Rank 0's side of a training run, behind one object: the run log, experiment tracking, the periodic evaluation
and its best model, the checkpoint writes, the progress bar and the timings, and at the end the output model, the
replay anchors, the results and the run record. The loop calls it in the same places on every rank; on the others
it is a ``SilentRecorder``, which does none of it.

The train stage builds the recorder from what it knows of its process (the tracker, the test hooks, the machine
and its GEMM peak), so what the run record says of where the run ran comes from the stage, not through the loop.
"""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch
from tqdm import tqdm

from solomon.atomic import staged_dir, write_json
from solomon.data.tokens import load_tokenizer, open_tokens, read_meta, token_byte_lengths
from solomon.errors import SolomonError
from solomon.machine import describe
from solomon.model import weights
from solomon.params import Params
from solomon.records import read_steps
from solomon.train.checkpoint import Checkpointer
from solomon.train.components import Components, TrainPaths
from solomon.train.hooks import NO_HOOKS, Hooks
from solomon.train.periodic_eval import PeriodicEvaluation
from solomon.train.precision import bf16_fallback_warning, why
from solomon.train.system_metrics import SystemSchedule
from solomon.train.tracker import NoTracking, Tracker

BEST_DIR = "best"  # inside the checkpoints directory: the best evaluated model so far
# Replay anchors: the last two checkpoints, the start and the end of the run's final stretch (train.ckpt_interval
# steps), rather than every checkpoint.
ANCHORS = 2


class Timers:
    """Seconds the loop spends outside its optimiser steps, by overhead (``train_run.json``'s "seconds")."""

    def __init__(self, *names: str) -> None:
        self.seconds = dict.fromkeys(names, 0.0)

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - started


class Recorder:
    """Rank 0's record of a run, made by the stage: ``tracker`` is where the run streams to (None: nowhere),
    ``hooks`` the test hooks (every rank's: the loop reaches them here), ``machine`` this process's machine as
    ``solomon.machine.describe`` gives it (the checkpoints record its kind step by step), ``gemm_peak`` its GEMM
    peak by precision (``solomon.machine.gemm_peaks``; None: not measured).

    ``start`` returns it as a context manager; leaving it tells the tracker how the run ended, after everything
    else: FINISHED once every file is on disk, KILLED by a stop signal, FAILED otherwise, even while finishing."""

    def __init__(
        self,
        tracker: Tracker | None = None,
        hooks: Hooks = NO_HOOKS,
        machine: dict | None = None,
        gemm_peak: dict[str, float] | None = None,
    ) -> None:
        self.tracker = tracker if tracker is not None else NoTracking()
        self.hooks = hooks
        self.machine = machine or describe()
        self.gemm_peak = gemm_peak
        self.progress: tqdm | None = None  # while recording

    def for_rank(self, rank: int) -> Recorder:
        """This recorder on rank 0; on any other rank a silent one, with the same hooks and machine."""
        return self if rank == 0 else SilentRecorder(hooks=self.hooks, machine=self.machine)

    def start(
        self, params: Params, paths: TrainPaths, parts: Components, checkpointer: Checkpointer, fingerprint: dict,
        start: int,
    ) -> Recorder:  # fmt: skip
        """Record the run from step ``start``: say what is unusual about this start, mark the run unfinished, remove
        a previous run's results, (re)write the logs from the rows held, and start tracking."""
        cfg, restarts = params.train, parts.machines.starts[-1]["torchrun_restarts"]
        self.params, self.paths, self.parts, self.checkpointer = params, paths, parts, checkpointer
        self.precision = fingerprint["environment.precision"]  # train.precision as this host resolved it
        self.start_step = start
        tokenizer = load_tokenizer(paths.tokenizer)
        self.evaluation = PeriodicEvaluation(params, open_tokens(paths.tokens_dir, "val"), tokenizer,
                                             token_byte_lengths(tokenizer), read_meta(paths.tokens_dir)["eod_id"],
                                             parts.early_stopping)  # fmt: skip
        notes = (
            f"train: computing in {self.precision} (train.precision: {cfg.precision}; "
            f"{why(cfg.precision, cfg.portable, self.machine)})",
            None if cfg.portable else parts.machines.other_kind(start),  # a portable run is the same bytes anywhere
            bf16_fallback_warning(self.precision, self.machine, self.gemm_peak),
            f"train: restarted by torchrun from step {start} (restarts by rank: {restarts})" if any(restarts) else None,
        )
        for note in filter(None, notes):
            print(note, file=sys.stderr)
        checkpointer.mark_completed(False)
        # A previous run's results go when this run's logs are (re)written: the logs survive a failed stage (DVC
        # keeps them, ``persist``), and the files beside them must always belong to the same run.
        for path in (paths.metrics, paths.run_record_path()):
            path.unlink(missing_ok=True)
        parts.log.open()
        self.hooks.crash_point("logs-open", len(parts.log.steps))
        self.run_id = checkpointer.run_id()
        self.metadata = {"fingerprint": fingerprint, "environment": _environment(self.precision, cfg.compile)}
        self.timers = Timers("eval_and_samples", "checkpoints", "tracking")
        last = start if parts.early_stopping.should_stop else cfg.max_steps
        self.progress = tqdm(total=last, initial=start, desc="train", unit="step", mininterval=2.0)
        self.started = time.perf_counter()
        self.system = SystemSchedule(start)
        self.tracker.start(self.run_id, parts.log.steps, parts.log.evals)
        return self

    def step(self, step: int, loss: float, lr: float, grad_norm: float, seconds: float) -> None:
        """Log and track optimiser step ``step`` (1-based), which took ``seconds``."""
        tokens_per_step = self.params.train.batch_size * self.params.model.block_size
        row = {"step": step, "tokens": step * tokens_per_step, "loss": loss, "lr": lr, "grad_norm": grad_norm,
               "tokens_per_s": tokens_per_step / seconds}  # fmt: skip
        self.parts.log.step(row)
        self.hooks.crash_point("step-log", step)
        with self.timers("tracking"):
            self.tracker.step(row)
            self._sample_system(step)
        self.progress.set_postfix(loss=f"{loss:.3f}", lr=f"{lr:.2e}", refresh=False)
        self.progress.update()

    def evaluate(self, step: int) -> bool:
        """Evaluate the model after ``step`` steps, keep it when it is the best so far, log and track the result.
        Returns whether early stopping says to stop."""
        with self.timers("eval_and_samples"):
            model = self.parts.evaluated_model()
            record = self.evaluation(model, step)
            if record["best"]:
                weights.save(model, self.paths.checkpoints / BEST_DIR, self.hooks.write_points("best", step))
            self.parts.log.evaluation(record)
            self.hooks.crash_point("eval-log", step)
            self.tracker.evaluation(record)
        with self.timers("tracking"):
            self._sample_system(step, now=True)
        return self.parts.early_stopping.should_stop

    def _sample_system(self, step: int, now: bool = False) -> None:
        """The machine and the process at ``step``, when due (``solomon.train.system_metrics``): to the run log
        (checkpointed with it) and the tracker."""
        row = self.system.row(step, now)
        if row is not None:
            self.parts.log.system_sample(row)
            self.tracker.system(row)

    def checkpoint(self, step: int) -> None:
        """Checkpoint every component after ``step`` steps, trained on this machine."""
        with self.timers("checkpoints"):
            self.parts.machines.ran(step)
            points = self.hooks.write_points("checkpoint", step)
            self.checkpointer.save(step, self.parts.by_name(), self.metadata, points)

    def early_stop(self, step: int) -> None:
        stopper = self.parts.early_stopping
        print(f"train: early stop at step {step}; best val loss {stopper.best:.4f} at step {stopper.best_step}",
              file=sys.stderr)  # fmt: skip

    def finish(self, done: int) -> dict:
        """Write the best evaluated model to ``model_dir`` and the replay anchors, mark the run completed, and write
        its results (``paths.metrics``) and how it ran (``paths.run_record_path()``); returns both in one dict."""
        if self.progress is not None:
            self._sample_system(done, now=True)
        self._close()
        elapsed = time.perf_counter() - self.started
        paths, best_dir = self.paths, self.paths.checkpoints / BEST_DIR
        if not best_dir.is_dir():
            raise SolomonError(f"no evaluated model in {best_dir}: run again with `--fresh`")
        with staged_dir(paths.model_dir, self.hooks.write_points("model", done)) as tmp:
            shutil.copytree(best_dir, tmp, dirs_exist_ok=True)
        if paths.anchors is not None:
            record = {"run_id": self.run_id, "steps": done, "machine_kinds": self.parts.machines.spans}
            self.checkpointer.write_anchors(paths.anchors, ANCHORS, record)
        self.hooks.crash_point("run-completed", done)
        self.checkpointer.mark_completed(True)
        metrics, run_record = self._results(done), self._run_record(done, elapsed)
        write_json(paths.run_record_path(), run_record)  # before the metrics: they mark the run finished
        write_json(paths.metrics, metrics, self.hooks.write_points("metrics", done))
        return metrics | run_record

    def _results(self, done: int) -> dict:
        """Results only: a function of the run's inputs, the same for every run of the same params and data."""
        cfg, stopper = self.params.train, self.parts.early_stopping
        return {
            "steps": done,
            "tokens": done * cfg.batch_size * self.params.model.block_size,
            "final_loss": round(mean_tail_loss(read_steps(self.paths.steps_log)), 6),
            "best_step": stopper.best_step,
            "best_val_loss": round(stopper.best, 6),
            "stopped_early": stopper.should_stop,
            "parameters": self.parts.model.num_params(non_embedding=False),
        }

    def _run_record(self, done: int, elapsed: float) -> dict:
        """How this run went: which run, where it resumed, where its time went, on what."""
        cfg, steps_here = self.params.train, done - self.start_step
        tokens_here = steps_here * cfg.batch_size * self.params.model.block_size
        return {
            "run_id": self.run_id,
            "resumed_from_step": self.start_step,
            "wall_s": round(elapsed, 2),
            # Where this process's wall time went (the rest is the optimiser steps and the step log).
            "seconds": {name: round(value, 3) for name, value in self.timers.seconds.items()},
            "tokens_per_s": round(tokens_here / elapsed, 1) if steps_here else None,
            "precision": self.precision,  # as resolved here; params.yaml's setting is in the hyperparameters
            "compile": cfg.compile,
            "threads": cfg.threads,
            "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
            "gemm_peak_gflops": self.gemm_peak,  # this host's, measured as the stage started: the reference for speed
            "machine_kinds": self.parts.machines.kinds(),  # which machine kind trained which steps
            "starts": self.parts.machines.starts,  # each start of the processes: its step, each rank's restarts
        }

    def _close(self) -> None:
        """Close the progress bar and the logs, once."""
        if self.progress is not None:
            self.progress.close()
            self.parts.log.close()
            self.progress = None

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, kind: type[BaseException] | None, *_) -> None:
        try:
            self._close()
        finally:
            self.tracker.finish("FINISHED" if kind is None else "KILLED" if issubclass(kind, SystemExit) else "FAILED")


class SilentRecorder(Recorder):
    """The recorder of every rank but rank 0: it records nothing, and never says to stop."""

    def start(self, *_) -> Recorder:
        return self

    def step(self, *_) -> None:
        pass

    def evaluate(self, step: int) -> bool:
        return False

    def checkpoint(self, step: int) -> None:
        pass

    def early_stop(self, step: int) -> None:
        pass

    def finish(self, done: int) -> dict:
        return {}

    def __exit__(self, *_) -> None:
        pass


def _environment(precision: str, compiled: bool) -> dict:
    """What a checkpoint records of the process that wrote it."""
    return {"torch": str(torch.__version__), "threads": torch.get_num_threads(), "precision": precision,
            "compile": compiled}  # fmt: skip


def mean_tail_loss(rows: list[dict]) -> float:
    """Mean training loss over the last tenth of the steps: a less noisy figure than the last step's."""
    tail = [r["loss"] for r in rows[-max(1, len(rows) // 10) :]]
    return float(np.mean(tail))
