"""The training loop. Reads top to bottom: set up (or resume), then one optimiser step per iteration with
evaluation and checkpoints at their intervals, then the run's output.

Everything a step depends on is either a pure function of (seed, step) — the batch and its dropout masks — or
saved in the checkpoint — weights, optimiser moments, the weight average, early-stopping state — so a run killed
at any moment and resumed from its latest checkpoint ends bit-identical to an uninterrupted one. With several ranks
(``train.nproc``, under torchrun) each rank trains on its slice of the same global batch, and every stop decision
is agreed by all ranks. What only rank 0 does (the logs, tracking, evaluation and its samples, checkpoint writes and
the output) is behind the ``Recorder`` the stage passes in (``solomon.train.recorder``), which does nothing on the
other ranks; the loop reaches the outside world only through it and the process group. At the end the last two
checkpoints become the run's replay anchors (``solomon replay`` re-executes the stretch between them).
"""

from __future__ import annotations

import math
import signal
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager

import numpy as np
import torch

from solomon.data.tokens import open_tokens, read_meta
from solomon.errors import SolomonError
from solomon.model.gpt import GPT, GPTConfig
from solomon.params import Params
from solomon.rng import dropout_seed, stream_seed
from solomon.runtime import configure_torch
from solomon.train.averaging import WeightAverage
from solomon.train.checkpoint import Checkpointer, TorchRandomState
from solomon.train.components import Components, TrainPaths
from solomon.train.data_order import DataOrder
from solomon.train.distributed import ProcessGroup
from solomon.train.early_stopping import EarlyStopping
from solomon.train.fingerprint import MachineHistory, fingerprint
from solomon.train.optimizer import build_optimizer
from solomon.train.precision import Precision, autocast_for, resolve
from solomon.train.recorder import Recorder
from solomon.train.resume import resume_point
from solomon.train.run_log import RunLog
from solomon.train.schedule import LrSchedule
from solomon.train.signals import StopSignals
from solomon.train.step import train_step


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
    precision: Precision,
) -> Components:
    """A fresh run's components, each seeded from its own stream; a resume then loads their checkpointed state.
    ``precision``: the run's, resolved (``solomon.train.precision``)."""
    cfg = params.train
    model = build_model(params, vocab_size)
    schedule = LrSchedule(params.lr, cfg.max_steps)
    data_order = DataOrder(
        stream_seed(cfg.seed, "data"), n_tokens, params.model.block_size, cfg.batch_size, cfg.accum_steps, world_size
    )
    components = Components(
        model=model,
        optimizer=build_optimizer(model, cfg, schedule.lr(0), precision),
        schedule=schedule,
        data_order=data_order,
        early_stopping=EarlyStopping(cfg.early_stopping),
        rng=TorchRandomState(),
        log=RunLog(paths.steps_log, paths.evals_log),
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
    group: ProcessGroup | None = None,
    recorder: Recorder | None = None,
) -> dict:
    """Train, or resume, to ``train.max_steps``; ``fresh``: delete the checkpoints and start at step 0. With several
    ranks every rank runs this function; rank 0's ``recorder`` writes everything and its results are returned, the
    other ranks' records nothing and they return an empty dict."""
    cfg, group = params.train, group or ProcessGroup()
    recorder = (recorder or Recorder()).for_rank(group.rank)
    configure_torch(cfg.threads, compiled=cfg.compile, portable=cfg.portable)
    tokens, meta = open_tokens(paths.tokens_dir, "train"), read_meta(paths.tokens_dir)
    precision = resolve(cfg.precision, cfg.portable, recorder.machine)
    group.require_same(
        "precision (1: bf16, 0: fp32)", int(precision == "bf16"),
        "train.precision: auto resolved differently on these nodes' CPUs; set train.precision: fp32 (or bf16) for all",
    )  # fmt: skip
    parts = build_components(
        params, paths, len(tokens), meta["vocab_size"], group.world_size, recorder.machine, precision
    )
    # DDP averages gradients over the ranks, in buckets during the last backward of a step.
    step_model = torch.nn.parallel.DistributedDataParallel(parts.model) if group.distributed else parts.model
    step_model = torch.compile(step_model) if cfg.compile else step_model
    autocast = autocast_for(precision)

    current = fingerprint(params, paths.tokens_dir, paths.tokenizer, precision)
    checkpointer = Checkpointer(paths.checkpoints, cfg.keep_checkpoints)
    loaded = resume_point(checkpointer, current, cfg.max_steps, fresh, group)
    if loaded is not None:
        checkpointer.restore(loaded, parts.by_name())
    start = done = loaded.step if loaded is not None else 0
    parts.machines.started(start, group.gather(group.restart))  # every rank's torchrun restarts
    group.require_same("step to resume from", start)
    last = start if parts.early_stopping.should_stop else cfg.max_steps  # an early-stopped run stays stopped
    parts.model.train()

    with recorder.start(params, paths, parts, checkpointer, current, start):
        with StopSignals() as stop_signals:
            for step in range(start, last):
                step_started = time.perf_counter()
                recorder.hooks.record_step(step, group.rank, parts.data_order)
                loss, grad_norm, lr = run_step(parts, params, tokens, step, group.rank, step_model, autocast)
                loss, done = group.mean(loss), step + 1
                if not math.isfinite(loss):
                    raise SolomonError(f"loss became {loss} at step {done}: lower lr.peak or raise lr.warmup")
                recorder.step(done, loss, lr, grad_norm, time.perf_counter() - step_started)
                stop_early = False
                if done % cfg.eval_interval == 0 or done == cfg.max_steps:
                    stop_early = group.any(recorder.evaluate(done))  # rank 0 decides; every rank hears it
                    recorder.hooks.crash_point("after-eval", done)
                # A signal reaches every rank (torchrun forwards it), but not necessarily within the same step.
                signalled = group.any(stop_signals.received is not None)
                if done % cfg.ckpt_interval == 0 or done == cfg.max_steps or stop_early or signalled:
                    recorder.checkpoint(done)
                    group.any(False)  # nobody leaves before the checkpoint is on disk
                recorder.hooks.after_step(done, group.rank)
                if signalled:
                    raise SystemExit(_announce_signal(stop_signals.received, done))
                if stop_early:
                    recorder.early_stop(done)
                    break
        return recorder.finish(done)


def _announce_signal(received: int | None, step: int) -> int:
    """The exit status after a stop signal (128 + its number; a signal only another rank got counts as SIGTERM)."""
    received = received or int(signal.SIGTERM)
    exit_code = 128 + received
    print(
        f"train: signal {received} at step {step}; checkpoint written, exiting with {exit_code}; `dvc repro` resumes",
        file=sys.stderr,
    )
    return exit_code
