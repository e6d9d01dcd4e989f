"""Byte-level BPE (Hugging Face ``tokenizers``) trained on a bounded sample of the train split, and every split
encoded to flat token files, a row group at a time on every core.

The sample is the train documents in the order of their SHA256, up to the first that would pass
``tokenizer.sample_bytes`` (a document larger than the whole budget is passed over): it depends on which
documents there are, never on how they are stored or read. (The BPE trainer's result does not depend on the order
it is fed: tests/test_tokenizer_sample.py.)

Each split becomes ``<split>.bin``: the documents' token ids, each document followed by the end-of-document token,
as a flat little-endian array (uint16 when the vocabulary fits) that ``numpy.memmap`` opens directly. It is
appended to as row groups are encoded, in their order, so its bytes do not depend on the number of workers.
A document's text is encoded as text: the end-of-document marker written inside it is not the marker.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from functools import cache, partial
from itertools import chain
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from solomon.atomic import no_crash, staged_dir, write_json, write_text
from solomon.data.corpus import SPLITS, row_groups, split_file, text_bytes
from solomon.data.dedup import DIGEST
from solomon.data.parallel import ordered_map, pool_size
from solomon.data.progress import progress_bar
from solomon.data.tokens import META_FILE, token_dtype
from solomon.errors import SolomonError
from solomon.params import TokenizerParams

# text per worker below which a worker's start costs more than the encoding it takes over (encoding is slower
# than preparing, so a pool pays from a smaller input)
BYTES_PER_WORKER = 4 << 20


def new_trainer(params: TokenizerParams) -> tuple[Tokenizer, trainers.BpeTrainer]:
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
    return tokenizer, trainer


def train_tokenizer(texts, params: TokenizerParams) -> Tokenizer:
    """Train on ``texts`` (any iterable of strings, consumed once)."""
    tokenizer, trainer = new_trainer(params)
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


# --- the training sample ---------------------------------------------------------------------------------------


def sample_rows(corpus_dir: Path, budget: int) -> tuple[dict[int, np.ndarray], int, int]:
    """The train documents of smallest SHA256 that fit in ``budget`` bytes, cut at the first that does not (one
    larger than the whole budget never could, so it is passed over): {row group: sorted row indices}, their count
    and their bytes. Reads only the digest and size columns, and keeps at most the candidates that fit (plus one
    row group's)."""
    parquet = pq.ParquetFile(split_file(corpus_dir, "train"))
    keys = np.zeros(0, dtype=DIGEST)
    sizes = np.zeros(0, dtype=np.int64)
    where = np.zeros((0, 2), dtype=np.int64)
    threshold: bytes | None = None  # once a document is cut, nothing from its key on can enter
    for group in range(parquet.metadata.num_row_groups):
        table = parquet.read_row_group(group, columns=["sha256", "bytes"])
        batch_keys = np.array([bytes.fromhex(h) for h in table.column("sha256").to_pylist()], dtype=DIGEST)
        batch_sizes = table.column("bytes").to_numpy()
        rows = np.arange(batch_keys.size)
        fits = batch_sizes <= budget
        batch_keys, batch_sizes, rows = batch_keys[fits], batch_sizes[fits], rows[fits]
        if threshold is not None:
            inside = batch_keys < np.array(threshold, dtype=DIGEST)
            batch_keys, batch_sizes, rows = batch_keys[inside], batch_sizes[inside], rows[inside]
        keys = np.concatenate([keys, batch_keys])
        sizes = np.concatenate([sizes, batch_sizes])
        where = np.concatenate([where, np.stack([np.full(rows.size, group), rows], axis=1)])
        if sizes.sum() > budget:
            order = np.argsort(keys, kind="stable")
            keys, sizes, where = keys[order], sizes[order], where[order]
            fit = int(np.searchsorted(np.cumsum(sizes), budget, side="right"))
            threshold = bytes(keys[fit])
            keys, sizes, where = keys[:fit], sizes[:fit], where[:fit]
    chosen: dict[int, np.ndarray] = {}
    for group in np.unique(where[:, 0]):
        chosen[int(group)] = np.sort(where[where[:, 0] == group, 1])
    return chosen, int(keys.size), int(sizes.sum())


def sample_texts(corpus_dir: Path, chosen: dict[int, np.ndarray]) -> Iterator[str]:
    parquet = pq.ParquetFile(split_file(corpus_dir, "train"))
    for group in sorted(chosen):
        texts = parquet.read_row_group(group, columns=["text"]).column("text")
        yield from texts.take(chosen[group]).to_pylist()


# --- encoding --------------------------------------------------------------------------------------------------


@cache
def _tokenizer_from(json_text: str) -> Tokenizer:
    tokenizer = Tokenizer.from_str(json_text)
    # corpus text is text: "<|endoftext|>" quoted in a document is its characters, never the end-of-document id
    tokenizer.encode_special_tokens = True
    return tokenizer


def _one_thread_each() -> None:
    """In a worker: the workers are the parallelism, so each encodes on one thread (no oversubscription)."""
    os.environ["TOKENIZERS_PARALLELISM"] = "false"


# tokenizers holds about 150 bytes for each byte of text it encodes (an Encoding's tokens, offsets, masks), so text
# goes to it in batches of at most this many characters, and a longer document in pieces
ENCODE_CHARS = 1 << 20
# where a document may be cut without changing its tokens: a space between two ASCII letters or digits, where the
# byte-level pre-tokenizer (GPT-2's pattern) splits anyway, as no pre-token holds a space but at its start
_CUT = re.compile(r"(?<=[A-Za-z0-9]) (?=[A-Za-z0-9])")


def pieces(text: str, size: int = ENCODE_CHARS) -> list[str]:
    """``text`` cut into pieces of about ``size`` characters at points where the encoder splits anyway, so their
    tokens together are the whole text's; one piece when it has no such point."""
    found, start = [], 0
    while len(text) - start > size:
        cut = _CUT.search(text, start + size)
        if cut is None:
            break
        found.append(text[start : cut.start()])
        start = cut.start()
    return [*found, text[start:]]


def encode_row_group(task: tuple[Path, int], tokenizer_json: str, eod_id: int, dtype: str) -> tuple[bytes, int, int]:
    """One row group's documents as token bytes (each followed by ``eod_id``), its document count and text bytes:
    encoded a bounded batch of text at a time, so memory does not follow the largest document."""
    path, group = task
    table = pq.ParquetFile(path).read_row_group(group, columns=["text", "bytes"])
    tokenizer = _tokenizer_from(tokenizer_json)
    out: list[np.ndarray] = []
    batch: list[str] = []
    ends: list[bool] = []  # whether a piece is its document's last
    held = 0

    def flush() -> None:
        ids = [e.ids for e in tokenizer.encode_batch_fast(batch, add_special_tokens=False)]
        for piece, last in zip(ids, ends, strict=True):
            if last:
                piece.append(eod_id)
        total = sum(map(len, ids))
        out.append(np.fromiter(chain.from_iterable(ids), dtype=np.dtype(dtype), count=total))
        batch.clear()
        ends.clear()

    for text in table.column("text").to_pylist():
        parts = pieces(text)
        for index, part in enumerate(parts):
            batch.append(part)
            ends.append(index == len(parts) - 1)
            held += len(part)
            if held >= ENCODE_CHARS:
                flush()
                held = 0
    if batch:
        flush()
    flat = np.concatenate(out) if out else np.zeros(0, dtype=np.dtype(dtype))
    return flat.tobytes(), table.num_rows, int(table.column("bytes").to_numpy().sum())


def build(
    corpus_dir: Path,
    params: TokenizerParams,
    tokenizer_path: Path,
    tokens_dir: Path,
    workers: int | None = None,
    crash_point: Callable[[str], None] = no_crash,
    show_progress: bool = False,
) -> dict:
    """Train on the sample, encode every split, write the tokenizer JSON and the token directory. ``workers``
    defaults to what the corpus's size repays."""
    chosen, sampled, sampled_bytes = sample_rows(corpus_dir, params.sample_bytes)
    if not sampled:
        raise SolomonError(
            f"tokenizer.sample_bytes {params.sample_bytes} holds not one train document (every one is larger): raise it"
        )
    tokenizer = train_tokenizer(sample_texts(corpus_dir, chosen), params)
    eod_id = tokenizer.token_to_id(params.eod_token)
    dtype = token_dtype(tokenizer.get_vocab_size())
    meta: dict = {
        "dtype": dtype.str,
        "vocab_size": tokenizer.get_vocab_size(),
        "eod_token": params.eod_token,
        "eod_id": eod_id,
        "sample": {"documents": sampled, "bytes": sampled_bytes, "budget_bytes": params.sample_bytes},
        "splits": {},
    }
    encode = partial(encode_row_group, tokenizer_json=tokenizer.to_str(), eod_id=eod_id, dtype=dtype.str)
    tasks = [(split_file(corpus_dir, s), group) for s in SPLITS for group in range(row_groups(corpus_dir, s))]
    documents = sum(pq.ParquetFile(split_file(corpus_dir, s)).metadata.num_rows for s in SPLITS)
    workers = workers or pool_size(sum(text_bytes(corpus_dir, s) for s in SPLITS), BYTES_PER_WORKER)
    counts = {split: {"documents": 0, "bytes": 0, "tokens": 0} for split in SPLITS}
    with (
        staged_dir(tokens_dir, crash_point) as tmp,
        ExitStack() as files,
        progress_bar("tokenizer", show=show_progress, total=documents, unit="doc") as bar,
    ):
        handles = {split: files.enter_context(open(tmp / f"{split}.bin", "wb")) for split in SPLITS}
        results = ordered_map(encode, tasks, workers, initializer=_one_thread_each)
        for (path, _), (data, n_documents, n_bytes) in zip(tasks, results, strict=True):
            handles[path.stem].write(data)
            c = counts[path.stem]
            c["documents"] += n_documents
            c["bytes"] += n_bytes
            c["tokens"] += len(data) // dtype.itemsize
            bar.advance_to(sum(c["documents"] for c in counts.values()))
        files.close()
        for split in SPLITS:
            c = counts[split]
            c["bytes_per_token"] = round(c["bytes"] / c["tokens"], 4) if c["tokens"] else None
            meta["splits"][split] = c
        write_json(tmp / META_FILE, meta)
        write_text(tokenizer_path, tokenizer.to_str(pretty=True) + "\n")
    return meta
