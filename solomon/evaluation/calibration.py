"""Calibration of the next-token prediction: does a top-1 probability of 0.3 come true 30 % of the time?

For every predicted token we keep the model's top-1 probability (its *confidence*) and whether that token was
the target. Tokens are sorted by confidence and cut into ``n_bins`` bins of equal size (equal-mass binning,
Nixon et al. 2019, "Measuring Calibration in Deep Learning"): a language model's confidences crowd into the low
range, so equal-width bins would leave the upper bins with a handful of tokens each, and their gaps (which the
maximum calibration error reads) would be noise.

- ECE (expected calibration error) = Σ_b (n_b / N) · |accuracy_b − mean confidence_b|
- MCE (maximum calibration error) = max_b |accuracy_b − mean confidence_b|
- the reliability diagram: mean confidence (x) against accuracy (y) per bin; the diagonal is perfect calibration,
  points below it are overconfidence.
"""

from __future__ import annotations

import numpy as np
import torch

from solomon.errors import SolomonError


class ReliabilityBins:
    """Collects (confidence, correct) of each predicted token over the batches of ``heldout.predictions``."""

    def __init__(self) -> None:
        self._confidence: list[np.ndarray] = []
        self._correct: list[np.ndarray] = []

    def add(self, logits: torch.Tensor, targets: torch.Tensor) -> None:
        # The top-1 probability as exp(top logit − logsumexp): no (tokens × vocabulary) softmax is materialised.
        top = logits.max(dim=-1)
        confidence = torch.exp((top.values - torch.logsumexp(logits, dim=-1)).double())
        predicted = top.indices
        self._confidence.append(confidence.flatten().numpy())
        self._correct.append((predicted == targets).flatten().numpy())

    def bins(self, n_bins: int) -> list[dict]:
        """One record per bin, lowest confidence first: its confidence range, mean confidence, accuracy and size."""
        confidence = np.concatenate(self._confidence) if self._confidence else np.empty(0)
        if len(confidence) < n_bins:
            raise SolomonError(
                f"eval.calibration_bins is {n_bins} but the split has {len(confidence)} predicted tokens: "
                "lower eval.calibration_bins or raise eval.max_tokens"
            )
        correct = np.concatenate(self._correct)
        order = np.argsort(confidence, kind="stable")
        records = []
        for index, members in enumerate(np.array_split(order, n_bins)):
            records.append(
                {
                    "bin": index,
                    "confidence_low": round(float(confidence[members].min()), 6),
                    "confidence_high": round(float(confidence[members].max()), 6),
                    "confidence": round(float(confidence[members].mean()), 6),
                    "accuracy": round(float(correct[members].mean()), 6),
                    "tokens": len(members),
                }
            )
        return records


def calibration_errors(bins: list[dict]) -> dict:
    """ECE and MCE of a reliability table (``ReliabilityBins.bins``)."""
    total = sum(b["tokens"] for b in bins)
    gaps = [abs(b["accuracy"] - b["confidence"]) for b in bins]
    return {
        "ece": round(sum(b["tokens"] / total * gap for b, gap in zip(bins, gaps, strict=True)), 6),
        "mce": round(max(gaps), 6),
    }
