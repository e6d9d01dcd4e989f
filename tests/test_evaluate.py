"""Evaluation arithmetic: every token after the first predicted once; bits per byte from true byte lengths."""

from __future__ import annotations

import math

import numpy as np
import torch

from solomon.heldout import _windows, evaluate_tokens
from solomon.model import GPT, GPTConfig
from solomon.params import TokenizerParams
from solomon.tokenizer import token_byte_lengths, train_tokenizer


def test_windows_cover_each_target_once() -> None:
    for n in (2, 17, 64, 65, 100):
        covered = [s + 1 + i for s, length in _windows(n, 16) for i in range(length)]
        assert covered == list(range(1, n))


def test_metrics_match_a_direct_computation() -> None:
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=20, block_size=8, n_layer=1, n_head=2, n_embd=16)).eval()
    tokens = np.random.default_rng(0).integers(0, 20, size=30).astype(np.uint16)
    byte_lengths = np.arange(20) % 3 + 1
    result = evaluate_tokens(model, tokens, byte_lengths, batch_size=2, max_tokens=None)
    nll = 0.0
    with torch.no_grad():
        for start, length in _windows(30, 8):
            x = torch.tensor(tokens[start : start + length], dtype=torch.long)[None]
            y = torch.tensor(tokens[start + 1 : start + length + 1], dtype=torch.long)
            nll += float(torch.nn.functional.cross_entropy(model(x)[0], y, reduction="sum"))
    assert result["tokens"] == 29
    assert result["loss"] == round(nll / 29, 6)
    assert result["bytes"] == int(byte_lengths[tokens[1:]].sum())
    assert result["bits_per_byte"] == round(nll / math.log(2) / result["bytes"], 6)


def test_token_byte_lengths_sum_to_text_bytes() -> None:
    text = ["Héllo wörld, the LORD said — ünïcode ok.", "And it was so."] * 20
    tokenizer = train_tokenizer(text, TokenizerParams(vocab_size=300, min_frequency=1))
    lengths = token_byte_lengths(tokenizer)
    for line in text[:2]:
        ids = tokenizer.encode(line).ids
        assert int(lengths[ids].sum()) == len(line.encode("utf-8"))
    assert lengths[tokenizer.token_to_id("<|endoftext|>")] == 0
