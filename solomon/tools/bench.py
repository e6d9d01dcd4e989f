"""``make bench``: how fast the default model trains here, and where a real train stage's time goes.

1. A GEMM peak measured in this process (fp32 and bf16 square matmuls), the reference for MFU.
2. The default model trained for a fixed number of steps after warm-up in eager and compiled fp32 and bf16
   autocast, and eager bf16 with ``train.optimizer: muon``, one after another in this process: tokens/s, achieved
   GFLOP/s (6·N per token for the weights plus 12·L·d·T for attention, as in the PaLM and nanoGPT estimates) and
   MFU against the peak of the variant's precision; the default variant's step by operator (torch.profiler); the
   step's weight matmuls timed alone at their own shapes, the MFU a step of nothing but matmuls would reach; and
   the same matmuls' rate inside the profiled step (their FLOPs over the profiler's matmul kernel time).
3. A real train stage (``stages/train.py``, tracking, evaluation with samples and checkpoints on at their
   configured intervals) on the workspace's token files for ``stage_steps`` steps: wall time and the share of
   each overhead, from the seconds the loop records in ``train_run.json``; then that run resumed, timed
   until it trains again, and ``dvc repro`` with nothing changed when the workspace is up to date.
4. Serving: concurrent clients against ``solomon serve``'s stack on loopback (a server process, a model of the
   default size with random weights): requests/s, p50/p95 latency, generated tokens/s, errors.
``measure`` takes all four, handing each part's text (``format_*``) to the caller as soon as it is measured.
A benchmark, not a test: nothing here asserts a time.
"""

from __future__ import annotations

import json
import math
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import yaml

from solomon.errors import SolomonError, last_line
from solomon.machine import best_gflops, gemm_peaks, matmul_flops
from solomon.model.gpt import GPT, GPTConfig
from solomon.params import Params, read_yaml
from solomon.pipeline import dvc_executable, stage_command
from solomon.records import PARAMS_FILE, STEP_LOG, TOKENS_DIR, TRAIN_RUN, read_json, read_steps
from solomon.runtime import configure_torch
from solomon.tools.scratch import merge, pipeline_env
from solomon.train.data_order import DataOrder
from solomon.train.hooks import pause_environment
from solomon.train.optimizer import build_optimizer
from solomon.train.step import autocast_for, train_step

# name: (train.precision, train.compile, train.optimizer). Muon's Newton-Schulz matmuls are optimiser work, not
# model FLOPs: its variant's MFU counts the model's FLOPs only, so the time they take shows as a lower MFU.
VARIANTS = {
    "eager fp32": ("fp32", False, "adamw"),
    "eager bf16": ("bf16", False, "adamw"),
    "eager bf16 muon": ("bf16", False, "muon"),
    "compiled fp32": ("fp32", True, "adamw"),
    "compiled bf16": ("bf16", True, "adamw"),
}
BENCH_GEMM = (2048, 10)  # (n, repeats): a longer GEMM-peak measurement than the train stage's seconds at its start


def model_matmul_shapes(config: GPTConfig, tokens: int) -> list[tuple[int, int, int]]:
    """(M, K, N) of every weight matmul of one training step: each layer's forward, and its backward's two."""
    d = config.n_embd
    per_layer = [(d, 3 * d), (d, d), (d, 4 * d), (4 * d, d)]  # qkv, attention out, MLP up, MLP down
    forward = [(tokens, k, n) for k, n in per_layer] * config.n_layer + [(tokens, d, config.vocab_size)]
    # backward: grad_input (M × N → K) and grad_weight (K × M → N), the same FLOPs as the forward each
    return forward + [(m, n, k) for m, k, n in forward] + [(k, m, n) for m, k, n in forward]


def matmul_ceiling_gflops(config: GPTConfig, tokens: int, dtype: torch.dtype, repeats: int = 5) -> float:
    """GFLOP/s of the step's weight matmuls alone, at their own shapes: what MFU could reach if everything else
    (attention, norms, activations, loss, optimiser) took no time."""
    generator = torch.Generator().manual_seed(0)
    operands = [
        (torch.randn(m, k, generator=generator).to(dtype), torch.randn(k, n, generator=generator).to(dtype))
        for m, k, n in model_matmul_shapes(config, tokens)
    ]
    return best_gflops(operands, repeats)


def flops_per_token(config: GPTConfig, n_params: int) -> int:
    """Training FLOPs per token: 6 per parameter (forward 2, backward 4) plus attention's 12·L·d·T."""
    return 6 * n_params + 12 * config.n_layer * config.n_embd * config.block_size


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def training_throughput(
    params: Params, steps: int = 20, warmup: int = 3, vocab_size: int = 8192, compile_variant: bool = True
) -> dict:
    configure_torch(params.train.threads, compiled=compile_variant)
    peaks = gemm_peaks(*BENCH_GEMM)
    config = GPTConfig.from_params(params.model, vocab_size)
    tokens = torch.randint(0, vocab_size, (200_000,), generator=torch.Generator().manual_seed(0)).numpy()
    order = DataOrder(0, len(tokens), params.model.block_size, params.train.batch_size, params.train.accum_steps)
    tokens_per_step = params.train.batch_size * params.model.block_size
    results = {}
    profile: list[dict] = []  # stays empty when the default variant is not measured (compile with --skip-compile)
    matmul_ms_per_step = None
    for name, (precision, compiled, optimizer_name) in VARIANTS.items():
        if compiled and not compile_variant:
            continue
        torch.manual_seed(0)
        model = GPT(config)
        step_model = torch.compile(model) if compiled else model
        optimizer = build_optimizer(model, params.train.model_copy(update={"optimizer": optimizer_name}), 1e-4)

        autocast = autocast_for(precision)

        def one_step(step: int, model=model, step_model=step_model, optimizer=optimizer, autocast=autocast) -> None:
            batches = [order.batch(tokens, step, m) for m in range(order.accum_steps)]
            train_step(model, step_model, optimizer, batches, 1e-4, 0.0, 1.0, autocast)  # the loop's own step

        first_started = time.perf_counter()
        for step in range(warmup + steps):
            if step == warmup:
                started = time.perf_counter()
            one_step(step)
        elapsed = time.perf_counter() - started
        tokens_per_s = steps * tokens_per_step / elapsed
        gflops = tokens_per_s * flops_per_token(config, model.num_params(non_embedding=False)) / 1e9
        results[name] = {
            "tokens_per_s": round(tokens_per_s, 1),
            "gflops": round(gflops, 1),
            "mfu": round(gflops / peaks[precision], 3),
            "mfu_of": f"{precision} GEMM peak",
            "optimizer": optimizer_name,
            "warmup_s": round(started - first_started, 1),
            "peak_rss_mib_so_far": round(peak_rss_mib(), 1),
        }
        cfg = params.train
        if (precision, compiled, optimizer_name) == (cfg.precision, cfg.compile, cfg.optimizer):
            # the default path: where its step time goes, and how fast its matmuls run inside a real step
            profile, matmul_ms_per_step = step_profile(one_step, warmup + steps)
    # after the variants, so that their peak RSS is training's alone
    micro_batch_tokens = tokens_per_step // params.train.accum_steps
    ceilings = {
        name: matmul_ceiling_gflops(config, micro_batch_tokens, dtype)
        for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16))
    }
    in_step = None
    if matmul_ms_per_step:
        flops = matmul_flops(model_matmul_shapes(config, micro_batch_tokens)) * params.train.accum_steps
        gflops = flops / (matmul_ms_per_step / 1000) / 1e9
        peak = peaks[params.train.precision]
        in_step = {"gflops": round(gflops, 1), "of_peak": round(gflops / peak, 3), "ms_per_step": matmul_ms_per_step}
    base = results["eager fp32"]["tokens_per_s"]
    for result in results.values():
        result["ratio_to_eager_fp32"] = round(result["tokens_per_s"] / base, 3)
    return {
        "gemm_peak_gflops": peaks,
        # the model's own matmul shapes: the MFU that a step of nothing but its matmuls would reach
        "matmul_ceiling_gflops": {k: round(v, 1) for k, v in ceilings.items()},
        "matmul_ceiling_mfu": {k: round(ceilings[k] / peaks[k], 3) for k in peaks},
        # the same matmuls as they run inside the default step (profiled: transposed operands, cold caches)
        "in_step_matmul": in_step,
        "model": params.model.model_dump() | {"batch_size": params.train.batch_size},
        "threads": params.train.threads,
        "steps": steps,
        "variants": results,
        "default_step_profile": profile,
    }


MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm")


def step_profile(
    one_step: Callable[[int], None], first_step: int, steps: int = 2, top: int = 10
) -> tuple[list[dict], float]:
    """The ``top`` operators of ``steps`` training steps by self CPU time (torch.profiler), with their share; and
    the milliseconds per step spent in matmul kernels."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        for step in range(first_step, first_step + steps):
            one_step(step)
    events = sorted(profiler.key_averages(), key=lambda e: -e.self_cpu_time_total)
    total = sum(e.self_cpu_time_total for e in events)
    matmul_ms = sum(e.self_cpu_time_total for e in events if e.key in MATMUL_OPS) / steps / 1000
    top_ops = [
        {
            "op": e.key,
            "share": round(e.self_cpu_time_total / total, 4),
            "ms_per_step": round(e.self_cpu_time_total / steps / 1000, 1),
            "calls_per_step": e.count // steps,
        }
        for e in events[:top]
    ]
    return top_ops, round(matmul_ms, 1)


def _run(command: list[str], cwd: Path) -> float:
    started = time.perf_counter()
    subprocess.run(command, cwd=cwd, env=pipeline_env(), check=True, capture_output=True, text=True)
    return time.perf_counter() - started


def resume_latency(command: list[str], work: Path, resume_step: int) -> float:
    """Seconds from starting a train process on a mid-run checkpoint at ``resume_step`` until it trains again:
    imports, checkpoint verify and load, fingerprint, model and tracker set-up. Measured to the end of the first
    resumed step (the fault hook pauses the process there), minus that step's own time from its log row."""
    release = work / "release"
    env = pipeline_env() | pause_environment(resume_step + 1, release)
    stderr_path = work / "resume.stderr"  # a file, not a pipe: a full pipe would block the process we wait for
    with open(stderr_path, "w") as stderr:
        started = time.perf_counter()
        process = subprocess.Popen(command, cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
        paused = Path(f"{release}.paused")
        while not paused.exists():
            if process.poll() is not None:
                message = last_line(stderr_path.read_text())
                raise SolomonError(f"bench: the resumed train stage exited with {process.returncode}: {message}")
            time.sleep(0.01)
        reached = time.perf_counter() - started
        process.kill()
        process.wait()
    row = read_steps(work / STEP_LOG)[-1]
    tokens_per_step = row["tokens"] / row["step"]
    return reached - tokens_per_step / row["tokens_per_s"]


def stage_overheads(repo: Path, stage_steps: int) -> dict:
    """A real train stage on ``repo``'s token files, in a scratch directory, with params.yaml's intervals; then
    the same run resumed (``max_steps`` raised, a resumable change) to time a resume."""
    base = read_yaml(repo / PARAMS_FILE)
    with tempfile.TemporaryDirectory(prefix="solomon-bench-") as scratch:
        work = Path(scratch)
        (work / "data").symlink_to(repo / "data")  # the stage's inputs; its outputs land in the scratch directory
        (work / PARAMS_FILE).write_text(yaml.safe_dump(merge(base, {"train": {"max_steps": stage_steps}})))
        command = stage_command(repo, "train")  # the stage exactly as dvc.yaml runs it
        process_s = _run(command, work)
        metrics = read_json(work / TRAIN_RUN)  # timings: beside metrics
        (work / PARAMS_FILE).write_text(yaml.safe_dump(merge(base, {"train": {"max_steps": stage_steps + 2}})))
        resume_s = resume_latency(command, work, stage_steps)
    wall = metrics["wall_s"]
    seconds = metrics["seconds"]
    shares = {name: round(value / wall, 4) for name, value in seconds.items()}
    result = {
        "steps": stage_steps,
        "eval_interval": base["train"]["eval_interval"],
        "ckpt_interval": base["train"]["ckpt_interval"],
        "process_s": round(process_s, 1),
        "loop_wall_s": wall,
        "tokens_per_s": metrics["tokens_per_s"],
        "seconds": seconds,
        "share_of_loop_wall": shares,
        "overhead_share": round(sum(shares.values()), 4),
        "resume_s": round(resume_s, 2),
    }
    dvc = dvc_executable()
    status = subprocess.run([dvc, "status"], cwd=repo, capture_output=True, text=True)
    if status.returncode == 0 and "up to date" in status.stdout:
        result["noop_dvc_repro_s"] = round(_run([dvc, "repro"], repo), 2)
    else:
        result["noop_dvc_repro_s"] = None  # the workspace has stages to run: not a no-op to time
    return result


# --- serving: concurrent clients against `solomon serve`'s stack on loopback -----------------------------------
def serve_random_model(port: int, tokenizer_path: str, threads: int) -> None:
    """The serving stack (FastAPI app, queue, worker, uvicorn) around a model of the default size with random
    weights: a load figure needs the default model's speed, not a trained run. Nothing here is verified."""
    from datetime import UTC, datetime

    from solomon.data.tokenizer import load_tokenizer
    from solomon.params import load_params
    from solomon.records import WEIGHTS
    from solomon.serving.limits import Limits
    from solomon.serving.loader import Served
    from solomon.serving.server import serve

    def load() -> Served:
        configure_torch(threads)
        tokenizer = load_tokenizer(Path(tokenizer_path))
        torch.manual_seed(0)
        model = GPT(GPTConfig.from_params(load_params(PARAMS_FILE).model, tokenizer.get_vocab_size())).eval()
        return Served(
            model=model,
            tokenizer=tokenizer,
            stop_id=None,  # every request generates its max_tokens
            samples={"max_new_tokens": 32, "temperature": 0.8, "top_k": 40},
            run_id="bench-random-weights",
            manifest_sha256="0" * 64,
            files={WEIGHTS: {"sha256": "random weights", "verified_in": "not verified"}},
            git={},
            verified="not verified: random weights for the load figure",
            verified_utc=datetime.now(UTC).isoformat(timespec="seconds"),
            threads=threads,
        )

    serve(load, "127.0.0.1", port, Limits(queue=64, timeout_s=600))


def _bench_tokenizer(work: Path) -> Path:
    """The workspace's tokenizer when there is one (the default vocabulary); else one trained on a little text."""
    from solomon.data.tokenizer import train_tokenizer
    from solomon.params import TokenizerParams
    from solomon.records import TOKENIZER

    if Path(TOKENIZER).is_file():
        return Path(TOKENIZER).resolve()
    texts = [f"In the beginning {i} the words were counted and weighed, verse {i * 7}." for i in range(2000)]
    path = work / "tokenizer.json"
    train_tokenizer(texts, TokenizerParams()).save(str(path))
    return path


def serving_load(clients: int = 4, requests_per_client: int = 4, max_tokens: int = 32, threads: int = 1) -> dict:
    """Requests/s, latency percentiles and generated tokens/s of ``clients`` concurrent clients, each sending
    ``requests_per_client`` completions one after another, against a server process on 127.0.0.1."""
    import http.client
    import socket
    import threading

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with tempfile.TemporaryDirectory(prefix="solomon-bench-serve-") as work:
        code = f"from solomon.tools.bench import serve_random_model; serve_random_model({port}, {{!r}}, {threads})"
        server = subprocess.Popen(
            [sys.executable, "-c", code.format(str(_bench_tokenizer(Path(work))))],
            env=pipeline_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )

        def ask(path: str, body: dict | None = None) -> tuple[int, dict]:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
            connection.request("POST" if body else "GET", path, json.dumps(body) if body else None)
            answer = connection.getresponse()
            status, payload = answer.status, json.loads(answer.read())
            connection.close()
            return status, payload

        try:
            deadline = time.monotonic() + 120
            while True:
                if server.poll() is not None:
                    raise SolomonError(f"the bench server exited: {last_line(server.stderr.read())}")
                try:
                    if ask("/readyz")[0] == 200:
                        break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    raise SolomonError("the bench server was not ready within 120 s")
                time.sleep(0.1)
            latencies, tokens, errors = [], [], []

            def client(index: int) -> None:
                for n in range(requests_per_client):
                    body = {"prompt": "In the beginning", "max_tokens": max_tokens, "seed": index * 1000 + n}
                    started = time.perf_counter()
                    try:
                        status, payload = ask("/v1/completions", body)
                    except OSError as exc:
                        status, payload = 0, {"error": str(exc)}
                    latencies.append(time.perf_counter() - started)
                    if status == 200:
                        tokens.append(payload["usage"]["completion_tokens"])
                    else:
                        errors.append(status)

            workers = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
            started = time.perf_counter()
            for worker in workers:
                worker.start()
            for worker in workers:
                worker.join()
            wall = time.perf_counter() - started
        finally:
            server.terminate()
            server.wait(timeout=60)
    ordered = sorted(latencies)
    return {
        "model": "default size, random weights",
        "clients": clients,
        "requests": len(latencies),
        "max_tokens": max_tokens,
        "threads": threads,
        "wall_s": round(wall, 2),
        "requests_per_s": round(len(latencies) / wall, 2),
        "p50_latency_s": round(ordered[len(ordered) // 2], 3),
        "p95_latency_s": round(ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)], 3),
        "generated_tokens_per_s": round(sum(tokens) / wall, 1),
        "errors": len(errors),
    }


# --- all of it, and what `solomon bench` prints of it ------------------------------------------------------------
def measure(
    params: Params,
    root: Path,
    steps: int,
    compile_variant: bool,
    stage_steps: int,
    serving_clients: int,
    report: Callable[[str], None],
) -> dict:
    """Every figure, each part handed to ``report`` as text as soon as it is measured (a bench takes minutes): the
    train stage on ``root``'s token files unless ``stage_steps`` is 0 or there are none, serving unless
    ``serving_clients`` is 0."""
    from datetime import UTC, datetime

    result = {"measured_utc": datetime.now(UTC).isoformat(timespec="seconds")}
    result["throughput"] = training_throughput(params, steps=steps, compile_variant=compile_variant)
    report(format_throughput(result["throughput"]))
    if stage_steps and (root / TOKENS_DIR / "train.bin").is_file():
        result["stage"] = stage_overheads(root.resolve(), stage_steps)
        report(format_stage(result["stage"]))
    else:
        report(f"train stage not timed: no {TOKENS_DIR} here (run `make run` first) or --stage-steps 0")
    if serving_clients:
        result["serving"] = serving_load(clients=serving_clients)
        report(format_serving(result["serving"]))
    return result


def format_throughput(throughput: dict) -> str:
    """The peaks and ceilings, a row per variant, the default step by operator, peak RSS."""
    from tabulate import tabulate

    peaks, ceilings, ceiling_mfu = (
        throughput[k] for k in ("gemm_peak_gflops", "matmul_ceiling_gflops", "matmul_ceiling_mfu")
    )
    lines = [
        f"GEMM peak here: fp32 {peaks['fp32']} GFLOP/s, bf16 {peaks['bf16']} GFLOP/s",
        f"the model's own matmuls alone: fp32 {ceilings['fp32']} GFLOP/s ({ceiling_mfu['fp32']:.1%} of peak), "
        f"bf16 {ceilings['bf16']} GFLOP/s ({ceiling_mfu['bf16']:.1%} of peak): the MFU ceiling of this model here",
    ]
    if in_step := throughput["in_step_matmul"]:
        lines.append(
            f"the same matmuls inside the default step (profiled): {in_step['gflops']} GFLOP/s "
            f"({in_step['of_peak']:.1%} of peak), {in_step['ms_per_step']} ms per step"
        )
    variants = throughput["variants"]
    rows = [
        [name, v["tokens_per_s"], v["ratio_to_eager_fp32"], v["gflops"], f"{v['mfu']:.1%} of {v['mfu_of']}",
         v["warmup_s"]]
        for name, v in variants.items()
    ]  # fmt: skip
    headers = ["variant", "tokens/s", "× eager fp32", "GFLOP/s", "MFU", "warm-up s"]
    lines.append(tabulate(rows, headers, tablefmt="github"))
    lines.append("\nwhere the default path's step time goes (torch.profiler, self CPU time):")
    ops = [
        [p["op"][:60], f"{p['share']:.1%}", p["ms_per_step"], p["calls_per_step"]]
        for p in throughput["default_step_profile"]
    ]
    lines.append(tabulate(ops, ["operator", "share", "ms/step", "calls/step"], tablefmt="github"))
    lines.append(f"peak RSS while training: {max(v['peak_rss_mib_so_far'] for v in variants.values()):.1f} MiB")
    return "\n".join(lines)


def format_stage(stage: dict) -> str:
    """Each overhead's seconds and share of the loop's wall time; resume latency, a no-op ``dvc repro``."""
    from tabulate import tabulate

    rows = [[name, stage["seconds"][name], f"{share:.2%}"] for name, share in stage["share_of_loop_wall"].items()]
    rows.append(["all overheads", round(sum(stage["seconds"].values()), 3), f"{stage['overhead_share']:.2%}"])
    return (
        f"\ntrain stage, {stage['steps']} steps (loop {stage['loop_wall_s']} s, {stage['tokens_per_s']} tokens/s):\n"
        + tabulate(rows, ["overhead", "seconds", "share of loop wall"], tablefmt="github")
        + f"\nresume (start to training again): {stage['resume_s']} s; "
        f"dvc repro with nothing changed: {stage['noop_dvc_repro_s']} s"
    )


def format_serving(serving: dict) -> str:
    return (
        f"\nserving ({serving['model']}, {serving['clients']} concurrent clients, {serving['requests']} requests "
        f"of {serving['max_tokens']} tokens, loopback): {serving['requests_per_s']} requests/s, p50 "
        f"{serving['p50_latency_s']} s, p95 {serving['p95_latency_s']} s, {serving['generated_tokens_per_s']} "
        f"generated tokens/s, {serving['errors']} errors"
    )
