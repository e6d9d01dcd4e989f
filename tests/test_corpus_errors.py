"""Bad corpora: one clear line on stderr, a non-zero exit, and data/ exactly as it was."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, tree_digest

from lab.scratch import merge


def run_prepare(workdir: Path, corpus_overrides: dict) -> subprocess.CompletedProcess:
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    (workdir / "params.yaml").write_text(yaml.safe_dump(merge(params, {"corpus": corpus_overrides})))
    return subprocess.run(
        [sys.executable, str(ROOT / "stages/prepare.py"), "data/corpus"], cwd=workdir, capture_output=True, text=True
    )


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A directory holding an earlier, valid data/corpus that a failing run must leave alone."""
    previous = tmp_path / "data/corpus"
    previous.mkdir(parents=True)
    for split in ("train", "val", "test"):
        (previous / f"{split}.jsonl").write_text(json.dumps({"id": split, "text": "earlier run"}) + "\n")
    (tmp_path / "corpus").mkdir()
    return tmp_path


def _write_jsonl(path: Path, records: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def _many_docs(path: Path, n: int = 60) -> None:
    path.mkdir(parents=True)
    for i in range(n):
        (path / f"doc{i:03d}.txt").write_text(f"Document number {i}. " * 5, encoding="utf-8")


CASES = {
    "missing path": ({"source": "corpus/nowhere"}, None, "corpus.source 'corpus/nowhere' does not exist"),
    "empty corpus": ({"source": "corpus/empty"}, "empty", "is empty: no document has text"),
    "not utf-8": ({"source": "corpus/latin1"}, "latin1", "is not UTF-8 (byte 0xe9 at offset"),
    "jsonl without text field": ({"source": "corpus/docs.jsonl"}, "jsonl", "line 2 has no 'text' field"),
    "too small to split": ({"source": "corpus/tiny"}, "tiny", "is too small to split"),
    "kjv sha256 differs": ({"kjv_sha256": "0" * 64}, None, "not the pinned corpus.kjv_sha256"),
    "no txt files": ({"source": "corpus/other"}, "other", "holds no .txt, .jsonl or .parquet files"),
    "glob matches nothing": ({"source": "corpus/*.md"}, None, "matches no files"),
    "min_chars drops everything": (
        {"source": "corpus/books", "min_chars": 10_000},
        "books",
        "all 120 documents are shorter than corpus.min_chars 10000 characters after normalisation: lower",
    ),
    "val fraction under one document": (
        {"source": "corpus/books", "split": {"val": 1e-6}},
        "books",
        "corpus.split.val 1e-06 of 120 unique documents is under one document: raise corpus.split.val to at least",
    ),
}


def _make(kind: str | None, corpus: Path) -> None:
    if kind == "empty":
        (corpus / "empty").mkdir()
        (corpus / "empty/a.txt").write_text("   \n\t\n", encoding="utf-8")
        (corpus / "empty/b.txt").write_text("", encoding="utf-8")
    elif kind == "latin1":
        _many_docs(corpus / "latin1")
        (corpus / "latin1/doc007.txt").write_bytes("Café au lait".encode("latin-1"))
    elif kind == "jsonl":
        _write_jsonl(corpus / "docs.jsonl", [{"text": "first"}, {"body": "second"}])
    elif kind == "tiny":
        (corpus / "tiny").mkdir()
        for i in range(3):
            (corpus / f"tiny/{i}.txt").write_text(f"only {i}", encoding="utf-8")
    elif kind == "books":
        _many_docs(corpus / "books", 120)
    elif kind == "other":
        (corpus / "other").mkdir()
        (corpus / "other/notes.md").write_text("not a .txt", encoding="utf-8")


@pytest.mark.parametrize("case", list(CASES))
def test_bad_corpus_is_one_line_nonzero_and_leaves_data_alone(workdir: Path, case: str) -> None:
    overrides, kind, expected = CASES[case]
    _make(kind, workdir / "corpus")
    before = tree_digest(workdir / "data")
    done = run_prepare(workdir, overrides)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert expected in lines[0]
    assert tree_digest(workdir / "data") == before
    assert sorted(p.name for p in (workdir / "data").iterdir()) == ["corpus"]  # no temporary leftovers


def test_good_user_corpus_replaces_data(workdir: Path) -> None:
    _many_docs(workdir / "corpus/books")
    done = run_prepare(workdir, {"source": "corpus/books"})
    assert done.returncode == 0, done.stderr
    summary = json.loads((workdir / "data/corpus/summary.json").read_text())
    assert sum(summary["documents"].values()) == 60
    assert summary["source"]["kind"] == "text"
