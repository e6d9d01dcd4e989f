"""The token files and the tokenizer as the later stages read them: ``<split>.bin`` opened as a memory map (any size),
``meta.json``, the tokenizer JSON, and the bytes each token stands for. What training, evaluation and serving import
of the data floor, so they never import the corpus readers.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

META_FILE = "meta.json"


def load_tokenizer(path: Path) -> Tokenizer:
    return Tokenizer.from_file(str(path))


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype("<u2") if vocab_size <= 2**16 else np.dtype("<u4")


@cache
def _byte_level_decoder() -> dict[str, int]:
    """The inverse of GPT-2's bytes→unicode table that byte-level BPE uses for its token strings."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {b: b for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = 256 + extra
            extra += 1
    return {chr(code): byte for byte, code in table.items()}


def token_byte_lengths(tokenizer: Tokenizer) -> np.ndarray:
    """UTF-8 bytes of text each token id stands for (special tokens: 0), for bits-per-byte."""
    decoder = _byte_level_decoder()
    special = {t.content for t in tokenizer.get_added_tokens_decoder().values()}
    lengths = np.zeros(tokenizer.get_vocab_size(), dtype=np.int64)
    for token, index in tokenizer.get_vocab().items():
        lengths[index] = 0 if token in special else sum(1 for ch in token if ch in decoder)
    return lengths


def read_meta(tokens_dir: Path) -> dict:
    return json.loads((tokens_dir / META_FILE).read_text(encoding="utf-8"))


def open_tokens(tokens_dir: Path, split: str) -> np.ndarray:
    meta = read_meta(tokens_dir)
    path = tokens_dir / f"{split}.bin"
    if path.stat().st_size == 0:
        return np.zeros(0, dtype=np.dtype(meta["dtype"]))
    return np.memmap(path, dtype=np.dtype(meta["dtype"]), mode="r")
