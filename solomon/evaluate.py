"""Held-out evaluation: loss, perplexity, bits per byte and next-token accuracy on the val and test splits.

Each split is cut into consecutive windows of ``block_size`` + 1 tokens that overlap by one, so every token
after the first is predicted exactly once. Bits per byte divides the summed loss (in bits) by the UTF-8 bytes
of the predicted tokens, which makes it comparable across tokenizers.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from solomon import weights
from solomon.atomic import write_json
from solomon.errors import SolomonError
from solomon.model import GPT
from solomon.params import EvalParams
from solomon.runtime import configure_torch
from solomon.tokenizer import load_tokenizer, open_tokens, token_byte_lengths

EVAL_SPLITS = ("val", "test")


def _windows(n_tokens: int, block_size: int) -> list[tuple[int, int]]:
    """(start, length) of input windows; the targets are the same span shifted by one token."""
    return [(start, min(block_size, n_tokens - 1 - start)) for start in range(0, n_tokens - 1, block_size)]


@torch.no_grad()
def evaluate_tokens(
    model: GPT, tokens: np.ndarray, byte_lengths: np.ndarray, batch_size: int, max_tokens: int | None
) -> dict:
    n_tokens = len(tokens) if max_tokens is None else min(len(tokens), max_tokens + 1)
    if n_tokens < 2:
        raise SolomonError("a split to evaluate has fewer than 2 tokens: use a larger corpus or split fraction")
    windows = _windows(n_tokens, model.config.block_size)
    nll_nats = 0.0
    correct = predicted = n_bytes = 0
    # Full-length windows go in batches; the shorter last window (if any) forms its own batch.
    full = [w for w in windows if w[1] == model.config.block_size]
    groups = [full[i : i + batch_size] for i in range(0, len(full), batch_size)]
    groups += [[w] for w in windows if w[1] != model.config.block_size]
    for group in groups:
        span = np.stack([tokens[s : s + length + 1] for s, length in group]).astype(np.int64)
        inputs, targets = torch.from_numpy(span[:, :-1]), torch.from_numpy(span[:, 1:])
        logits = model(inputs).float()
        nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), targets, reduction="sum")
        nll_nats += float(nll)
        correct += int((logits.argmax(dim=-1) == targets).sum())
        predicted += targets.numel()
        n_bytes += int(byte_lengths[span[:, 1:]].sum())
    loss = nll_nats / predicted
    return {
        "loss": round(loss, 6),
        "perplexity": round(math.exp(loss), 4),
        "bits_per_byte": round(nll_nats / math.log(2) / n_bytes, 6),
        "accuracy": round(correct / predicted, 6),
        "tokens": predicted,
        "bytes": n_bytes,
    }


def evaluate(params: EvalParams, model_dir: Path, tokens_dir: Path, tokenizer_path: Path, out: Path) -> dict:
    configure_torch(params.threads)
    model = weights.load(model_dir)
    byte_lengths = token_byte_lengths(load_tokenizer(tokenizer_path))
    if len(byte_lengths) != model.config.vocab_size:
        raise SolomonError(
            f"tokenizer has {len(byte_lengths)} tokens but the model expects {model.config.vocab_size}: "
            "retrain with `dvc repro`"
        )
    metrics = {
        split: evaluate_tokens(
            model, open_tokens(tokens_dir, split), byte_lengths, params.batch_size, params.max_tokens
        )
        for split in EVAL_SPLITS
    }
    write_json(out, metrics)
    return metrics
