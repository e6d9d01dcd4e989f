"""The block families' step: the default model's optimiser step as gpt2, llama and llama with QK-norm (Qwen3's
layout, the default), everything else params.yaml's, timed in turn in one process — A B C, one step each, for
``rounds`` rounds, the first two dropped — so that the host's speed drifting falls on all of them. Wall seconds
per step (median) and the ratio to gpt2's. A benchmark, not a test: nothing here asserts a time."""

from __future__ import annotations

import statistics
import time

import torch

from lab.families import FAMILIES
from solomon.model.gpt import GPT, GPTConfig
from solomon.params import Params
from solomon.runtime import configure_torch
from solomon.train.data_order import DataOrder
from solomon.train.optimizer import build_optimizer
from solomon.train.precision import autocast_for, for_this_host
from solomon.train.step import train_step

DROPPED = 2  # first rounds: allocation and caches warming


def family_steps(params: Params, rounds: int = 10, vocab_size: int = 8192) -> dict:
    cfg = params.train
    configure_torch(cfg.threads)
    tokens = torch.randint(0, vocab_size, (200_000,), generator=torch.Generator().manual_seed(0)).numpy()
    order = DataOrder(0, len(tokens), params.model.block_size, cfg.batch_size, cfg.accum_steps)
    built = {}
    precision = for_this_host(cfg)
    for name, model_params in FAMILIES.items():
        torch.manual_seed(0)
        config = GPTConfig.from_params(params.model.model_copy(update=model_params), vocab_size)
        model = GPT(config)
        built[name] = (model, build_optimizer(model, cfg, 1e-4, precision))
    autocast = autocast_for(precision)
    seconds: dict[str, list[float]] = {name: [] for name in built}
    for step in range(rounds):
        batches = [order.batch(tokens, step, m) for m in range(order.accum_steps)]
        for name, (model, optimizer) in built.items():
            started = time.perf_counter()
            train_step(model, model, optimizer, batches, 1e-4, cfg.label_smoothing, cfg.clip, autocast)
            seconds[name].append(time.perf_counter() - started)
    tokens_per_step = cfg.batch_size * params.model.block_size
    median = {name: statistics.median(found[DROPPED:]) for name, found in seconds.items()}
    return {
        "rounds": rounds,
        "families": {
            name: {
                "ms_per_step": round(1000 * median[name], 1),
                "tokens_per_s": round(tokens_per_step / median[name], 1),
                "parameters": built[name][0].num_params(non_embedding=False),
                "step_time_to_gpt2": round(median[name] / median["gpt2"], 3),
            }
            for name in built
        },
    }


def format_families(result: dict) -> str:
    from tabulate import tabulate

    rows = [[name, v["ms_per_step"], v["tokens_per_s"], v["parameters"], v["step_time_to_gpt2"]]
            for name, v in result["families"].items()]  # fmt: skip
    headers = ["family", "ms a step (median)", "tokens/s", "parameters", "step time ÷ gpt2's"]
    return (
        f"the block families' step, in turn in one process ({result['rounds']} rounds, the first {DROPPED} dropped):\n"
        + tabulate(rows, headers, tablefmt="github")
    )
