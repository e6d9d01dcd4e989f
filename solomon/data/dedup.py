"""Exact deduplication by SHA256 in bounded memory per document: 32 bytes of digest each, no text, no Python
object per document.

The digests seen so far are kept as a few sorted NumPy arrays of geometrically falling sizes (a log-structured
merge): a batch is looked up in each with a binary search, and its new digests become a small array that is merged
into the larger ones when it grows to their size, so the total cost stays O(n log n).
"""

from __future__ import annotations

import numpy as np

DIGEST = np.dtype("S32")  # raw SHA256 bytes; NumPy compares fixed-width bytes in full (embedded zeros included)


class DigestSet:
    def __init__(self) -> None:
        self._runs: list[np.ndarray] = []

    def __len__(self) -> int:
        return sum(run.size for run in self._runs)

    @property
    def nbytes(self) -> int:
        return sum(run.nbytes for run in self._runs)

    def add_new(self, digests: np.ndarray) -> np.ndarray:
        """Add a batch of digests; True where a digest is new: not seen before and its first copy in the batch."""
        keep = np.zeros(digests.size, dtype=bool)
        if not digests.size:
            return keep
        unique, first = np.unique(digests, return_index=True)
        seen = np.zeros(unique.size, dtype=bool)
        for run in self._runs:
            at = np.minimum(np.searchsorted(run, unique), run.size - 1)
            seen |= run[at] == unique
        keep[first[~seen]] = True
        self._push(unique[~seen])
        return keep

    def _push(self, new: np.ndarray) -> None:
        if not new.size:
            return
        self._runs.append(new)
        while len(self._runs) > 1 and self._runs[-2].size <= 2 * self._runs[-1].size:
            last = self._runs.pop()
            # both are sorted: a stable sort (timsort) of the two merges them in linear time
            self._runs[-1] = np.sort(np.concatenate([self._runs[-1], last]), kind="stable")
