"""Byte-level BPE (Hugging Face ``tokenizers``) trained on the train split, and split encoding to memmaps.

Each split becomes ``<split>.bin``: the documents' token ids, each document followed by the end-of-document
token, as a flat little-endian array (uint16 when the vocabulary fits) that ``numpy.memmap`` opens directly.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from solomon.atomic import staged_dir, write_json, write_text
from solomon.data.corpus import SPLITS, read_split
from solomon.params import TokenizerParams

META_FILE = "meta.json"


def train_tokenizer(texts: list[str], params: TokenizerParams) -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=params.vocab_size,
        min_frequency=params.min_frequency,
        special_tokens=[params.eod_token],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer, length=len(texts))
    return tokenizer


def load_tokenizer(path: Path) -> Tokenizer:
    return Tokenizer.from_file(str(path))


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype("<u2") if vocab_size <= 2**16 else np.dtype("<u4")


def encode_documents(tokenizer: Tokenizer, texts: list[str], eod_id: int, dtype: np.dtype) -> np.ndarray:
    encoded = tokenizer.encode_batch(texts, add_special_tokens=False)
    pieces = [np.append(np.asarray(e.ids, dtype=np.int64), eod_id) for e in encoded]
    flat = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64)
    return flat.astype(dtype)


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


def build(corpus_dir: Path, params: TokenizerParams, tokenizer_path: Path, tokens_dir: Path) -> dict:
    """Train on the train split, encode every split, write tokenizer JSON and the token directory."""
    docs = {split: read_split(corpus_dir, split) for split in SPLITS}
    tokenizer = train_tokenizer([d["text"] for d in docs["train"]], params)
    eod_id = tokenizer.token_to_id(params.eod_token)
    dtype = token_dtype(tokenizer.get_vocab_size())
    meta: dict = {
        "dtype": dtype.str,
        "vocab_size": tokenizer.get_vocab_size(),
        "eod_token": params.eod_token,
        "eod_id": eod_id,
        "splits": {},
    }
    with staged_dir(tokens_dir) as tmp:
        for split in SPLITS:
            texts = [d["text"] for d in docs[split]]
            ids = encode_documents(tokenizer, texts, eod_id, dtype)
            ids.tofile(tmp / f"{split}.bin")
            n_bytes = sum(len(t.encode("utf-8")) for t in texts)
            meta["splits"][split] = {
                "documents": len(texts),
                "bytes": n_bytes,
                "tokens": int(ids.size),
                "bytes_per_token": round(n_bytes / ids.size, 4) if ids.size else None,
            }
        write_json(tmp / META_FILE, meta)
        write_text(tokenizer_path, tokenizer.to_str(pretty=True) + "\n")
    return meta


def read_meta(tokens_dir: Path) -> dict:
    return json.loads((tokens_dir / META_FILE).read_text(encoding="utf-8"))


def open_tokens(tokens_dir: Path, split: str) -> np.ndarray:
    meta = read_meta(tokens_dir)
    path = tokens_dir / f"{split}.bin"
    if path.stat().st_size == 0:
        return np.zeros(0, dtype=np.dtype(meta["dtype"]))
    return np.memmap(path, dtype=np.dtype(meta["dtype"]), mode="r")
