"""Evaluation arithmetic: every token after the first predicted once; bits per byte from true byte lengths;
calibration (equal-mass bins, ECE, MCE) by hand and on synthetic predictors."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from solomon.data.tokenizer import train_tokenizer
from solomon.data.tokens import token_byte_lengths
from solomon.errors import SolomonError
from solomon.evaluation.calibration import ReliabilityBins, calibration_errors
from solomon.evaluation.heldout import HeldOutScore, _windows, evaluate_tokens, predictions, spread_windows
from solomon.evaluation.temperature import TemperatureSample, fit_temperature
from solomon.model.gpt import GPT, GPTConfig
from solomon.params import TokenizerParams


def test_windows_cover_each_target_once() -> None:
    for n in (2, 17, 64, 65, 100):
        covered = [s + 1 + i for s, length in _windows(n, 16) for i in range(length)]
        assert covered == list(range(1, n))


def test_the_validation_subset_is_spread_over_the_whole_split() -> None:
    """train.eval_tokens targets from windows across the split (its first tokens alone are biased), not overlapping,
    and the same at every evaluation (a pure function of the split's length, block size and subset size)."""
    for n, block, total in ((100_000, 64, 8192), (10_001, 64, 1000), (1000, 64, 256), (500, 64, 499)):
        windows = spread_windows(n, block, total)
        assert windows == spread_windows(n, block, total)
        targets = [s + 1 + i for s, length in windows for i in range(length)]
        assert len(targets) == len(set(targets)) == min(total, n - 1)
        assert min(targets) == 1 and max(targets) == n - 1  # from the first quarter to the last
        assert sum(t > 3 * n / 4 for t in targets) >= total // 8
    tokens = np.random.default_rng(0).integers(0, 20, size=1000).astype(np.uint16)
    model = GPT(GPTConfig(vocab_size=20, block_size=8, n_layer=1, n_head=2, n_embd=16)).eval()
    targets = torch.cat([t.flatten() for _, t in predictions(model, tokens, 4, 100, spread=True)])
    first = torch.cat([t.flatten() for _, t in predictions(model, tokens, 4, 100)])
    assert len(targets) == len(first) == 100 and not torch.equal(targets, first)


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


def _two_class_logits(confidences: list[float]) -> torch.Tensor:
    """Logits over 2 classes whose top-1 (class 0) probability is each given confidence."""
    p = torch.tensor(confidences, dtype=torch.float64)
    return torch.stack([p.log(), (1 - p).log()], dim=-1).float()[None]


def test_reliability_bins_and_calibration_errors_by_hand() -> None:
    bins = ReliabilityBins()
    # 4 tokens at confidence 0.6, half right; 4 at 0.9, all right: gaps 0.1 and 0.1 → ECE 0.1, MCE 0.1.
    bins.add(_two_class_logits([0.6] * 4), torch.tensor([[0, 1, 0, 1]]))
    bins.add(_two_class_logits([0.9] * 4), torch.tensor([[0, 0, 0, 0]]))
    table = bins.bins(2)
    assert [(b["tokens"], b["confidence"], b["accuracy"]) for b in table] == [(4, 0.6, 0.5), (4, 0.9, 1.0)]
    assert calibration_errors(table) == {"ece": 0.1, "mce": 0.1}
    # Overconfidence in one bin only: ECE weighs it by its share, MCE takes it whole.
    bins = ReliabilityBins()
    bins.add(_two_class_logits([0.6] * 6 + [0.9] * 2), torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1]]))
    table = bins.bins(2)
    # Equal mass: the upper bin mixes two 0.6 tokens with the two 0.9 ones (mean confidence 0.75).
    assert [(b["confidence"], b["accuracy"]) for b in table] == [(0.6, 0.75), (0.75, 0.0)]
    assert calibration_errors(table) == {"ece": 0.5 * 0.15 + 0.5 * 0.75, "mce": 0.75}
    with pytest.raises(SolomonError, match=r"eval\.calibration_bins is 9 but the split has 8 predicted tokens"):
        bins.bins(9)


def test_ece_is_small_for_a_calibrated_predictor_and_large_for_an_overconfident_one() -> None:
    generator = torch.Generator().manual_seed(0)
    confidence = 0.5 + 0.5 * torch.rand(200_000, generator=generator, dtype=torch.float64)
    draws = torch.rand(200_000, generator=generator, dtype=torch.float64)
    logits = _two_class_logits(confidence.tolist())
    calibrated, overconfident = ReliabilityBins(), ReliabilityBins()
    calibrated.add(logits, (draws >= confidence).long()[None])  # class 0 comes true with probability p
    overconfident.add(logits, (draws >= confidence**3).long()[None])  # ... with p³ < p
    assert calibration_errors(calibrated.bins(15))["ece"] < 0.005
    assert calibration_errors(overconfident.bins(15))["ece"] > 0.1


@pytest.mark.parametrize("k", [0.6, 1.0, 1.8])
def test_the_fitted_temperature_recovers_a_known_one(k: float) -> None:
    """Labels drawn from softmax(base) and logits k·base: the T that calibrates them is k, whatever the sample."""
    generator = torch.Generator().manual_seed(0)
    base = 2 * torch.randn(6000, 200, generator=generator)
    targets = torch.multinomial(torch.softmax(base, dim=-1), 1, generator=generator).squeeze(1)
    sample = TemperatureSample(n_targets=6000, fit_tokens=3000)  # every other target, over three batches
    for rows in torch.split(torch.arange(6000), 2000):
        sample.add((k * base)[rows][None], targets[rows][None])
    temperature, fitted_on = sample.fit()
    assert fitted_on == 3000 and temperature == pytest.approx(k, rel=0.03)
    assert fit_temperature(k * base, targets) == pytest.approx(k, rel=0.03)
    assert sample.fit()[0] == temperature  # deterministic


def test_equal_mass_bins_on_a_model_agree_with_its_accuracy() -> None:
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=20, block_size=8, n_layer=1, n_head=2, n_embd=16)).eval()
    tokens = np.random.default_rng(1).integers(0, 20, size=200).astype(np.uint16)
    score, bins = HeldOutScore(np.ones(20, dtype=np.int64)), ReliabilityBins()
    for logits, targets in predictions(model, tokens, batch_size=4, max_tokens=None):
        score.add(logits, targets)
        bins.add(logits, targets)
    table = bins.bins(15)
    assert sum(b["tokens"] for b in table) == 199 and {b["tokens"] for b in table} <= {13, 14}
    assert all(b["confidence_low"] <= b["confidence"] <= b["confidence_high"] for b in table)
    assert all(a["confidence_high"] <= b["confidence_low"] for a, b in itertools.pairwise(table))
    correct = sum(round(b["accuracy"] * b["tokens"]) for b in table)
    assert correct / 199 == pytest.approx(score.result()["accuracy"], abs=1e-6)
