"""Named random streams derived from one seed, so data order, initialisation, dropout, evaluation and
sampling never share (or disturb) each other's randomness."""

from __future__ import annotations

import hashlib

STREAMS = ("data", "init", "dropout", "eval", "sampling")


def stream_seed(seed: int, stream: str) -> int:
    """A 63-bit seed for ``stream``, a pure function of (seed, stream name)."""
    if stream not in STREAMS:
        raise ValueError(f"unknown random stream {stream!r}; known: {', '.join(STREAMS)}")
    digest = hashlib.sha256(f"solomon:{seed}:{stream}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1
