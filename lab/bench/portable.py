"""The portable mode's cost: the default model's optimiser step in the default mode (this host's kernels, the run's
precision and optimiser) against the same step in portable mode (pinned kernels, fp32, Muon orthogonalising in
fp32). The pins are read when the libraries load, so each mode runs in a child process of its own; the children
alternate, default then portable, ``rounds`` times (A B A B), so that the host's speed drifting falls on both."""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys

from solomon.params import Params, load_params

WARMUP = 2  # untimed steps first in each child


def step_rate(params: Params, steps: int, vocab_size: int = 8192, warmup: int = WARMUP) -> dict:
    """In this process (its mode already set): tokens/s of ``steps`` optimiser steps of ``params``' model and
    optimiser after ``warmup`` untimed ones, through the training loop's own step (the check stage's probe)."""
    from solomon.train.precision import for_this_host
    from solomon.train.probe import probe_step

    probe = probe_step(params, for_this_host(params.train), vocab_size, warmup, steps, slow_step_s=math.inf)
    seconds = sum(probe.seconds)
    return {"tokens_per_s": round(steps * params.train.batch_size * params.model.block_size / seconds, 1),
            "s_per_step": round(seconds / steps, 3)}  # fmt: skip


def portable_params(params: Params) -> Params:
    """``params`` in portable mode: fp32, as the mode requires."""
    train = params.train.model_copy(update={"portable": True, "precision": "fp32", "compile": False})
    return params.model_copy(update={"train": train})


def alternate(
    modes: dict[str, tuple[dict[str, str], list[str]]], params_file: str | dict[str, str], rounds: int
) -> dict:
    """Each mode's step rate, measured by this module's child process in the mode's (environment, extra arguments),
    the modes one after another, ``rounds`` times (A B A B); ``params_file`` one file, or one per mode."""
    files = params_file if isinstance(params_file, dict) else dict.fromkeys(modes, params_file)
    runs: dict[str, list[dict]] = {mode: [] for mode in modes}
    for _ in range(rounds):
        for mode, (env, arguments) in modes.items():
            command = [sys.executable, "-m", "lab.bench.portable", "--params", files[mode], *arguments]
            done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
            runs[mode].append(json.loads(done.stdout))
    return runs


def portable_cost(params_file: str, steps: int = 4, rounds: int = 2) -> dict:
    """Both modes' step rates, alternating in child processes; the ratio of their means."""
    from lab.scratch import lab_env
    from solomon.portable import environment_for

    runs = alternate(
        {
            mode: (environment_for(mode == "portable", lab_env()), ["--steps", str(steps), *flags])
            for mode, flags in (("default", []), ("portable", ["--portable"]))
        },
        params_file,
        rounds,
    )
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
    parser.add_argument("--warmup", type=int, default=WARMUP, help="untimed steps first")
    parser.add_argument("--portable", action="store_true", help="this child runs the portable mode")
    parser.add_argument("--precision", help="train.precision instead of the params file's")
    args = parser.parse_args()
    params = load_params(args.params)
    if args.precision:
        params = params.model_copy(update={"train": params.train.model_copy(update={"precision": args.precision})})
    print(json.dumps(step_rate(portable_params(params) if args.portable else params, args.steps, warmup=args.warmup)))


if __name__ == "__main__":
    main()
