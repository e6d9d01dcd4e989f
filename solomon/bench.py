"""Training throughput of the default model in eager fp32, bf16 autocast and torch.compile, measured in one
process one after another, reported as tokens/s and as ratios to eager fp32."""

from __future__ import annotations

import contextlib
import time

import torch

from solomon.model import GPT, GPTConfig
from solomon.params import Params
from solomon.runtime import configure_torch
from solomon.train.data_order import DataOrder
from solomon.train.loop import accumulate_gradients

VARIANTS = {"eager fp32": ("fp32", False), "eager bf16": ("bf16", False), "compiled fp32": ("fp32", True)}


def training_throughput(params: Params, steps: int = 20, warmup: int = 3, vocab_size: int = 8192) -> dict:
    configure_torch(params.train.threads)
    tokens = torch.randint(0, vocab_size, (200_000,), generator=torch.Generator().manual_seed(0)).numpy()
    order = DataOrder(0, len(tokens), params.model.block_size, params.train.batch_size, params.train.accum_steps)
    results = {}
    for name, (precision, compiled) in VARIANTS.items():
        torch.manual_seed(0)
        model = GPT(GPTConfig(vocab_size=vocab_size, **params.model.model_dump()))
        step_model = torch.compile(model) if compiled else model
        optimizer = model.configure_optimizer(1e-4, 0.1, (0.9, 0.95))

        def autocast(precision: str = precision):
            return torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16" else contextlib.nullcontext()

        first_started = time.perf_counter()
        for step in range(warmup + steps):
            if step == warmup:
                started = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            batches = [order.batch(tokens, step, m) for m in range(order.accum_steps)]
            accumulate_gradients(step_model, batches, 0.0, autocast)
            optimizer.step()
        elapsed = time.perf_counter() - started
        results[name] = {
            "tokens_per_s": round(steps * params.train.batch_size * params.model.block_size / elapsed, 1),
            "warmup_s": round(started - first_started, 1),
        }
    base = results["eager fp32"]["tokens_per_s"]
    for result in results.values():
        result["ratio_to_eager_fp32"] = round(result["tokens_per_s"] / base, 3)
    return results
