"""The training loop. Reads top to bottom: set up (or resume), then one optimiser step per iteration with
evaluation, samples and checkpoints at their intervals, then write the best model.

Everything a step depends on is either a pure function of (seed, step) — the batch and its dropout masks — or
saved in the checkpoint — weights, optimiser moments, the weight average, early-stopping state — so a run killed
at any moment and resumed from its latest checkpoint ends bit-identical to an uninterrupted one. With several ranks
(``train.nproc``, under torchrun) each rank trains on its slice of the same global batch, rank 0 alone
evaluates and writes, and every stop decision is agreed by all ranks. The outside world reaches the loop only
through what is passed in: a ``Tracker``, the test ``Hooks`` and the ``machine`` (``solomon.machine``) it runs on,
whose kind the checkpoints record step by step. At the end the last two checkpoints become the run's replay anchors
(``solomon replay`` re-executes the stretch between them).
"""

from __future__ import annotations

import math
import shutil
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from solomon.atomic import staged_dir, write_json
from solomon.data.tokens import load_tokenizer, open_tokens, read_meta, token_byte_lengths
from solomon.errors import SolomonError
from solomon.machine import describe
from solomon.model.gpt import GPT, GPTConfig
from solomon.params import Params
from solomon.records import RunFiles, read_steps
from solomon.rng import dropout_seed, stream_seed
from solomon.runtime import configure_torch
from solomon.train.averaging import WeightAverage
from solomon.train.checkpoint import Checkpointer, Stateful, TorchRandomState
from solomon.train.data_order import DataOrder
from solomon.train.distributed import ProcessGroup
from solomon.train.early_stopping import EarlyStopping
from solomon.train.fingerprint import MachineHistory, fingerprint
from solomon.train.hooks import NO_HOOKS, Hooks
from solomon.train.optimizer import Optimizer, build_optimizer
from solomon.train.periodic_eval import PeriodicEvaluation
from solomon.train.resume import resume_point
from solomon.train.run_log import RunLog
from solomon.train.schedule import LrSchedule
from solomon.train.signals import StopSignals
from solomon.train.step import autocast_for, bf16_fallback_warning, train_step
from solomon.train.tracker import NoTracking, Tracker

BEST_DIR = "best"  # inside the checkpoints directory: the best evaluated model so far
# Replay anchors: the last two checkpoints, the start and the end of the run's final stretch (train.ckpt_interval
# steps): 2 x 166 MB at the default size, where every checkpoint would be 20 x.
ANCHORS = 2


@dataclass(frozen=True)
class TrainPaths:
    tokens_dir: Path
    tokenizer: Path
    model_dir: Path
    checkpoints: Path
    steps_log: Path
    evals_log: Path
    metrics: Path  # the results (the DVC metric)
    anchors: Path | None = None  # where the replay anchors go at the end (None: none kept)
    run_record: Path | None = None  # timings and environment (None: ``train_run.json`` beside ``metrics``)

    def run_record_path(self) -> Path:
        return self.run_record or self.metrics.with_name(RunFiles.TRAIN_RUN)


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


@dataclass
class Components:
    """The stateful parts of a run, each with its own ``state_dict``: what a checkpoint saves, under these names."""

    model: GPT
    optimizer: Optimizer
    schedule: LrSchedule
    data_order: DataOrder
    early_stopping: EarlyStopping
    rng: TorchRandomState
    log: RunLog
    machines: MachineHistory
    average: WeightAverage | None = None  # with train.ema_decay > 0 (older checkpoints have none)

    def by_name(self) -> dict[str, Stateful]:
        parts = {field.name: getattr(self, field.name) for field in fields(self)}
        return {name: part for name, part in parts.items() if part is not None}

    def evaluated_model(self) -> GPT:
        """The model the evaluations score and save as the run's output: the weight average when there is one."""
        return self.average.model if self.average is not None else self.model


def build_model(params: Params, vocab_size: int) -> GPT:
    config = GPTConfig.from_params(params.model, vocab_size)
    torch.manual_seed(stream_seed(params.train.seed, "init"))
    return GPT(config)


def build_components(
    params: Params,
    paths: TrainPaths,
    n_tokens: int,
    vocab_size: int,
    world_size: int,
    machine: dict,
    hooks: Hooks = NO_HOOKS,
) -> Components:
    """A fresh run's components, each seeded from its own stream; a resume then loads their checkpointed state."""
    cfg = params.train
    model = build_model(params, vocab_size)
    schedule = LrSchedule(params.lr, cfg.max_steps)
    data_order = DataOrder(
        stream_seed(cfg.seed, "data"), n_tokens, params.model.block_size, cfg.batch_size, cfg.accum_steps, world_size
    )
    components = Components(
        model=model,
        optimizer=build_optimizer(model, cfg, schedule.lr(0)),
        schedule=schedule,
        data_order=data_order,
        early_stopping=EarlyStopping(cfg.early_stopping),
        rng=TorchRandomState(),
        log=RunLog(paths.steps_log, paths.evals_log, hooks),
        machines=MachineHistory(machine),
        average=WeightAverage(model, cfg.ema_decay) if cfg.ema_decay > 0 else None,
    )
    torch.manual_seed(stream_seed(cfg.seed, "dropout"))  # each micro-batch reseeds it; this is the checkpointed state
    return components


def run_step(
    parts: Components, params: Params, tokens: np.ndarray, step: int, rank: int, step_model: torch.nn.Module,
    autocast: Callable[[], AbstractContextManager],
) -> tuple[float, float, float]:  # fmt: skip
    """Optimiser step ``step`` (0-based) of this rank: its batch, dropout seeds and learning rate are functions of
    (seed, step), everything else is in ``parts``. Returns (this rank's loss, gradient norm, lr). Shared with
    ``solomon replay``, so a replay runs exactly the loop's step."""
    cfg, data_order = params.train, parts.data_order
    micro_batches = [data_order.batch(tokens, step, m, rank) for m in range(cfg.accum_steps)]

    def seed_dropout(m: int) -> None:
        torch.manual_seed(dropout_seed(cfg.seed, step, data_order.global_micro_batch(m, rank)))

    lr = parts.schedule.lr(step)
    loss, grad_norm = train_step(parts.model, step_model, parts.optimizer, micro_batches, lr, cfg.label_smoothing,
                                 cfg.clip, autocast, seed_dropout)  # fmt: skip
    if parts.average is not None:
        parts.average.update(parts.model)
    return loss, grad_norm, lr


def train(
    params: Params,
    paths: TrainPaths,
    fresh: bool = False,
    tracker: Tracker | None = None,
    group: ProcessGroup | None = None,
    hooks: Hooks = NO_HOOKS,
    machine: dict | None = None,
    restart: int = 0,
    gemm_peak: dict[str, float] | None = None,
) -> dict:
    """Train, or resume, to ``train.max_steps``. With several ranks every rank runs this function; only rank 0
    (``group.is_main``) evaluates and writes anything, and the others return an empty dict. ``machine``: this
    process's machine as ``solomon.machine.describe`` gives it (tests pass another kind); ``restart``: torchrun's
    restart count in this process (every rank's is recorded with the step they start from); ``gemm_peak``: the host's
    GEMM peak by precision (``solomon.machine.gemm_peaks``), recorded in the run record (None: not measured)."""
    cfg = params.train
    group = group or ProcessGroup()
    tracker = tracker if tracker is not None and group.is_main else NoTracking()
    configure_torch(cfg.threads, compiled=cfg.compile)
    tokens = open_tokens(paths.tokens_dir, "train")
    tokenizer = load_tokenizer(paths.tokenizer)
    meta = read_meta(paths.tokens_dir)
    machine = machine or describe()
    parts = build_components(params, paths, len(tokens), meta["vocab_size"], group.world_size, machine, hooks)
    model, data_order, stopper, run_log = parts.model, parts.data_order, parts.early_stopping, parts.log
    # DDP averages gradients over the ranks, in buckets during the last backward of a step.
    step_model = torch.nn.parallel.DistributedDataParallel(model) if group.distributed else model
    step_model = torch.compile(step_model) if cfg.compile else step_model
    autocast = autocast_for(cfg.precision)
    val_tokens, byte_lengths = open_tokens(paths.tokens_dir, "val"), token_byte_lengths(tokenizer)
    best_dir = paths.checkpoints / BEST_DIR
    evaluate = PeriodicEvaluation(params, val_tokens, tokenizer, byte_lengths, meta["eod_id"], stopper, best_dir, hooks)

    current = fingerprint(params, paths.tokens_dir, paths.tokenizer)
    checkpointer = Checkpointer(paths.checkpoints, cfg.keep_checkpoints, hooks)
    loaded = resume_point(checkpointer, current, cfg.max_steps, fresh, group)
    if loaded is not None:
        checkpointer.restore(loaded, parts.by_name())
    start = done = loaded.step if loaded is not None else 0
    restarts = group.gather(restart)
    parts.machines.started(start, restarts)
    if group.is_main and (other_kind := parts.machines.other_kind(start)):
        print(other_kind, file=sys.stderr)
    if group.is_main and (slow := bf16_fallback_warning(cfg.precision, cfg.optimizer, machine, gemm_peak)):
        print(slow, file=sys.stderr)
    if group.is_main and any(restarts):
        print(f"train: restarted by torchrun from step {start} (restarts by rank: {restarts})", file=sys.stderr)
    group.require_same("step to resume from", start)
    if group.is_main:
        checkpointer.mark_completed(False)
        _remove_results(paths)
        run_log.open()
    run_id = checkpointer.run_id() if group.is_main else None
    metadata = {"fingerprint": current, "environment": _environment(cfg.precision, cfg.compile)}

    tokens_per_step = cfg.batch_size * params.model.block_size
    timers = Timers("eval_and_samples", "checkpoints", "tracking")
    started = time.perf_counter()
    model.train()
    tracker.start(run_id, run_log.steps, run_log.evals)
    exit_code = None
    status = "FAILED"  # unless the run ends, or stops on a signal
    try:
        with StopSignals() as stop_signals:
            last = start if stopper.should_stop else cfg.max_steps  # an early-stopped run stays stopped
            progress = tqdm(range(start, last), "train", total=last, initial=start, unit="step", mininterval=2.0,
                            disable=not group.is_main)  # fmt: skip
            for step in progress:
                step_started = time.perf_counter()
                hooks.record_step(step, group.rank, data_order)
                loss, grad_norm, lr = run_step(parts, params, tokens, step, group.rank, step_model, autocast)
                loss = group.mean(loss)
                if not math.isfinite(loss):
                    raise SolomonError(f"loss became {loss} at step {step + 1}: lower lr.peak or raise lr.warmup")
                done = step + 1
                row = {"step": done, "tokens": done * tokens_per_step, "loss": loss, "lr": lr, "grad_norm": grad_norm,
                       "tokens_per_s": tokens_per_step / (time.perf_counter() - step_started)}  # fmt: skip
                if group.is_main:
                    run_log.step(row)
                with timers("tracking"):
                    tracker.step(row)
                progress.set_postfix(loss=f"{loss:.3f}", lr=f"{lr:.2e}", refresh=False)

                stop_early = stopper.should_stop
                if done % cfg.eval_interval == 0 or done == cfg.max_steps:
                    with timers("eval_and_samples"):
                        if group.is_main:
                            record = evaluate(parts.evaluated_model(), done)
                            run_log.evaluation(record)
                            tracker.evaluation(record)
                        stop_early = group.any(stopper.should_stop)  # rank 0 decides; every rank hears it
                    hooks.crash_point("after-eval", done)
                # A signal reaches every rank (torchrun forwards it), but not necessarily within the same step.
                signalled = group.any(stop_signals.received is not None)
                if done % cfg.ckpt_interval == 0 or done == cfg.max_steps or stop_early or signalled:
                    with timers("checkpoints"):
                        if group.is_main:
                            parts.machines.ran(done)
                            checkpointer.save(done, parts.by_name(), metadata)
                        group.any(False)  # nobody leaves before the checkpoint is on disk
                hooks.crash_point("after-step", done, group.rank)
                hooks.after_step(done)
                if signalled:
                    exit_code = _announce_signal(stop_signals.received, done)
                    break
                if stop_early:
                    if group.is_main:
                        best = f"best val loss {stopper.best:.4f} at step {stopper.best_step}"
                        print(f"train: early stop at step {done}; {best}", file=sys.stderr)
                    break
            progress.close()
        if group.is_main:
            run_log.close()
        if exit_code is not None:
            raise SystemExit(exit_code)
        if not group.is_main:
            status = "FINISHED"
            return {}
        metrics = _finish(params, paths, checkpointer, parts, run_id, start, done, timers, started, hooks, gemm_peak)
        status = "FINISHED"
    finally:
        # Once, after everything else: a run FINISHED in MLflow has all its files on disk, and a failure while
        # finishing leaves it FAILED (the last sends are not in the run record's time).
        tracker.finish("KILLED" if exit_code is not None else status)
    return metrics


def _announce_signal(received: int | None, step: int) -> int:
    """The exit status after a stop signal (128 + its number; a signal only another rank got counts as SIGTERM)."""
    received = received or int(signal.SIGTERM)
    exit_code = 128 + received
    print(
        f"train: signal {received} at step {step}; checkpoint written, exiting with {exit_code}; `dvc repro` resumes",
        file=sys.stderr,
    )
    return exit_code


def _environment(precision: str, compiled: bool) -> dict:
    """What a checkpoint records of the process that wrote it."""
    return {"torch": str(torch.__version__), "threads": torch.get_num_threads(), "precision": precision,
            "compile": compiled}  # fmt: skip


def _finish(
    params: Params,
    paths: TrainPaths,
    checkpointer: Checkpointer,
    parts: Components,
    run_id: str,
    start: int,
    done: int,
    timers: Timers,
    started: float,
    hooks: Hooks,
    gemm_peak: dict[str, float] | None,
) -> dict:
    """Write the best evaluated model to ``model_dir`` and the replay anchors, mark the run completed, and write its
    results (``paths.metrics``) and how it ran (``paths.run_record_path()``); returns both in one dict."""
    cfg, stopper, model = params.train, parts.early_stopping, parts.model
    elapsed = time.perf_counter() - started
    best_dir = paths.checkpoints / BEST_DIR
    if not best_dir.is_dir():
        raise SolomonError(f"no evaluated model in {best_dir}: run again with `--fresh`")
    with staged_dir(paths.model_dir, hooks.write_points("model", done)) as tmp:
        shutil.copytree(best_dir, tmp, dirs_exist_ok=True)
    if paths.anchors is not None:
        record = {"run_id": run_id, "steps": done, "machine_kinds": parts.machines.spans}
        checkpointer.write_anchors(paths.anchors, ANCHORS, record)
    hooks.crash_point("run-completed", done)
    checkpointer.mark_completed(True)
    tokens_per_step = cfg.batch_size * params.model.block_size
    steps_here = done - start
    # Results only: a function of the run's inputs, the same for every run of the same params and data.
    metrics = {
        "steps": done,
        "tokens": done * tokens_per_step,
        "final_loss": round(mean_tail_loss(read_steps(paths.steps_log)), 6),
        "best_step": stopper.best_step,
        "best_val_loss": round(stopper.best, 6),
        "stopped_early": stopper.should_stop,
        "parameters": model.num_params(non_embedding=False),
    }
    # How this run went: which run, where it resumed, where its time went, on what.
    run_record = {
        "run_id": run_id,
        "resumed_from_step": start,
        "wall_s": round(elapsed, 2),
        # Where this process's wall time went (the rest is the optimiser steps and the step log).
        "seconds": {name: round(value, 3) for name, value in timers.seconds.items()},
        "tokens_per_s": round(steps_here * tokens_per_step / elapsed, 1) if steps_here else None,
        "precision": cfg.precision,
        "compile": cfg.compile,
        "threads": cfg.threads,
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "gemm_peak_gflops": gemm_peak,  # this host's, measured as the stage started: the reference for its speed
        "machine_kinds": parts.machines.kinds(),  # which machine kind trained which steps
        "starts": parts.machines.starts,  # each start of the processes: its step, each rank's torchrun restarts
    }
    write_json(paths.run_record_path(), run_record)  # before the metrics: they mark the run finished
    write_json(paths.metrics, metrics, hooks.write_points("metrics", done))
    return metrics | run_record


def _remove_results(paths: TrainPaths) -> None:
    """A previous run's results go when this run's logs are (re)written: the logs survive a failed stage (DVC keeps
    them, ``persist``), and the files beside them must always belong to the same run."""
    for path in (paths.metrics, paths.run_record_path()):
        path.unlink(missing_ok=True)


def mean_tail_loss(rows: list[dict]) -> float:
    """Mean training loss over the last tenth of the steps: a less noisy figure than the last step's."""
    tail = [r["loss"] for r in rows[-max(1, len(rows) // 10) :]]
    return float(np.mean(tail))
