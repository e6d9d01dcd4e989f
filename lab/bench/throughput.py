"""The default model's training throughput here: tokens/s, GFLOP/s and MFU per variant, the step by
operator, and the matmuls' own ceiling (``make bench`` part 2)."""

import resource
import time
from collections.abc import Callable

import torch

from lab.bench import NOT_NATIVE
from solomon.machine import best_gflops, bf16_matmul_native, gemm_peaks, matmul_flops
from solomon.model.gpt import GPT, GPTConfig
from solomon.params import Params
from solomon.runtime import configure_torch
from solomon.train.data_order import DataOrder
from solomon.train.optimizer import build_optimizer
from solomon.train.precision import autocast_for, resolve
from solomon.train.step import train_step

# name: (train.precision, train.compile, train.optimizer). Muon's Newton-Schulz matmuls are optimiser work, not
# model FLOPs: its variant's MFU counts the model's FLOPs only, so the time they take shows as a lower MFU.
VARIANTS = {
    "eager fp32": ("fp32", False, "adamw"),
    "eager bf16": ("bf16", False, "adamw"),
    "eager bf16 muon": ("bf16", False, "muon"),
    "eager fp32 muon": ("fp32", False, "muon"),
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
    params: Params,
    steps: int = 20,
    warmup: int = 3,
    vocab_size: int = 8192,
    compile_variant: bool = True,
    bf16_native: bool | None = None,
) -> dict:
    """Every variant's figures (``bf16_native``: whether bf16 matmuls run natively, None: this CPU's; where they
    do not, the variants that compute in bf16 are not measured, with the reason)."""
    configure_torch(params.train.threads, compiled=compile_variant)
    peaks = gemm_peaks(*BENCH_GEMM)
    config = GPTConfig.from_params(params.model, vocab_size)
    tokens = torch.randint(0, vocab_size, (200_000,), generator=torch.Generator().manual_seed(0)).numpy()
    order = DataOrder(0, len(tokens), params.model.block_size, params.train.batch_size, params.train.accum_steps)
    tokens_per_step = params.train.batch_size * params.model.block_size
    results = {}
    profile: list[dict] = []  # stays empty when the default variant is not measured (compile with --skip-compile)
    matmul_ms_per_step = None
    native = bf16_matmul_native() if bf16_native is None else bf16_native
    # the default path: params.yaml's precision as such a CPU resolves it
    default_precision = resolve(
        params.train.precision, params.train.portable, {"bf16_matmul": "native" if native else "fallback"}
    )
    for name, (precision, compiled, optimizer_name) in VARIANTS.items():
        if compiled and not compile_variant:
            continue
        if not native and precision == "bf16":
            results[name] = {"not_measured": NOT_NATIVE, "optimizer": optimizer_name}
            continue
        torch.manual_seed(0)
        model = GPT(config)
        step_model = torch.compile(model) if compiled else model
        optimizer = build_optimizer(
            model, params.train.model_copy(update={"optimizer": optimizer_name}), 1e-4, precision
        )

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
        if (precision, compiled, optimizer_name) == (default_precision, cfg.compile, cfg.optimizer):
            # the default path: where its step time goes, and how fast its matmuls run inside a real step
            profile, matmul_ms_per_step = step_profile(one_step, warmup + steps)
    # after the variants, so that their peak RSS is training's alone
    micro_batch_tokens = tokens_per_step // params.train.accum_steps
    ceilings = {
        name: matmul_ceiling_gflops(config, micro_batch_tokens, dtype)
        for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16))
        if native or name == "fp32"
    }
    in_step = None
    if matmul_ms_per_step:
        flops = matmul_flops(model_matmul_shapes(config, micro_batch_tokens)) * params.train.accum_steps
        gflops = flops / (matmul_ms_per_step / 1000) / 1e9
        peak = peaks[default_precision]
        in_step = {"gflops": round(gflops, 1), "of_peak": round(gflops / peak, 3), "ms_per_step": matmul_ms_per_step}
    base = results["eager fp32"]["tokens_per_s"]
    for result in results.values():
        if "tokens_per_s" in result:
            result["ratio_to_eager_fp32"] = round(result["tokens_per_s"] / base, 3)
    return {
        "gemm_peak_gflops": peaks,
        # the model's own matmul shapes: the MFU that a step of nothing but its matmuls would reach
        "matmul_ceiling_gflops": {k: round(v, 1) for k, v in ceilings.items()},
        "matmul_ceiling_mfu": {k: round(ceilings[k] / peaks[k], 3) for k in ceilings},
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
