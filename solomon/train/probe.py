"""A short measured probe of a run's optimiser step on this host, before any data exists: the check stage's estimate
of the training time. The step is the loop's own (``train_step``) on the configured model, optimiser, precision,
batch and thread count, over random tokens; what it leaves out (evaluations, checkpoints, the first step's warm-up)
is a few percent of a default run."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch

from solomon.model.gpt import GPT, GPTConfig
from solomon.params import Params
from solomon.runtime import configure_torch
from solomon.train.data_order import DataOrder
from solomon.train.optimizer import build_optimizer
from solomon.train.precision import Precision, autocast_for
from solomon.train.step import train_step

TIMED_STEPS = 2  # after one untimed step (kernel selection, allocator warm-up)
SLOW_STEP_S = 20.0  # a first step slower than this is the estimate itself: timing more would hold the stage up


@dataclass(frozen=True)
class Probe:
    seconds: tuple[float, ...]  # each timed step's

    @property
    def seconds_per_step(self) -> float:
        return statistics.median(self.seconds)

    def training_seconds(self, max_steps: int) -> float:
        return self.seconds_per_step * max_steps


def probe_step(
    params: Params,
    precision: Precision,
    vocab_size: int,
    warmup: int = 1,
    steps: int = TIMED_STEPS,
    slow_step_s: float = SLOW_STEP_S,
) -> Probe:
    """Time ``steps`` optimiser steps of one rank of ``params``' run in ``precision`` (resolved) with ``vocab_size``
    tokens, after ``warmup`` untimed ones; a first step slower than ``slow_step_s`` is the only one timed."""
    cfg = params.train
    configure_torch(cfg.threads, portable=cfg.portable)
    torch.manual_seed(0)
    model = GPT(GPTConfig.from_params(params.model, vocab_size))
    optimizer = build_optimizer(model, cfg, 1e-4, precision)
    autocast = autocast_for(precision)
    needed = cfg.batch_size * (params.model.block_size + 1) * 2
    tokens = torch.randint(0, vocab_size, (needed,), generator=torch.Generator().manual_seed(0)).numpy()
    order = DataOrder(0, len(tokens), params.model.block_size, cfg.batch_size, cfg.accum_steps, cfg.nproc)
    seconds = []
    for step in range(warmup + steps):
        started = time.perf_counter()
        batches = [order.batch(tokens, step, m) for m in range(cfg.accum_steps)]
        train_step(model, model, optimizer, batches, 1e-4, cfg.label_smoothing, cfg.clip, autocast)
        seconds.append(time.perf_counter() - started)
        if step == 0 and seconds[0] > slow_step_s:
            return Probe((seconds[0],))
    return Probe(tuple(seconds[warmup:]))
