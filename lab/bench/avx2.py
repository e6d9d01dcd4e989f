"""The default's optimiser step on an AVX2-only CPU, before and after ``train.precision: auto``: bf16 autocast with
Muon's Newton–Schulz in bf16 (the default before auto, which such a CPU runs through torch's scalar bf16 path)
against what auto resolves to there (fp32 throughout). ``--before`` names another params file for the bf16 side
(the default as it was, where its shape or steps have moved since). On a host with more than AVX2 the run is
capped to AVX2 by the variables that cap each kernel library (``AVX2_ONLY``), read as the libraries load: each
precision runs in a child process of its own, alternating, ``rounds`` times (A B A B). The bf16 child times one
step with no warm-up: it takes minutes, and its first step's set-up is a small part of it.

    python -m lab.bench.avx2 [--params params.yaml] [--before PARAMS] [--steps 3] [--rounds 2] [--out reports/bench]

prints the table and writes reports/bench/avx2-<time>.json. A benchmark, not a test: nothing asserts a time.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from lab.bench.portable import alternate
from lab.scratch import lab_env
from solomon.atomic import write_json
from solomon.machine import describe
from solomon.params import load_params

# What an AVX2-only CPU (AMD Zen 3, Intel Haswell to Skylake client) runs: ATen's AVX2 kernels, oneDNN without its
# AVX-512 and bf16 paths (so no native bf16 matmuls), MKL's AVX2 GEMMs.
AVX2_ONLY = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}


def measure(params_file: str, steps: int, rounds: int, before_file: str | None = None) -> dict:
    env = lab_env() | AVX2_ONLY
    files = {"bf16 (before auto)": before_file or params_file, "auto (fp32 here)": params_file}
    runs = alternate(
        {
            "bf16 (before auto)": (env, ["--precision", "bf16", "--warmup", "0", "--steps", "1"]),
            "auto (fp32 here)": (env, ["--precision", "auto", "--steps", str(steps)]),
        },
        files,
        rounds,
    )
    max_steps = {mode: load_params(path).train.max_steps for mode, path in files.items()}
    mean = {mode: sum(r["s_per_step"] for r in found) / len(found) for mode, found in runs.items()}
    return {
        "host": describe()["kind"],
        "capped_to": AVX2_ONLY,
        "params": files,
        "max_steps": max_steps,
        "runs": runs,
        "s_per_step": {mode: round(value, 3) for mode, value in mean.items()},
        "training_min": {mode: round(value * max_steps[mode] / 60, 1) for mode, value in mean.items()},
    }


def format_table(result: dict) -> str:
    lines = [
        f"host: {result['host']}, capped to {' '.join(f'{k}={v}' for k, v in result['capped_to'].items())}",
        "| step | params | s a step (each run) | mean | train.max_steps | training |",
        "|---|---|---|---|---|---|",
    ]
    for mode, found in result["runs"].items():
        each = " / ".join(f"{r['s_per_step']:g}" for r in found)
        lines.append(
            f"| {mode} | {result['params'][mode]} | {each} | {result['s_per_step'][mode]:g} | "
            f"{result['max_steps'][mode]:,} | {result['training_min'][mode]:,} min |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--before", help="params file of the bf16 side (default: --params)")
    parser.add_argument("--steps", type=int, default=3, help="timed steps of the fp32 child (after 2 warm-up steps)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("reports/bench"))
    args = parser.parse_args()
    result = measure(args.params, args.steps, args.rounds, args.before)
    print(format_table(result))
    write_json(args.out / f"avx2-{time.strftime('%Y-%m-%dT%H%M%SZ', time.gmtime())}.json", result)


if __name__ == "__main__":
    main()
