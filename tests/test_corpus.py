"""Corpus rules: normalisation, a split that is stable under additions, duplicates that never straddle."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from solomon.data.corpus import SPLITS, prepare, read_documents, split_of
from solomon.data.normalise import normalise
from solomon.data.sources import chunks, locate
from solomon.errors import SolomonError
from solomon.params import CorpusParams

KJV_SHA = "51a4d6ed5592001b9386e2f292d3953132a2662240eb8ad08533d625f1259717"


def params(source: str, **extra) -> CorpusParams:
    return CorpusParams(source=source, kjv_sha256=KJV_SHA, **extra)


def prepared(corpus: CorpusParams, root: Path, out: str = "prepared") -> dict[str, list[dict]]:
    """prepare() into ``root/out``, read back: {split: [{"id", "sha256", "text", ...}, ...]}."""
    summary = prepare(corpus, root / out, root)
    splits = {split: list(read_documents(root / out, split)) for split in SPLITS}
    assert {split: len(docs) for split, docs in splits.items()} == summary["documents"]
    return splits | {"summary": summary}


def kjv_documents() -> list[tuple[str, str]]:
    spec = locate(params("kjv"))
    return [doc for chunk, _ in chunks(spec, params("kjv")) for doc in chunk.documents()]


def test_normalise_nfc_whitespace_and_controls() -> None:
    decomposed = "Cafe\u0301"
    assert normalise(f"  {decomposed}\t\tau\u00a0lait \r\n\r\n\r\n\r\nnext\x07line  ") == "Café au lait\n\nnext line"


def test_split_is_stable_when_documents_are_added(tmp_path: Path) -> None:
    corpus = tmp_path / "docs.jsonl"
    records = [{"text": f"document {i} " * 3} for i in range(200)]
    corpus.write_text("".join(json.dumps(r) + "\n" for r in records))
    first = prepared(params("docs.jsonl"), tmp_path, "first")
    more = records[:100] + [{"text": f"new document {i}"} for i in range(100)] + records[100:]
    corpus.write_text("".join(json.dumps(r) + "\n" for r in more))
    second = prepared(params("docs.jsonl"), tmp_path, "second")

    def where(splits) -> dict[str, str]:
        return {d["text"]: name for name in SPLITS for d in splits[name]}

    old, new = where(first), where(second)
    assert all(new[text] == split for text, split in old.items())
    assert {"val", "test"} <= set(old.values())


def test_exact_duplicates_are_kept_once_and_never_straddle(tmp_path: Path) -> None:
    corpus = tmp_path / "docs.jsonl"
    records = [{"id": f"d{i}", "text": f"text {i % 50}"} for i in range(150)]
    corpus.write_text("".join(json.dumps(r) + "\n" for r in records))
    splits = prepared(params("docs.jsonl", id_field="id"), tmp_path)
    texts = [d["text"] for name in SPLITS for d in splits[name]]
    assert len(texts) == len(set(texts)) == 50
    assert splits["summary"]["duplicates_dropped"] == 100
    assert splits["train"][0]["id"] == "d0"


def test_split_fractions_are_respected_roughly() -> None:
    counts = {"train": 0, "val": 0, "test": 0}
    for i in range(20000):
        counts[split_of(f"{i:064x}", "salt", 0.1, 0.05)] += 1
    assert 0.09 < counts["val"] / 20000 < 0.11
    assert 0.04 < counts["test"] / 20000 < 0.06


def test_kjv_is_read_as_1189_chapters() -> None:
    documents = kjv_documents()
    assert len(documents) == 1189
    assert documents[0][0] == "kjv/Genesis/1"
    assert documents[0][1].startswith("In the beginning God created the heaven and the earth.\n")
    assert documents[-1][0] == "kjv/Revelation/22"


def test_kjv_pin_mismatch_is_refused() -> None:
    wrong = CorpusParams(kjv_sha256="f" * 64)
    with pytest.raises(SolomonError, match=r"not the pinned corpus\.kjv_sha256"):
        next(chunks(locate(wrong), wrong))


def test_glob_and_directory_sources_read_one_document_per_file(tmp_path: Path) -> None:
    books = tmp_path / "corpus/books"
    (books / "nested").mkdir(parents=True)
    for i in range(40):
        (books / f"{i:02d}.txt").write_text(f"Book {i}.\r\n\r\n\r\nThe end.", encoding="utf-8")
    (books / "nested/extra.txt").write_text("Nested book.", encoding="utf-8")
    (books / "notes.md").write_text("not a document", encoding="utf-8")
    by_glob = prepared(params("corpus/books/*.txt"), tmp_path, "glob")
    by_dir = prepared(params("corpus/books"), tmp_path, "dir")
    assert sum(len(by_glob[name]) for name in SPLITS) == 40
    assert sum(len(by_dir[name]) for name in SPLITS) == 41
    ids = {d["id"] for name in SPLITS for d in by_glob[name]}
    assert "corpus/books/00.txt" in ids
    texts = {d["text"] for name in SPLITS for d in by_glob[name]}
    assert "Book 0.\n\nThe end." in texts
