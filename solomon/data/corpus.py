"""Corpus preparation as a stream: read a source, normalise each document, deduplicate exactly, split by content
hash, and write each split as Parquet, in memory that does not grow with the corpus.

A document's split is a pure function of (salt, SHA256 of its normalised text): adding documents never moves an
old one, and exact duplicates, which share a hash, can never straddle splits (only the first copy is kept). What
is kept per document while the stream flows is its 32-byte digest (``solomon.data.dedup``), never its text.

Workers normalise, hash and split (``process_chunk``); the main process reads the source and keeps the order, so
the output is the same bytes with one worker as with every core. ``data/corpus/<split>.parquet`` holds the columns
id, sha256 and text, in row groups of about ``ROW_GROUP_BYTES`` of text: the unit the later stages hand their
workers.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from solomon.atomic import no_crash, staged_dir, write_json
from solomon.data.dedup import DIGEST, DigestSet
from solomon.data.normalise import normalise
from solomon.data.parallel import ordered_map, pool_size
from solomon.data.progress import progress_bar
from solomon.data.sources import Chunk, chunks, locate
from solomon.errors import SolomonError
from solomon.params import CorpusParams, SplitParams

SPLITS = ("train", "val", "test")
SUMMARY_FILE = "summary.json"
# chars and bytes (UTF-8) per document let the later stages pick a sample and count lengths without the text
SCHEMA = pa.schema(
    [("id", pa.string()), ("sha256", pa.string()), ("text", pa.string()), ("chars", pa.int64()), ("bytes", pa.int64())]
)
COLUMNS = tuple(SCHEMA.names)
ROW_GROUP_BYTES = 2 << 20  # text per row group: each later stage's unit of work, small enough to share out evenly
# source (as stored) per worker below which a worker's start costs more than the work it takes over: reading,
# normalising and hashing are fast beside starting an interpreter (docs/data-performance.md)
BYTES_PER_WORKER = 32 << 20
ENOUGH_TO_SPLIT = 100  # unique documents from which an empty val or test split is its fraction's fault
PARQUET_OPTIONS = {"compression": "zstd", "compression_level": 1, "use_dictionary": ["id"], "write_statistics": False}


def split_of(text_sha256: str, salt: str, val: float, test: float) -> str:
    """The split of a document: a uniform number in [0, 1) from SHA256(salt, content hash)."""
    digest = hashlib.sha256(f"{salt}\0{text_sha256}".encode()).digest()
    u = int.from_bytes(digest[:8], "big") / 2**64
    if u < test:
        return "test"
    if u < test + val:
        return "val"
    return "train"


@dataclass
class Processed:
    """A chunk's documents after normalisation: those long enough as an Arrow batch (the columns of SCHEMA), with
    their raw digests and splits; and how many were read and dropped as too short."""

    batch: pa.RecordBatch
    digests: np.ndarray
    splits: np.ndarray
    read: int
    too_short: int


def process_chunk(chunk: Chunk, min_chars: int, split: SplitParams) -> Processed:
    """Parse, normalise, hash and split one chunk (in a worker), and build its Arrow columns there too: what
    comes back to the main process is Arrow buffers, cheap to pickle and to filter."""
    ids: list[str] = []
    texts: list[str] = []
    digests: list[bytes] = []
    splits: list[int] = []
    read = too_short = 0
    for doc_id, raw in chunk.documents():
        read += 1
        text = normalise(raw)
        if len(text) < min_chars:
            too_short += 1
            continue
        digest = hashlib.sha256(text.encode("utf-8")).digest()
        ids.append(doc_id)
        texts.append(text)
        digests.append(digest)
        splits.append(SPLITS.index(split_of(digest.hex(), split.salt, split.val, split.test)))
    text_column = pa.array(texts, pa.string())
    batch = pa.record_batch(
        [
            pa.array(ids, pa.string()),
            pa.array([d.hex() for d in digests], pa.string()),
            text_column,
            pc.utf8_length(text_column).cast(pa.int64()),
            pc.binary_length(text_column).cast(pa.int64()),
        ],
        schema=SCHEMA,
    )
    return Processed(batch, np.array(digests, dtype=DIGEST), np.array(splits, dtype=np.int8), read, too_short)


class SplitWriter:
    """One split's Parquet file, written a row group of about ROW_GROUP_BYTES of text at a time."""

    def __init__(self, path: Path) -> None:
        self.writer = pq.ParquetWriter(path, SCHEMA, **PARQUET_OPTIONS)
        self.pending: list[pa.RecordBatch] = []
        self.pending_bytes = 0
        self.documents = 0
        self.characters = 0

    def add(self, batch: pa.RecordBatch) -> None:
        if not batch.num_rows:
            return
        self.pending.append(batch)
        self.pending_bytes += pc.sum(batch.column("bytes")).as_py()
        self.documents += batch.num_rows
        self.characters += pc.sum(batch.column("chars")).as_py()
        if self.pending_bytes >= ROW_GROUP_BYTES:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            table = pa.Table.from_batches(self.pending, schema=SCHEMA)
            self.writer.write_table(table, row_group_size=table.num_rows)
            self.pending, self.pending_bytes = [], 0

    def close(self) -> None:
        self.flush()
        self.writer.close()


def prepare(
    params: CorpusParams,
    out_dir: Path,
    root: Path = Path("."),
    workers: int | None = None,
    crash_point: Callable[[str], None] = no_crash,
    show_progress: bool = False,
) -> dict:
    """Read corpus.source, write ``out_dir/<split>.parquet`` and ``summary.json``; ``out_dir`` changes only if all
    of it succeeds. ``workers`` defaults to what the source's size repays. Returns the summary."""
    spec = locate(params, root)
    workers = workers or pool_size(spec.size(), BYTES_PER_WORKER)
    seen = DigestSet()
    read = duplicates = too_short = 0
    work = partial(process_chunk, min_chars=params.min_chars, split=params.split)
    with staged_dir(out_dir, crash_point) as tmp:
        writers = {name: SplitWriter(tmp / f"{name}.parquet") for name in SPLITS}
        stream = chunks(spec, params, root)
        positions: list[int] = []

        def items() -> Iterator[Chunk]:
            for chunk, position in stream:
                positions.append(position)
                yield chunk

        with progress_bar("prepare", show=show_progress, total=spec.size()) as bar:
            for processed in ordered_map(work, items(), workers):
                read += processed.read
                too_short += processed.too_short
                keep = seen.add_new(processed.digests)
                duplicates += int((~keep).sum())
                for index, name in enumerate(SPLITS):
                    writers[name].add(processed.batch.filter(pa.array(keep & (processed.splits == index))))
                bar.advance_to(positions.pop(0), documents=read)
        for writer in writers.values():
            writer.close()
        counts = {name: writers[name].documents for name in SPLITS}
        _require_splits(params, counts, too_short)
        summary = {
            "source": {
                "kind": spec.kind,
                "spec": params.source,
                "description": spec.description,
                "files": len(spec.files),
                "sha256": spec.sha256(),
            },
            "split": params.split.model_dump(),
            "documents_read": read,
            "duplicates_dropped": duplicates,
            "too_short_dropped": too_short,
            "documents": counts,
            "characters": {name: writers[name].characters for name in SPLITS},
        }
        write_json(tmp / SUMMARY_FILE, summary)
    return summary


def _require_splits(params: CorpusParams, counts: dict[str, int], too_short: int) -> None:
    """Stop on a split left empty, naming the cause: no text, corpus.min_chars, a fraction too small for the
    corpus, or too few documents."""
    kept = sum(counts.values())
    if kept == 0 and too_short and params.min_chars > 1:
        raise SolomonError(
            f"corpus '{params.source}': all {too_short} documents are shorter than corpus.min_chars "
            f"{params.min_chars} characters after normalisation: lower corpus.min_chars"
        )
    if kept == 0:
        raise SolomonError(f"corpus '{params.source}' is empty: no document has text after normalisation")
    empty = [name for name in SPLITS if not counts[name]]
    # with enough documents an empty split is the fraction's doing, not the corpus's size
    tiny = [name for name in empty if kept >= ENOUGH_TO_SPLIT and getattr(params.split, name) * kept < 1]
    if tiny:
        raise SolomonError(
            f"corpus.split.{tiny[0]} {getattr(params.split, tiny[0])} of {kept} unique documents is under one "
            f"document: raise corpus.split.{tiny[0]} to at least {1 / kept:.2g}"
        )
    if empty:
        raise SolomonError(
            f"corpus '{params.source}' is too small to split: {kept} unique documents leave "
            f"{'/'.join(empty)} empty; add documents (a few dozen at least)"
        )


# --- reading the prepared corpus -------------------------------------------------------------------------------


def split_file(corpus_dir: Path, split: str) -> Path:
    return corpus_dir / f"{split}.parquet"


def row_groups(corpus_dir: Path, split: str) -> int:
    return pq.ParquetFile(split_file(corpus_dir, split)).metadata.num_row_groups


def text_bytes(corpus_dir: Path, split: str) -> int:
    """The split's text in UTF-8 bytes (from its sizes column alone)."""
    return pc.sum(pq.read_table(split_file(corpus_dir, split), columns=["bytes"])["bytes"]).as_py() or 0


def read_row_group(corpus_dir: Path, split: str, index: int, columns: list[str]) -> pa.Table:
    return pq.ParquetFile(split_file(corpus_dir, split)).read_row_group(index, columns=columns)


def read_documents(corpus_dir: Path, split: str, columns: list[str] | None = None) -> Iterator[dict]:
    """The split's documents as {"id", "sha256", "text", "chars", "bytes"} (or ``columns``), in order, a row group
    at a time."""
    parquet = pq.ParquetFile(split_file(corpus_dir, split))
    for index in range(parquet.metadata.num_row_groups):
        yield from parquet.read_row_group(index, columns=columns).to_pylist()


def read_summary(corpus_dir: Path) -> dict:
    return json.loads((corpus_dir / SUMMARY_FILE).read_text(encoding="utf-8"))
