"""The training loop. Reads top to bottom: set up, then one optimiser step per iteration, then save.

Every step appends a row to the TSV log (step, tokens, loss, lr, grad_norm, tokens_per_s); the model is
written as safetensors at the end. Exact resume from checkpoints is the next layer on top of this loop.
"""

from __future__ import annotations

import csv
import math
import time
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from solomon import weights
from solomon.atomic import write_json, write_with
from solomon.errors import SolomonError
from solomon.model import GPT, GPTConfig, cross_entropy
from solomon.params import Params
from solomon.runtime import configure_torch
from solomon.tokenizer import open_tokens, read_meta
from solomon.train.data_order import DataOrder
from solomon.train.rng import stream_seed
from solomon.train.schedule import NoamSchedule

LOG_COLUMNS = ("step", "tokens", "loss", "lr", "grad_norm", "tokens_per_s")


def build_model(params: Params, vocab_size: int) -> GPT:
    config = GPTConfig(vocab_size=vocab_size, **params.model.model_dump())
    torch.manual_seed(stream_seed(params.train.seed, "init"))
    return GPT(config)


def train(params: Params, tokens_dir: Path, model_dir: Path, log_path: Path, metrics_path: Path) -> dict:
    configure_torch(params.train.threads)
    tokens = open_tokens(tokens_dir, "train")
    model = build_model(params, read_meta(tokens_dir)["vocab_size"])
    torch.manual_seed(stream_seed(params.train.seed, "dropout"))
    cfg = params.train
    data_order = DataOrder(stream_seed(cfg.seed, "data"), len(tokens), params.model.block_size, cfg.batch_size)
    schedule = NoamSchedule(params.lr)
    optimizer = model.configure_optimizer(schedule.lr(0), cfg.weight_decay, (cfg.beta1, cfg.beta2))
    max_norm = cfg.grad_clip if cfg.grad_clip > 0 else math.inf
    tokens_per_step = cfg.batch_size * params.model.block_size

    rows: list[dict] = []
    model.train()
    started = time.perf_counter()
    progress = tqdm(range(cfg.max_steps), desc="train", unit="step", mininterval=2.0)
    for step in progress:
        step_started = time.perf_counter()
        lr = schedule.lr(step)
        for group in optimizer.param_groups:
            group["lr"] = lr
        inputs, targets = data_order.batch(tokens, step)
        loss = cross_entropy(model(inputs), targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        optimizer.step()

        loss_value = loss.item()
        if not math.isfinite(loss_value):
            raise SolomonError(f"loss became {loss_value} at step {step + 1}: lower lr.peak or raise lr.warmup")
        rows.append(
            {
                "step": step + 1,
                "tokens": (step + 1) * tokens_per_step,
                "loss": loss_value,
                "lr": lr,
                "grad_norm": grad_norm.item(),
                "tokens_per_s": tokens_per_step / (time.perf_counter() - step_started),
            }
        )
        progress.set_postfix(loss=f"{loss_value:.3f}", lr=f"{lr:.2e}", refresh=False)
    elapsed = time.perf_counter() - started

    weights.save(model, model_dir)
    write_log(log_path, rows)
    tail = [r["loss"] for r in rows[-max(1, len(rows) // 10) :]]
    metrics = {
        "steps": cfg.max_steps,
        "tokens": cfg.max_steps * tokens_per_step,
        "final_loss": round(float(np.mean(tail)), 6),
        "parameters": model.num_params(non_embedding=False),
        "wall_s": round(elapsed, 2),
        "tokens_per_s": round(cfg.max_steps * tokens_per_step / elapsed, 1),
    }
    write_json(metrics_path, metrics)
    return metrics


def write_log(path: Path, rows: list[dict]) -> None:
    def writer(tmp: Path) -> None:
        with open(tmp, "w", newline="", encoding="utf-8") as handle:
            out = csv.DictWriter(handle, fieldnames=LOG_COLUMNS, delimiter="\t", lineterminator="\n")
            out.writeheader()
            for row in rows:
                out.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in row.items()})

    write_with(path, writer)


def read_log(path: Path) -> list[dict]:
    with open(path, encoding="utf-8", newline="") as handle:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(handle, delimiter="\t")]
