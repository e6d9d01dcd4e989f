"""Temperature scaling (Guo et al. 2017, "On Calibration of Modern Neural Networks"): one scalar T that divides
the logits, fitted on the val split by NLL and reported on the test split next to the raw figures.

Dividing by T keeps every token's ranking (accuracy is unchanged) and only sharpens (T < 1) or flattens (T > 1) the
distribution. The fit holds the fp32 logits of at most ``FIT_TOKENS`` val targets, spread evenly over the split
(every split's (tokens × vocabulary) logits would not fit in memory), and minimises their mean NLL over log T by
golden-section search: NLL is convex in 1/T, so unimodal in log T, and the search is deterministic.
"""

from __future__ import annotations

import math

import torch

FIT_TOKENS = 8192  # val targets the temperature is fitted on (their logits: 8192 × vocabulary fp32 values)
LOG_T_RANGE = (math.log(0.25), math.log(4.0))  # where T is searched: far beyond any trained model's
LOG_T_TOLERANCE = 1e-3  # T to 0.1 %
_CHUNK = 1024  # rows per cross-entropy call: bounds the temporary (rows × vocabulary) tensors


class TemperatureSample:
    """Keeps every ``stride``-th target (and its logits) over the batches of ``heldout.predictions``, so that at most
    ``FIT_TOKENS`` of a split's ``n_targets`` are kept, from its start to its end."""

    def __init__(self, n_targets: int, fit_tokens: int = FIT_TOKENS) -> None:
        self.stride = max(1, math.ceil(n_targets / fit_tokens))
        self._seen = 0
        self._logits: list[torch.Tensor] = []
        self._targets: list[torch.Tensor] = []

    def add(self, logits: torch.Tensor, targets: torch.Tensor) -> None:
        flat_logits, flat_targets = logits.reshape(-1, logits.size(-1)), targets.reshape(-1)
        first = (-self._seen) % self.stride  # the first row of this batch on the stride
        self._logits.append(flat_logits[first :: self.stride].clone())
        self._targets.append(flat_targets[first :: self.stride].clone())
        self._seen += len(flat_targets)

    def fit(self) -> tuple[float, int]:
        """(T, the number of targets it was fitted on)."""
        logits, targets = torch.cat(self._logits), torch.cat(self._targets)
        return fit_temperature(logits, targets), len(targets)


def mean_nll(logits: torch.Tensor, targets: torch.Tensor, temperature: float) -> float:
    """Mean NLL (nats) of ``targets`` under softmax(``logits`` / ``temperature``); rows (N, V), targets (N,)."""
    total = 0.0
    for start in range(0, len(targets), _CHUNK):
        chunk = logits[start : start + _CHUNK] / temperature
        total += float(torch.nn.functional.cross_entropy(chunk, targets[start : start + _CHUNK], reduction="sum"))
    return total / len(targets)


def fit_temperature(logits: torch.Tensor, targets: torch.Tensor) -> float:
    """The T in ``LOG_T_RANGE`` minimising the mean NLL of softmax(logits / T), by golden-section search on log T."""
    inverse_phi = (math.sqrt(5) - 1) / 2
    low, high = LOG_T_RANGE
    a, b = high - inverse_phi * (high - low), low + inverse_phi * (high - low)
    nll_a, nll_b = mean_nll(logits, targets, math.exp(a)), mean_nll(logits, targets, math.exp(b))
    while high - low > LOG_T_TOLERANCE:
        if nll_a <= nll_b:
            high, b, nll_b = b, a, nll_a
            a = high - inverse_phi * (high - low)
            nll_a = mean_nll(logits, targets, math.exp(a))
        else:
            low, a, nll_a = a, b, nll_b
            b = low + inverse_phi * (high - low)
            nll_b = mean_nll(logits, targets, math.exp(b))
    return math.exp((low + high) / 2)
