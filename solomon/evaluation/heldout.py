"""Scoring a model on held-out tokens: loss, perplexity, bits per byte and next-token accuracy.

Shared by the training loop's periodic evaluation and the evaluate stage, and kept apart from the stage's own
module so that what the stage adds to its report (calibration) does not make DVC retrain.

Each split is cut into consecutive windows of ``block_size`` + 1 tokens that overlap by one, so every token
after the first is predicted exactly once. A subset of the split (the training loop's ``train.eval_tokens``) is
windows spread evenly from its start to its end (``spread_windows``): the split's first tokens alone are one stretch
of the corpus, not a sample of it, and scores apart from the whole split (by how much:
``git show b984a43d:docs/full-scale.md``).
Bits per byte divides the summed loss (in bits) by the UTF-8 bytes of the predicted tokens, which makes it
comparable across tokenizers.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import torch

from solomon.errors import SolomonError
from solomon.model.gpt import GPT


def _windows(n_tokens: int, block_size: int) -> list[tuple[int, int]]:
    """(start, length) of input windows; the targets are the same span shifted by one token."""
    return [(start, min(block_size, n_tokens - 1 - start)) for start in range(0, n_tokens - 1, block_size)]


def spread_windows(n_tokens: int, block_size: int, total: int) -> list[tuple[int, int]]:
    """(start, length) of windows of ``total`` targets in all (full windows, then the remainder) spread over a split
    of ``n_tokens``: the first starts at its start, the last ends at its end, the gaps between them even. A pure
    function of its arguments: the same subset at every evaluation of a run, and of its resumed run."""
    if total >= n_tokens - 1:
        return _windows(n_tokens, block_size)
    lengths = [block_size] * (total // block_size) + ([total % block_size] if total % block_size else [])
    slack, gaps = n_tokens - 1 - total, max(len(lengths) - 1, 1)
    return [(sum(lengths[:i]) + i * slack // gaps, length) for i, length in enumerate(lengths)]


@torch.no_grad()
def predictions(
    model: GPT, tokens: np.ndarray, batch_size: int, max_tokens: int | None, spread: bool = False
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """(fp32 logits, targets) batch by batch, every token after the first a target once — or ``max_tokens`` of them:
    the first ones, or with ``spread`` windows spread over the whole split (``spread_windows``)."""
    n_tokens = len(tokens) if max_tokens is None or spread else min(len(tokens), max_tokens + 1)
    if n_tokens < 2:
        raise SolomonError("a split to evaluate has fewer than 2 tokens: use a larger corpus or split fraction")
    block = model.config.block_size
    windows = spread_windows(n_tokens, block, max_tokens) if spread and max_tokens else _windows(n_tokens, block)
    # Full-length windows go in batches; the shorter last window (if any) forms its own batch.
    full = [w for w in windows if w[1] == model.config.block_size]
    groups = [full[i : i + batch_size] for i in range(0, len(full), batch_size)]
    groups += [[w] for w in windows if w[1] != model.config.block_size]
    for group in groups:
        span = np.stack([tokens[s : s + length + 1] for s, length in group]).astype(np.int64)
        yield model(torch.from_numpy(span[:, :-1])).float(), torch.from_numpy(span[:, 1:])


class HeldOutScore:
    """Running sums of loss, bytes and correct top-1 predictions over the batches of ``predictions``."""

    def __init__(self, byte_lengths: np.ndarray) -> None:
        self.byte_lengths = byte_lengths
        self.nll_nats = 0.0
        self.correct = self.predicted = self.n_bytes = 0

    def add(self, logits: torch.Tensor, targets: torch.Tensor) -> None:
        nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), targets, reduction="sum")
        self.nll_nats += float(nll)
        self.correct += int((logits.argmax(dim=-1) == targets).sum())
        self.predicted += targets.numel()
        self.n_bytes += int(self.byte_lengths[targets.numpy()].sum())

    def result(self) -> dict:
        loss = self.nll_nats / self.predicted
        return {
            "loss": round(loss, 6),
            "perplexity": round(math.exp(loss), 4),
            "bits_per_byte": round(self.nll_nats / math.log(2) / self.n_bytes, 6),
            "accuracy": round(self.correct / self.predicted, 6),
            "tokens": self.predicted,
            "bytes": self.n_bytes,
        }


def evaluate_tokens(
    model: GPT,
    tokens: np.ndarray,
    byte_lengths: np.ndarray,
    batch_size: int,
    max_tokens: int | None,
    spread: bool = False,
) -> dict:
    score = HeldOutScore(byte_lengths)
    for logits, targets in predictions(model, tokens, batch_size, max_tokens, spread):
        score.add(logits, targets)
    return score.result()
