"""Muon's cost beside AdamW's: the loop's own step (``train_step``) of the default model, with AdamW, torch.optim.Muon
and BatchedMuon at several ``train.muon.ns_steps``, at 1× and 2× the tokens of a step (2× by accumulating two
micro-batches of the default size). ``python -m lab.bench.muon [--rounds N] [--threads N]``.

All variants share one process, one model and its data, and are timed round-robin (one step of each per round,
the median over rounds). Times are this process's CPU seconds (``time.process_time``), not wall clock: on a shared
machine a neighbour's load stretches wall time unevenly (a first run here under a load of 8 on 2 cores put Muon's
step below AdamW's), while CPU time counts only the work done. The output is ratios to AdamW's step, and each
variant's optimiser step alone as a share of its whole step; then the two Muons' steps alone on the same
gradients, which the whole step's noise can hide (20 rounds of a fraction of a second). A benchmark, not a test:
nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch

from solomon.model.gpt import GPT, GPTConfig
from solomon.params import Params
from solomon.runtime import configure_torch
from solomon.train.data_order import DataOrder
from solomon.train.muon import BatchedMuon
from solomon.train.optimizer import MuonWithAdamW, Optimizer, build_optimizer, hidden_matrices
from solomon.train.precision import autocast_for, for_this_host
from solomon.train.step import train_step

NS_STEPS = (3, 4, 5)
MUONS = {"torch Muon": torch.optim.Muon, "batched Muon": BatchedMuon}


class Timed:
    """An optimiser whose ``step`` records its own seconds; everything else passes through."""

    def __init__(self, inner: Optimizer) -> None:
        self.inner, self.seconds = inner, 0.0
        self.param_groups = inner.param_groups

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.inner.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        started = time.process_time()
        self.inner.step()
        self.seconds = time.process_time() - started


def variants(model: GPT, params: Params) -> dict[str, Timed]:
    cfg = params.train
    adamw_cfg = cfg.model_copy(update={"optimizer": "adamw"})
    built = {"AdamW": Timed(build_optimizer(model, adamw_cfg, 1e-4, for_this_host(cfg)))}
    for ns_steps in NS_STEPS:
        muon_cfg = cfg.model_copy(
            update={"optimizer": "muon", "muon": cfg.muon.model_copy(update={"ns_steps": ns_steps})}
        )
        for name, muon_class in MUONS.items():
            built[f"{name} ns {ns_steps}"] = Timed(MuonWithAdamW(model, muon_cfg, 1e-4, muon_class=muon_class))
    return built


def measure(params: Params, accum: int, rounds: int, warmup: int = 1) -> dict[str, dict[str, float]]:
    """Median step and optimiser-step CPU seconds per variant at ``accum`` micro-batches of the default size."""
    torch.manual_seed(0)
    config = GPTConfig.from_params(params.model, params.tokenizer.vocab_size)
    model = GPT(config)
    micro = params.train.batch_size // params.train.accum_steps
    tokens = torch.randint(0, config.vocab_size, (200_000,), generator=torch.Generator().manual_seed(0)).numpy()
    order = DataOrder(0, len(tokens), config.block_size, micro * accum, accum)
    autocast = autocast_for(for_this_host(params.train))
    timed = variants(model, params)
    steps: dict[str, list[float]] = {name: [] for name in timed}
    optimizer_steps: dict[str, list[float]] = {name: [] for name in timed}
    for round_ in range(warmup + rounds):
        for name, optimizer in timed.items():
            batches = [order.batch(tokens, round_, m) for m in range(accum)]
            started = time.process_time()
            train_step(
                model, model, optimizer, batches, 1e-4, params.train.label_smoothing, params.train.clip, autocast
            )
            if round_ >= warmup:
                steps[name].append(time.process_time() - started)
                optimizer_steps[name].append(optimizer.seconds)
    return {
        name: {"step_s": statistics.median(steps[name]), "optimizer_s": statistics.median(optimizer_steps[name])}
        for name in timed
    }


def muon_alone(params: Params, rounds: int = 20) -> dict[int, float]:
    """{ns_steps: BatchedMuon's step / torch.optim.Muon's}, each stepping the default model's hidden matrices on
    the same gradients, interleaved, median CPU seconds over ``rounds``: the two differ only there."""
    torch.manual_seed(0)
    matrices = hidden_matrices(GPT(GPTConfig.from_params(params.model, params.tokenizer.vocab_size)))
    for p in matrices:
        p.grad = torch.randn_like(p)
    ratios = {}
    for ns_steps in NS_STEPS:
        built = {name: cls(matrices, lr=1e-4, ns_steps=ns_steps) for name, cls in MUONS.items()}
        seconds: dict[str, list[float]] = {name: [] for name in built}
        for _ in range(rounds + 1):  # the first round warms up
            for name, optimizer in built.items():
                started = time.process_time()
                optimizer.step()
                seconds[name].append(time.process_time() - started)
        torch_s, batched_s = (statistics.median(seconds[name][1:]) for name in MUONS)
        ratios[ns_steps] = batched_s / torch_s
    return ratios


def table(results: dict[int, dict[str, dict[str, float]]], tokens_per_step: int) -> str:
    lines = [f"{'variant':<20}" + "".join(f"| {accum}× tokens ({accum * tokens_per_step}) " for accum in results)]
    lines.append(f"{'':<20}" + "| step/AdamW  opt share " * len(results))
    for name in next(iter(results.values())):
        cells = []
        for by_name in results.values():
            base, row = by_name["AdamW"]["step_s"], by_name[name]
            cells.append(f"| {row['step_s'] / base:>9.3f}  {row['optimizer_s'] / row['step_s']:>9.3f} ")
        lines.append(f"{name:<20}" + "".join(cells))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="timed steps per variant (after 1 warm-up round)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    args = parser.parse_args(argv)
    configure_torch(args.threads)
    params = Params()
    results = {accum: measure(params, accum, args.rounds) for accum in (1, 2)}
    print(table(results, params.train.batch_size * params.model.block_size))
    alone = muon_alone(params)
    print("Muon's step alone, batched / torch: " + ", ".join(f"ns {n} {r:.3f}" for n, r in alone.items()))
    return {"steps": results, "muon_alone": alone}


if __name__ == "__main__":
    main()
