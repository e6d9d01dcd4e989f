"""The portable mode's cost: the default model's optimiser step in the default mode (this host's kernels, the run's
precision and optimiser) against the same step in portable mode (pinned kernels, fp32, Muon orthogonalising in
fp32). The pins are read when the libraries load, so each mode runs in a child process of its own; the children
alternate, default then portable, ``rounds`` times (A B A B), so that the host's speed drifting falls on both."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import torch

from solomon.params import Params, load_params

WARMUP = 2  # untimed steps first in each child


def step_rate(params: Params, steps: int, vocab_size: int = 8192) -> dict:
    """In this process (its mode already set): tokens/s of ``steps`` optimiser steps of ``params``' model and
    optimiser after ``WARMUP`` untimed ones, through the training loop's own step."""
    from solomon.model.gpt import GPT, GPTConfig
    from solomon.runtime import configure_torch
    from solomon.train.data_order import DataOrder
    from solomon.train.optimizer import build_optimizer
    from solomon.train.step import autocast_for, train_step

    cfg = params.train
    configure_torch(cfg.threads, portable=cfg.portable)
    tokens = torch.randint(0, vocab_size, (200_000,), generator=torch.Generator().manual_seed(0)).numpy()
    order = DataOrder(0, len(tokens), params.model.block_size, cfg.batch_size, cfg.accum_steps)
    torch.manual_seed(0)
    model = GPT(GPTConfig.from_params(params.model, vocab_size))
    optimizer = build_optimizer(model, cfg, 1e-4)
    autocast = autocast_for(cfg.precision)
    for step in range(WARMUP + steps):
        if step == WARMUP:
            started = time.perf_counter()
        batches = [order.batch(tokens, step, m) for m in range(order.accum_steps)]
        train_step(model, model, optimizer, batches, 1e-4, 0.0, 1.0, autocast)
    seconds = time.perf_counter() - started
    return {"tokens_per_s": round(steps * cfg.batch_size * params.model.block_size / seconds, 1),
            "s_per_step": round(seconds / steps, 3)}  # fmt: skip


def portable_params(params: Params) -> Params:
    """``params`` in portable mode: fp32, as the mode requires."""
    train = params.train.model_copy(update={"portable": True, "precision": "fp32", "compile": False})
    return params.model_copy(update={"train": train})


def portable_cost(params_file: str, steps: int = 4, rounds: int = 2) -> dict:
    """Both modes' step rates, alternating in child processes; the ratio of their means."""
    from lab.scratch import lab_env
    from solomon.portable import environment_for

    runs: dict[str, list[dict]] = {"default": [], "portable": []}
    for _ in range(rounds):
        for mode in runs:
            env = environment_for(mode == "portable", lab_env())
            command = [sys.executable, "-m", "lab.bench.portable", "--params", params_file, "--steps", str(steps)]
            done = subprocess.run(command + (["--portable"] if mode == "portable" else []), env=env,
                                  capture_output=True, text=True, check=True)  # fmt: skip
            runs[mode].append(json.loads(done.stdout))
    mean = {mode: sum(r["tokens_per_s"] for r in found) / len(found) for mode, found in runs.items()}
    params = load_params(params_file)
    return {
        "default_mode": f"{params.train.precision}, {params.train.optimizer}, this host's kernels",
        "portable_mode": f"fp32, {params.train.optimizer}, pinned (solomon.portable.PINNED_ENV)",
        "steps": steps,
        "runs": runs,
        "portable_over_default": round(mean["portable"] / mean["default"], 3),
    }


def format_portable(cost: dict) -> str:
    rows = "; ".join(
        f"{mode} {', '.join(str(r['tokens_per_s']) for r in found)} tokens/s" for mode, found in cost["runs"].items()
    )
    return (
        f"portable mode's cost on the default model (A B A B, {cost['steps']} steps each): {rows}; portable runs at "
        f"{cost['portable_over_default']:.2f}× the default mode's tokens/s (default: {cost['default_mode']}; "
        f"portable: {cost['portable_mode']})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--portable", action="store_true", help="this child runs the portable mode")
    args = parser.parse_args()
    params = load_params(args.params)
    print(json.dumps(step_rate(portable_params(params) if args.portable else params, args.steps)))


if __name__ == "__main__":
    main()
