"""One optimiser step, shared by the training loop and ``python -m lab bench`` (so the benchmark times the real step).

``accumulate_gradients`` backpropagates a step's micro-batches; ``train_step`` adds the learning rate, gradient
clipping and the update around it.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable

import torch

from solomon.model.gpt import GPT
from solomon.train.optimizer import Optimizer


def accumulate_gradients(
    model: torch.nn.Module,
    micro_batches: list[tuple[torch.Tensor, torch.Tensor]],
    label_smoothing: float,
    autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
    before_micro_batch: Callable[[int], None] = lambda index: None,
) -> float:
    """Backpropagate one optimiser step's micro-batches; return the step's mean loss per target token.

    Token-weighted: each micro-batch's summed loss is divided by the target count of the whole step, so k
    micro-batches give the gradient of one batch k times larger, even when they hold different token counts.
    Under DistributedDataParallel the gradients are all-reduced once, with the last micro-batch's backward
    (every rank holds the same number of targets, so DDP's mean over ranks completes the global mean).
    """
    n_targets = sum(targets.numel() for _, targets in micro_batches)
    total = 0.0
    for index, (inputs, targets) in enumerate(micro_batches):
        before_micro_batch(index)
        last = index == len(micro_batches) - 1
        sync = model.no_sync() if hasattr(model, "no_sync") and not last else contextlib.nullcontext()
        with sync:
            with autocast():
                loss = model(inputs, targets, label_smoothing) / n_targets
            loss.backward()
        total += loss.item()
    return total


def train_step(
    model: GPT,
    step_model: torch.nn.Module,
    optimizer: Optimizer,
    micro_batches: list[tuple[torch.Tensor, torch.Tensor]],
    lr: float,
    label_smoothing: float,
    clip: float,
    autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
    before_micro_batch: Callable[[int], None] = lambda index: None,
) -> tuple[float, float]:
    """One update of ``model`` (through ``step_model``, its DDP or compiled wrapper); returns this process's
    mean loss and the gradient norm before clipping (``clip`` 0: no clipping, the norm is still measured)."""
    for group in optimizer.param_groups:
        group["lr"] = lr
    optimizer.zero_grad(set_to_none=True)
    loss = accumulate_gradients(step_model, micro_batches, label_smoothing, autocast, before_micro_batch)
    max_norm = clip if clip > 0 else math.inf
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm).item()
    optimizer.step()
    return loss, grad_norm
