"""Corpus rules: normalisation, a split that is stable under additions, duplicates that never straddle."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from solomon.data.corpus import normalise, prepare, read_kjv, split_of
from solomon.errors import SolomonError
from solomon.params import CorpusParams

KJV_SHA = "51a4d6ed5592001b9386e2f292d3953132a2662240eb8ad08533d625f1259717"


def params(source: str, **extra) -> CorpusParams:
    return CorpusParams(source=source, kjv_sha256=KJV_SHA, **extra)


def test_normalise_nfc_whitespace_and_controls() -> None:
    decomposed = "Cafe\u0301"
    assert normalise(f"  {decomposed}\t\tau\u00a0lait \r\n\r\n\r\n\r\nnext\x07line  ") == "Café au lait\n\nnext line"


def test_split_is_stable_when_documents_are_added(tmp_path: Path) -> None:
    corpus = tmp_path / "docs.jsonl"
    records = [{"text": f"document {i} " * 3} for i in range(200)]
    corpus.write_text("".join(json.dumps(r) + "\n" for r in records))
    first = prepare(params("docs.jsonl"), tmp_path)
    more = records[:100] + [{"text": f"new document {i}"} for i in range(100)] + records[100:]
    corpus.write_text("".join(json.dumps(r) + "\n" for r in more))
    second = prepare(params("docs.jsonl"), tmp_path)

    def where(prepared) -> dict[str, str]:
        return {d.text: name for name, docs in prepared.splits.items() for d in docs}

    old, new = where(first), where(second)
    assert all(new[text] == split for text, split in old.items())
    assert {"val", "test"} <= set(old.values())


def test_exact_duplicates_are_kept_once_and_never_straddle(tmp_path: Path) -> None:
    corpus = tmp_path / "docs.jsonl"
    records = [{"id": f"d{i}", "text": f"text {i % 50}"} for i in range(150)]
    corpus.write_text("".join(json.dumps(r) + "\n" for r in records))
    prepared = prepare(params("docs.jsonl", id_field="id"), tmp_path)
    texts = [d.text for docs in prepared.splits.values() for d in docs]
    assert len(texts) == len(set(texts)) == 50
    assert prepared.duplicates == 100
    assert prepared.splits["train"][0].id == "d0"


def test_split_fractions_are_respected_roughly() -> None:
    counts = {"train": 0, "val": 0, "test": 0}
    for i in range(20000):
        counts[split_of(f"{i:064x}", "salt", 0.1, 0.05)] += 1
    assert 0.09 < counts["val"] / 20000 < 0.11
    assert 0.04 < counts["test"] / 20000 < 0.06


def test_kjv_is_read_as_1189_chapters() -> None:
    source = read_kjv(KJV_SHA)
    assert len(source.documents) == 1189
    assert source.documents[0].id == "kjv/Genesis/1"
    assert source.documents[0].text.startswith("In the beginning God created the heaven and the earth.\n")
    assert source.documents[-1].id == "kjv/Revelation/22"


def test_kjv_pin_mismatch_is_refused() -> None:
    with pytest.raises(SolomonError, match=r"not the pinned corpus\.kjv_sha256"):
        read_kjv("f" * 64)


def test_glob_and_directory_sources_read_one_document_per_file(tmp_path: Path) -> None:
    books = tmp_path / "corpus/books"
    (books / "nested").mkdir(parents=True)
    for i in range(40):
        (books / f"{i:02d}.txt").write_text(f"Book {i}.\r\n\r\n\r\nThe end.", encoding="utf-8")
    (books / "nested/extra.txt").write_text("Nested book.", encoding="utf-8")
    (books / "notes.md").write_text("not a document", encoding="utf-8")
    by_glob = prepare(params("corpus/books/*.txt"), tmp_path)
    by_dir = prepare(params("corpus/books"), tmp_path)
    assert sum(len(d) for d in by_glob.splits.values()) == 40
    assert sum(len(d) for d in by_dir.splits.values()) == 41
    ids = {d.id for docs in by_glob.splits.values() for d in docs}
    assert "corpus/books/00.txt" in ids
    texts = {d.text for docs in by_glob.splits.values() for d in docs}
    assert "Book 0.\n\nThe end." in texts
