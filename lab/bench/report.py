"""All of ``make bench`` in one run (``measure``), and the text `python -m lab bench` prints of each part."""

from collections.abc import Callable
from pathlib import Path

from lab.bench import PARTS
from lab.bench.families import family_steps, format_families
from lab.bench.portable import format_portable, portable_cost
from lab.bench.serving_section import format_serving, serving_section
from lab.bench.stage import stage_overheads
from lab.bench.throughput import training_throughput
from solomon.params import Params, load_params
from solomon.records import PARAMS_FILE, TOKENS_DIR


# --- all of it, and what `python -m lab bench` prints of it ----------------------------------------------------
def measure(
    params: Params | None,
    root: Path,
    steps: int,
    compile_variant: bool,
    stage_steps: int,
    serving: dict | None,
    report: Callable[[str], None],
    parts: tuple[str, ...] = PARTS,
    params_file: str = PARAMS_FILE,
) -> dict:
    """Every figure of ``parts``, each part handed to ``report`` as text as soon as it is measured (a bench takes
    minutes): training throughput with ``params``; the train stage on ``root``'s token files unless ``stage_steps``
    is 0 or there are none; the serving section (``serving_section``'s keyword arguments) unless ``serving`` is
    None; the portable mode's cost with ``params_file`` (its children read it)."""
    from datetime import UTC, datetime

    result = {"measured_utc": datetime.now(UTC).isoformat(timespec="seconds"), "parts": list(parts)}
    if "throughput" in parts:
        result["throughput"] = training_throughput(params, steps=steps, compile_variant=compile_variant)
        report(format_throughput(result["throughput"]))
    if "families" in parts:
        result["families"] = family_steps(params or load_params(params_file))
        report(format_families(result["families"]))
    if "portable" in parts:
        result["portable"] = portable_cost(params_file)
        report(format_portable(result["portable"]))
    if "stage" in parts and stage_steps and (root / TOKENS_DIR / "train.bin").is_file():
        result["stage"] = stage_overheads(root.resolve(), stage_steps)
        report(format_stage(result["stage"]))
    elif "stage" in parts:
        report(f"train stage not timed: no {TOKENS_DIR} here (run `make run` first) or --stage-steps 0")
    if "serving" in parts and serving is not None:
        result["serving"] = serving_section(**serving)
        report(format_serving(result["serving"]))
    return result


def format_throughput(throughput: dict) -> str:
    """The peaks and ceilings, a row per variant, the default step by operator, peak RSS."""
    from tabulate import tabulate

    peaks, ceilings, ceiling_mfu = (
        throughput[k] for k in ("gemm_peak_gflops", "matmul_ceiling_gflops", "matmul_ceiling_mfu")
    )
    alone = ", ".join(f"{k} {ceilings[k]} GFLOP/s ({ceiling_mfu[k]:.1%} of peak)" for k in ceilings)
    lines = [
        f"GEMM peak here: fp32 {peaks['fp32']} GFLOP/s, bf16 {peaks['bf16']} GFLOP/s",
        f"the model's own matmuls alone: {alone}: the MFU ceiling of this model here",
    ]
    if in_step := throughput["in_step_matmul"]:
        lines.append(
            f"the same matmuls inside the default step (profiled): {in_step['gflops']} GFLOP/s "
            f"({in_step['of_peak']:.1%} of peak), {in_step['ms_per_step']} ms per step"
        )
    variants = {name: v for name, v in throughput["variants"].items() if "tokens_per_s" in v}
    rows = [
        [name, v["tokens_per_s"], v["ratio_to_eager_fp32"], v["gflops"], f"{v['mfu']:.1%} of {v['mfu_of']}",
         v["warmup_s"]]
        for name, v in variants.items()
    ]  # fmt: skip
    rows += [[name, "not measured"] for name, v in throughput["variants"].items() if name not in variants]
    headers = ["variant", "tokens/s", "× eager fp32", "GFLOP/s", "MFU", "warm-up s"]
    lines.append(tabulate(rows, headers, tablefmt="github"))
    lines += [f"not measured: {name}: {v['not_measured']}" for name, v in throughput["variants"].items()
              if name not in variants]  # fmt: skip
    if profile := throughput["default_step_profile"]:
        lines.append("\nwhere the default path's step time goes (torch.profiler, self CPU time):")
        ops = [[p["op"][:60], f"{p['share']:.1%}", p["ms_per_step"], p["calls_per_step"]] for p in profile]
        lines.append(tabulate(ops, ["operator", "share", "ms/step", "calls/step"], tablefmt="github"))
    else:
        lines.append("\nthe default path was not measured here: no step profile")
    lines.append(f"peak RSS while training: {max(v['peak_rss_mib_so_far'] for v in variants.values()):.1f} MiB")
    return "\n".join(lines)


def format_stage(stage: dict) -> str:
    """Each overhead's seconds and share of the loop's wall time; resume latency, a no-op ``dvc repro``."""
    from tabulate import tabulate

    if "not_measured" in stage:
        return f"\ntrain stage not timed: {stage['not_measured']}"
    rows = [[name, stage["seconds"][name], f"{share:.2%}"] for name, share in stage["share_of_loop_wall"].items()]
    rows.append(["all overheads", round(sum(stage["seconds"].values()), 3), f"{stage['overhead_share']:.2%}"])
    return (
        f"\ntrain stage, {stage['steps']} steps (loop {stage['loop_wall_s']} s, {stage['tokens_per_s']} tokens/s):\n"
        + tabulate(rows, ["overhead", "seconds", "share of loop wall"], tablefmt="github")
        + f"\nresume (start to training again): {stage['resume_s']} s; "
        f"dvc repro with nothing changed: {stage['noop_dvc_repro_s']} s"
    )
