"""The training loop. Reads top to bottom: set up (or resume), then one optimiser step per iteration with
evaluation, samples and checkpoints at their intervals, then write the best model.

Everything a step depends on is either a pure function of (seed, step) — the batch and its dropout masks — or
saved in the checkpoint — weights, optimiser moments, early-stopping state — so a run killed at any moment
and resumed from its latest checkpoint ends bit-identical to an uninterrupted one. With several ranks
(``train.nproc``, under torchrun) each rank trains on its slice of the same global batch, rank 0 alone
evaluates and writes, and every stop decision is agreed by all ranks.
"""

from __future__ import annotations

import contextlib
import math
import shutil
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import torch
from tqdm import tqdm

from solomon.atomic import staged_dir, write_json
from solomon.data.tokenizer import load_tokenizer, open_tokens, read_meta, token_byte_lengths
from solomon.errors import SolomonError
from solomon.evaluation.heldout import evaluate_tokens
from solomon.model import weights
from solomon.model.gpt import GPT, GPTConfig
from solomon.model.sampling import generate
from solomon.params import Params
from solomon.records import read_steps
from solomon.rng import stream_seed
from solomon.runtime import configure_torch
from solomon.train import faults
from solomon.train.checkpoint import CheckpointManager
from solomon.train.data_order import DataOrder
from solomon.train.distributed import ProcessGroup
from solomon.train.early_stopping import EarlyStopping
from solomon.train.fingerprint import fingerprint, first_difference
from solomon.train.run_log import RunLog
from solomon.train.schedule import NoamSchedule

BEST_DIR = "best"


@dataclass(frozen=True)
class TrainPaths:
    tokens_dir: Path
    tokenizer: Path
    model_dir: Path
    checkpoints: Path
    steps_log: Path
    evals_log: Path
    metrics: Path


class StopSignals:
    """Turns SIGTERM/SIGINT into a flag the loop checks after each step: checkpoint, then exit 128 + signal."""

    def __init__(self) -> None:
        self.received: int | None = None

    def __enter__(self) -> StopSignals:
        self._previous = {s: signal.signal(s, self._handle) for s in (signal.SIGTERM, signal.SIGINT)}
        return self

    def _handle(self, signum: int, _frame) -> None:
        self.received = signum

    def __exit__(self, *exc) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)


class Tracker(Protocol):
    """What the loop tells experiment tracking (``solomon.tracking.LiveTracker``); the loop knows no more of it."""

    def start(self, run_id: str, steps: list[dict], evals: list[dict]) -> None: ...
    def step(self, row: dict) -> None: ...
    def evaluation(self, record: dict) -> None: ...
    def finish(self, status: str) -> None: ...


class NoTracking:
    def start(self, run_id: str, steps: list[dict], evals: list[dict]) -> None:
        pass

    def step(self, row: dict) -> None:
        pass

    def evaluation(self, record: dict) -> None:
        pass

    def finish(self, status: str) -> None:
        pass


def build_model(params: Params, vocab_size: int) -> GPT:
    config = GPTConfig(vocab_size=vocab_size, **params.model.model_dump())
    torch.manual_seed(stream_seed(params.train.seed, "init"))
    return GPT(config)


def dropout_seed(seed: int, step: int, micro_batch: int) -> int:
    """Dropout's stream for one micro-batch of the global batch: a pure function of (seed, step, index), so the
    masks of a step are the same whether its micro-batches run in one process or across ranks."""
    return (stream_seed(seed, "dropout") + 1_000_003 * step + micro_batch) % 2**63


def sample_seed(seed: int, step: int, prompt_index: int) -> int:
    """Sampling's own stream: a pure function of (seed, step, prompt), untouched by training."""
    return (stream_seed(seed, "sampling") + 1_000_003 * step + prompt_index) % 2**63


def accumulate_gradients(
    model: torch.nn.Module,
    micro_batches: list[tuple[torch.Tensor, torch.Tensor]],
    label_smoothing: float,
    autocast=contextlib.nullcontext,
    before_micro_batch=lambda index: None,
) -> float:
    """Backpropagate one optimiser step's micro-batches; return the step's mean loss per target token.

    Token-weighted: each micro-batch's summed loss is divided by the target count of the whole step, so k
    micro-batches give the gradient of one batch k times larger, even when they hold different token counts.
    Under DistributedDataParallel the gradients are all-reduced once, with the last micro-batch's backward
    (every rank holds the same number of targets, so DDP's mean over ranks completes the global mean).
    """
    n_targets = sum(targets.numel() for _, targets in micro_batches)
    total = 0.0
    for index, (inputs, targets) in enumerate(micro_batches):
        before_micro_batch(index)
        last = index == len(micro_batches) - 1
        sync = model.no_sync() if hasattr(model, "no_sync") and not last else contextlib.nullcontext()
        with sync:
            with autocast():
                loss = model(inputs, targets, label_smoothing) / n_targets
            loss.backward()
        total += loss.item()
    return total


def train(
    params: Params,
    paths: TrainPaths,
    fresh: bool = False,
    tracker: Tracker | None = None,
    group: ProcessGroup | None = None,
) -> dict:
    """Train, or resume, to ``train.max_steps``. With several ranks every rank runs this function; only rank 0
    (``group.is_main``) evaluates and writes anything, and the others return an empty dict."""
    cfg = params.train
    group = group or ProcessGroup()
    tracker = tracker if tracker is not None and group.is_main else NoTracking()
    configure_torch(cfg.threads, compiled=cfg.compile)
    tokens = open_tokens(paths.tokens_dir, "train")
    val_tokens = open_tokens(paths.tokens_dir, "val")
    tokenizer = load_tokenizer(paths.tokenizer)
    meta = read_meta(paths.tokens_dir)
    byte_lengths = token_byte_lengths(tokenizer)

    model = build_model(params, meta["vocab_size"])
    step_model = model
    if group.distributed:  # averages gradients over the ranks, in buckets during the last backward
        step_model = torch.nn.parallel.DistributedDataParallel(model)
    step_model = torch.compile(step_model) if cfg.compile else step_model
    autocast = (
        (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if cfg.precision == "bf16" else contextlib.nullcontext
    )
    schedule = NoamSchedule(params.lr)
    optimizer = model.configure_optimizer(schedule.lr(0), cfg.weight_decay, (cfg.beta1, cfg.beta2))
    data_order = DataOrder(
        stream_seed(cfg.seed, "data"),
        len(tokens),
        params.model.block_size,
        cfg.batch_size,
        cfg.accum_steps,
        group.world_size,
    )
    stopper = EarlyStopping(cfg.early_stopping)
    torch.manual_seed(stream_seed(cfg.seed, "dropout"))
    current = fingerprint(params, paths.tokens_dir, paths.tokenizer)
    checkpoints = CheckpointManager(paths.checkpoints, cfg.keep_checkpoints)
    run_log = RunLog(paths.steps_log, paths.evals_log)
    best_dir = paths.checkpoints / BEST_DIR

    # Resume from the latest valid checkpoint unless told to start over. Rank 0 tidies the directory first;
    # every rank then reads the same checkpoint.
    if group.is_main:
        checkpoints.remove_partial()
        if fresh:
            checkpoints.clear()
    group.any(False)  # a barrier: the others read only what rank 0 has left
    loaded = checkpoints.load_latest()
    if loaded is not None:
        difference = first_difference(loaded.state["fingerprint"], current)
        completed = checkpoints.read_index()["completed"]
        group.any(False)  # all ranks have read the index before rank 0 may clear it
        if difference and completed:
            if group.is_main:
                print(
                    f"train: {difference[0]} changed since the finished run in {paths.checkpoints}; starting over",
                    file=sys.stderr,
                )
                checkpoints.clear()
            loaded = None
        elif difference:
            key, old, new = difference
            raise SolomonError(
                f"resume refused: {key} differs from the checkpoint at step {loaded.step} ({old!r} → {new!r}); "
                "restore it, or start over with `python stages/train.py --fresh …` (or delete "
                f"{paths.checkpoints})"
            )
    start = 0
    if loaded is not None:
        state = loaded.state
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        schedule.load_state_dict(state["schedule"])
        data_order.load_state_dict(state["data_order"])
        stopper.load_state_dict(state["early_stopping"])
        torch.set_rng_state(state["rng"]["torch"])
        run_log.load_state_dict(state["log"])
        start = loaded.step
        if start > cfg.max_steps:
            raise SolomonError(
                f"the checkpoint in {paths.checkpoints} is at step {start}, past train.max_steps {cfg.max_steps}: "
                "raise max_steps, or start over with `python stages/train.py --fresh …`"
            )
        if group.is_main:
            print(f"train: resuming from {loaded.path} (step {start})", file=sys.stderr)
    if group.is_main:
        checkpoints.mark_completed(False)
    run_id = checkpoints.run_id() if group.is_main else None

    def checkpoint_state(step: int) -> dict:
        return {
            "step": step,
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "schedule": schedule.state_dict(),
            "data_order": data_order.state_dict(),
            "early_stopping": stopper.state_dict(),
            "rng": {"torch": torch.get_rng_state()},
            "log": run_log.state_dict(),
            "fingerprint": current,
            "environment": {
                "torch": str(torch.__version__),
                "threads": torch.get_num_threads(),
                "precision": cfg.precision,
                "compile": cfg.compile,
            },
        }

    def evaluate_and_sample(step: int) -> None:
        model.eval()
        metrics = evaluate_tokens(model, val_tokens, byte_lengths, params.eval.batch_size, cfg.eval_tokens)
        samples = []
        for index, prompt in enumerate(cfg.samples.prompts):
            prompt_ids = tokenizer.encode(prompt).ids
            generator = torch.Generator().manual_seed(sample_seed(cfg.seed, step, index))
            new_ids = generate(
                model,
                prompt_ids,
                cfg.samples.max_new_tokens,
                cfg.samples.temperature,
                cfg.samples.top_k,
                generator,
                stop_id=meta["eod_id"],
            )
            samples.append({"prompt": prompt, "completion": tokenizer.decode(new_ids)})
        model.train()
        improved = stopper.update(step, metrics["loss"])
        if improved:
            weights.save(model, best_dir)
        record = {
            "step": step,
            "val_loss": metrics["loss"],
            "val_perplexity": metrics["perplexity"],
            "val_bits_per_byte": metrics["bits_per_byte"],
            "best": improved,
            "samples": samples,
        }
        run_log.evaluation(record)
        tracker.evaluation(record)

    tokens_per_step = cfg.batch_size * params.model.block_size
    max_norm = cfg.clip if cfg.clip > 0 else math.inf
    started = time.perf_counter()
    model.train()
    done = start
    if group.is_main:
        run_log.open()
    tracker.start(run_id, run_log.steps, run_log.evals)
    exit_code = None
    status = "FAILED"  # unless the run ends, or stops on a signal
    seconds = {"eval_and_samples": 0.0, "checkpoints": 0.0, "tracking": 0.0}
    try:
        with StopSignals() as stop_signals:
            last = start if stopper.should_stop else cfg.max_steps  # an early-stopped run stays stopped
            progress = tqdm(
                range(start, last),
                desc="train",
                unit="step",
                mininterval=2.0,
                initial=start,
                total=last,
                disable=not group.is_main,
            )
            for step in progress:
                step_started = time.perf_counter()
                lr = schedule.lr(step)
                for param_group in optimizer.param_groups:
                    param_group["lr"] = lr
                micro_batches = [data_order.batch(tokens, step, m, group.rank) for m in range(cfg.accum_steps)]
                optimizer.zero_grad(set_to_none=True)
                first_micro_batch = group.rank * cfg.accum_steps  # this rank's place in the global batch
                for m in range(cfg.accum_steps):
                    faults.record_batch(
                        step, group.rank, first_micro_batch + m, data_order.micro_offsets(step, m, group.rank)
                    )

                def seed_dropout(index: int, step: int = step, first: int = first_micro_batch) -> None:
                    torch.manual_seed(dropout_seed(cfg.seed, step, first + index))

                loss_sum = accumulate_gradients(step_model, micro_batches, cfg.label_smoothing, autocast, seed_dropout)
                loss_sum = group.mean(loss_sum)
                grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm).item()
                optimizer.step()
                if not math.isfinite(loss_sum):
                    raise SolomonError(f"loss became {loss_sum} at step {step + 1}: lower lr.peak or raise lr.warmup")

                done = step + 1
                row = {
                    "step": done,
                    "tokens": done * tokens_per_step,
                    "loss": loss_sum,
                    "lr": lr,
                    "grad_norm": grad_norm,
                    "tokens_per_s": tokens_per_step / (time.perf_counter() - step_started),
                }
                if group.is_main:
                    run_log.step(row)
                tracking_started = time.perf_counter()
                tracker.step(row)
                seconds["tracking"] += time.perf_counter() - tracking_started
                progress.set_postfix(loss=f"{loss_sum:.3f}", lr=f"{lr:.2e}", refresh=False)
                stop_early = False
                if done % cfg.eval_interval == 0 or done == cfg.max_steps:
                    eval_started = time.perf_counter()
                    if group.is_main:
                        evaluate_and_sample(done)
                    stop_early = group.any(stopper.should_stop)  # rank 0 decides; every rank hears it
                    seconds["eval_and_samples"] += time.perf_counter() - eval_started
                    faults.maybe_crash("after-eval", done)
                stop_early = stop_early or stopper.should_stop
                # A signal reaches every rank (torchrun forwards it), but not necessarily within the same step.
                signalled = group.any(stop_signals.received is not None)
                finished = done == cfg.max_steps or stop_early
                if done % cfg.ckpt_interval == 0 or finished or signalled:
                    checkpoint_started = time.perf_counter()
                    if group.is_main:
                        checkpoints.save(done, checkpoint_state(done))
                    group.any(False)  # nobody leaves before the checkpoint is on disk
                    seconds["checkpoints"] += time.perf_counter() - checkpoint_started
                faults.maybe_crash("after-step", done, group.rank)
                faults.maybe_pause(done)
                if signalled:
                    stop_signals.received = stop_signals.received or int(signal.SIGTERM)
                    exit_code = 128 + stop_signals.received
                    print(
                        f"train: signal {stop_signals.received} at step {done}; checkpoint written, exiting "
                        f"with {exit_code}; `dvc repro` resumes",
                        file=sys.stderr,
                    )
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

        finish_started = time.perf_counter()
        tracker.finish("FINISHED")  # the last sends: part of this run's time
        seconds["tracking"] += time.perf_counter() - finish_started
        elapsed = time.perf_counter() - started
        if not best_dir.is_dir():
            raise SolomonError(f"no evaluated model in {best_dir}: run again with `--fresh`")
        with staged_dir(paths.model_dir) as tmp:
            shutil.copytree(best_dir, tmp, dirs_exist_ok=True)
        checkpoints.mark_completed(True)
        steps_here = done - start
        metrics = {
            "steps": done,
            "tokens": done * tokens_per_step,
            "final_loss": round(mean_tail_loss(read_steps(paths.steps_log)), 6),
            "best_step": stopper.best_step,
            "best_val_loss": round(stopper.best, 6),
            "stopped_early": stopper.should_stop,
            "parameters": model.num_params(non_embedding=False),
            "resumed_from_step": start,
            "wall_s": round(elapsed, 2),
            # Where this process's wall time went (the rest is the optimiser steps and the step log).
            "seconds": {name: round(value, 3) for name, value in seconds.items()},
            "tokens_per_s": round(steps_here * tokens_per_step / elapsed, 1) if steps_here else None,
            "precision": cfg.precision,
            "compile": cfg.compile,
            "threads": cfg.threads,
            "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
            "run_id": run_id,
        }
        write_json(paths.metrics, metrics)
        status = "FINISHED"
    finally:
        tracker.finish("KILLED" if exit_code is not None else status)
    return metrics


def mean_tail_loss(rows: list[dict]) -> float:
    """Mean training loss over the last tenth of the steps: a less noisy figure than the last step's."""
    tail = [r["loss"] for r in rows[-max(1, len(rows) // 10) :]]
    return float(np.mean(tail))
