"""Corpus formats end to end, with real files written by their own libraries (gzip, zstandard, pyarrow): every
format gives the same corpus, the stream equals a plain in-memory reading of the rules, the number of workers
changes no byte, the tokenizer's sample is the documents of smallest SHA256, and a broken file stops the prepare
and check stages with one line naming the file and the line or row."""

from __future__ import annotations

import gzip
import hashlib
import json
import random
import shutil
import subprocess
import sys
import unicodedata
import zlib
from itertools import groupby
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
import zstandard
from conftest import ROOT, tree_digest

from lab.scratch import merge
from solomon.data import corpus as corpus_module
from solomon.data import sources
from solomon.data import tokenizer as tokenizer_module
from solomon.data.corpus import SPLITS, prepare, read_documents, split_of
from solomon.data.parallel import pool_size
from solomon.errors import SolomonError
from solomon.params import CorpusParams, SplitParams, TokenizerParams

# Wide val/test fractions: every split gets documents even from a corpus of a few dozen.
SPLIT = SplitParams(val=0.2, test=0.2)
MIN_CHARS = 5


def corpus_params(source: str, **extra) -> CorpusParams:
    return CorpusParams(source=source, split=SPLIT, min_chars=MIN_CHARS, **extra)


def jsonl_bytes(records: list[dict]) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode("utf-8")


def prepared(params: CorpusParams, root: Path, out: str, workers: int = 1) -> dict[str, list[dict]]:
    """prepare() into ``root/out``, read back: {split: [{"id", "sha256", "text", ...}, ...], "summary": {...}}."""
    summary = prepare(params, root / out, root, workers=workers)
    splits = {split: list(read_documents(root / out, split)) for split in SPLITS}
    assert {split: len(docs) for split, docs in splits.items()} == summary["documents"]
    return splits | {"summary": summary}


def text_rows(splits: dict) -> dict[str, list[tuple[str, str]]]:
    return {split: [(d["text"], d["sha256"]) for d in splits[split]] for split in SPLITS}


def ids(splits: dict) -> dict[str, list[str]]:
    return {split: [d["id"] for d in splits[split]] for split in SPLITS}


# --- the reference: the rules read literally, the whole corpus in memory ---------------------------------------


def reference_normalise(text: str) -> str:
    text = unicodedata.normalize("NFC", text)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = "".join(" " if c != "\n" and unicodedata.category(c) == "Cc" else c for c in text)
    lines = []
    for line in text.split("\n"):
        folded = "".join(" " if space else "".join(run) for space, run in groupby(line, key=str.isspace))
        lines.append(folded.strip())
    text = "\n".join(lines)
    while "\n\n\n" in text:
        text = text.replace("\n\n\n", "\n\n")
    return text.strip()


def reference_corpus(documents: list[tuple[str, str]], min_chars: int, split: SplitParams) -> dict:
    """(id, raw text) in source order → {split: [(id, sha256, text)]} and the counts, with no streaming at all."""
    out: dict = {name: [] for name in SPLITS}
    seen: set[str] = set()
    duplicates = too_short = 0
    for doc_id, raw in documents:
        text = reference_normalise(raw)
        if len(text) < min_chars:
            too_short += 1
            continue
        if text in seen:
            duplicates += 1
            continue
        seen.add(text)
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
        out[split_of(digest, split.salt, split.val, split.test)].append((doc_id, digest, text))
    return out | {"duplicates": duplicates, "too_short": too_short}


# --- corpora ---------------------------------------------------------------------------------------------------

SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "sa", "te", "vo", "zi", "pha", "dro", "quel", "é", "ß"]


def vocabulary(rng: random.Random, size: int) -> list[str]:
    return ["".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 4))) for _ in range(size)]


def word_documents(count: int, seed: int, min_words: int, max_words: int) -> list[str]:
    """Deterministic pseudo-random documents of words, in lines and paragraphs."""
    rng = random.Random(seed)
    words = vocabulary(rng, 3000)
    documents = []
    for _ in range(count):
        chosen = rng.choices(words, k=rng.randint(min_words, max_words))
        lines = [" ".join(chosen[i : i + 12]) + "." for i in range(0, len(chosen), 12)]
        documents.append("".join(line + rng.choice(["\n", "\n\n", " "]) for line in lines).strip())
    return documents


def format_documents() -> list[str]:
    """80 documents for the format tests: multi-line, CRLF, unicode, one exact duplicate, one too short."""
    rng = random.Random(7)
    words = vocabulary(rng, 200)
    documents = []
    for i in range(80):
        lines = [" ".join(rng.choices(words, k=rng.randint(3, 12))) for _ in range(rng.randint(1, 4))]
        tail = "  \t" if i % 3 else " Cafe\u0301\u2028fin\u00a0\u00a0!"
        documents.append(f"Document {i}.\r\n" + "\n\n\n".join(lines) + tail)
    documents[40] = documents[3]  # an exact duplicate: kept once, whatever the format
    documents[41] = " tiny "  # shorter than MIN_CHARS
    return documents


def records_of(documents: list[str]) -> list[dict]:
    return [{"id": f"doc-{i:03d}", "text": text, "n": i} for i, text in enumerate(documents)]


def parquet_table(records: list[dict]) -> pa.Table:
    return pa.table(
        {
            "id": [r["id"] for r in records],
            "text": [r["text"] for r in records],
            "n": [r["n"] for r in records],
        }
    )


def write_format(kind: str, records: list[dict], corpus: Path) -> str:
    """Write ``records`` in format ``kind`` under ``corpus``; the corpus.source naming it (from corpus's parent)."""
    corpus.mkdir(parents=True, exist_ok=True)
    data = jsonl_bytes(records)
    half = len(records) // 2
    if kind == "jsonl":
        (corpus / "docs.jsonl").write_bytes(data)
        return f"{corpus.name}/docs.jsonl"
    if kind == "jsonl.gz":
        with gzip.open(corpus / "docs.jsonl.gz", "wb") as handle:
            handle.write(data)
        return f"{corpus.name}/docs.jsonl.gz"
    if kind == "jsonl.gz, two members":
        members = gzip.compress(jsonl_bytes(records[:half])) + gzip.compress(jsonl_bytes(records[half:]))
        (corpus / "docs.jsonl.gz").write_bytes(members)
        return f"{corpus.name}/docs.jsonl.gz"
    if kind == "jsonl.zst":
        (corpus / "docs.jsonl.zst").write_bytes(zstandard.ZstdCompressor(level=3).compress(data))
        return f"{corpus.name}/docs.jsonl.zst"
    if kind == "jsonl.zst, two frames":
        compressor = zstandard.ZstdCompressor(level=3)
        frames = compressor.compress(jsonl_bytes(records[:half])) + compressor.compress(jsonl_bytes(records[half:]))
        (corpus / "docs.jsonl.zst").write_bytes(frames)
        return f"{corpus.name}/docs.jsonl.zst"
    if kind == "parquet":
        pq.write_table(parquet_table(records), corpus / "docs.parquet", row_group_size=16)
        return f"{corpus.name}/docs.parquet"
    if kind == "parquet shards":
        (corpus / "shards").mkdir()
        bounds = [0, 27, 54, len(records)]
        for k in range(3):
            part = records[bounds[k] : bounds[k + 1]]
            pq.write_table(parquet_table(part), corpus / f"shards/train-{k:05d}-of-00003.parquet", row_group_size=10)
        return f"{corpus.name}/shards"
    if kind == "txt directory":
        (corpus / "books").mkdir()
        for r in records:
            (corpus / "books" / f"{r['id']}.txt").write_bytes(r["text"].encode("utf-8"))
        return f"{corpus.name}/books"
    raise AssertionError(kind)


FORMATS = [
    "jsonl.gz",
    "jsonl.gz, two members",
    "jsonl.zst",
    "jsonl.zst, two frames",
    "parquet",
    "parquet shards",
    "txt directory",
]


# --- 1. every format, the same corpus --------------------------------------------------------------------------


@pytest.mark.parametrize("kind", FORMATS)
def test_each_format_gives_the_rows_of_plain_jsonl(tmp_path: Path, kind: str) -> None:
    documents = format_documents()
    records = records_of(documents)
    plain = prepared(corpus_params(write_format("jsonl", records, tmp_path / "plain"), id_field="id"), tmp_path, "p")
    source = write_format(kind, records, tmp_path / "corpus")
    other = prepared(corpus_params(source, id_field="id"), tmp_path, "out")

    assert text_rows(other) == text_rows(plain)
    assert plain["summary"]["duplicates_dropped"] == 1 and plain["summary"]["too_short_dropped"] == 1
    for name in ("documents_read", "duplicates_dropped", "too_short_dropped", "documents", "characters"):
        assert other["summary"][name] == plain["summary"][name], name
    assert all(text_rows(plain)[split] for split in SPLITS)
    # ids come from the id field (text files: their path under the directory), and name the document's first copy
    expected_ids = ids(plain) if kind != "txt directory" else {s: [f"{i}.txt" for i in ids(plain)[s]] for s in SPLITS}
    assert ids(other) == expected_ids
    for split in SPLITS:
        for row in plain[split]:
            assert row["text"] == reference_normalise(documents[int(row["id"][4:7])])
    assert "doc-003" in ids(plain)["train"] + ids(plain)["val"] + ids(plain)["test"]
    assert "doc-040" not in ids(plain)["train"] + ids(plain)["val"] + ids(plain)["test"]


def test_without_id_field_ids_are_file_and_line_or_row(tmp_path: Path) -> None:
    documents = format_documents()
    records = records_of(documents)
    data = jsonl_bytes(records).split(b"\n")
    data.insert(10, b"   ")  # a blank line is skipped, and still counted: later records are on line n + 2
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus/docs.jsonl.gz").write_bytes(gzip.compress(b"\n".join(data)))
    by_line = prepared(corpus_params("corpus/docs.jsonl.gz"), tmp_path, "lines")
    for split in SPLITS:
        for row in by_line[split]:
            name, line = row["id"].split(":")
            n = int(line) - 1 if int(line) <= 10 else int(line) - 2
            assert name == "docs.jsonl.gz" and row["text"] == reference_normalise(documents[n])

    source = write_format("parquet shards", records, tmp_path / "corpus")
    by_row = prepared(corpus_params(source), tmp_path, "rows")
    starts = {"train-00000-of-00003.parquet": 0, "train-00001-of-00003.parquet": 27, "train-00002-of-00003.parquet": 54}
    for split in SPLITS:
        for row in by_row[split]:
            name, index = row["id"].split(":")  # rows count from 0 in each shard
            assert row["text"] == reference_normalise(documents[starts[name] + int(index)])
    assert text_rows(by_row) == text_rows(by_line)


# --- 2. the stream equals the rules read literally -------------------------------------------------------------

ODD_PIECES = [
    "\r\n", "\r", "\t", "\x00", "\x07", "\x1b", "\x7f", "\x85", "\x0b", "\x0c", "\x1c", "\x1f", "\u00a0", "\u2003",
    "\u3000", "\u2028", "\u2029", "\u200b", "e\u0301", "A\u030a", "\u1e0b\u0323", "\n\n\n\n", "  ", " \n ", "\ufb01",
    "\u0085\n", "\r\r\n",
]  # fmt: skip


def messy_documents(seed: int = 11) -> list[str]:
    """Documents of words and odd characters, with exact duplicates, duplicates only after normalisation, and
    documents that normalise to under MIN_CHARS."""
    rng = random.Random(seed)
    words = vocabulary(rng, 120)
    documents = []
    for _ in range(160):
        parts = []
        for _ in range(rng.randint(1, 30)):
            parts.append(rng.choice(words) if rng.random() < 0.6 else rng.choice(ODD_PIECES))
        documents.append("".join(parts))
    documents += [
        "Cafe\u0301 au lait",  # the same document as the next two, after NFC and folding
        "Caf\u00e9  au\tlait",
        "  Caf\u00e9 au lait\r\n",
        "line one\r\nline two\r\n\r\n\r\n\r\nline three",
        "line one\nline two\n\n\nline three",
        "abcd\x00",  # 4 characters: too short
        "cafe\u0301",  # 5 code points raw, 4 after NFC: too short
        "a \u2003 b \t c",  # 5 after folding: kept
        "\x07\x08\t\u3000\r\n",  # nothing left
        "",
    ]
    documents += [documents[i] for i in (0, 5, 17, 160)]  # exact duplicates, later in the stream
    rng.shuffle(documents)
    return documents


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_stream_equals_the_in_memory_reference(tmp_path: Path, kind: str) -> None:
    documents = messy_documents()
    records = records_of(documents)
    source = write_format(kind, records, tmp_path / "corpus")
    got = prepared(corpus_params(source, id_field="id"), tmp_path, "out")
    expected = reference_corpus([(r["id"], r["text"]) for r in records], MIN_CHARS, SPLIT)

    for split in SPLITS:
        assert [(d["id"], d["sha256"], d["text"]) for d in got[split]] == expected[split], split
        assert [d["chars"] for d in got[split]] == [len(t) for _, _, t in expected[split]]
        assert [d["bytes"] for d in got[split]] == [len(t.encode("utf-8")) for _, _, t in expected[split]]
    summary = got["summary"]
    assert summary["documents_read"] == len(documents)
    assert summary["duplicates_dropped"] == expected["duplicates"] >= 6
    assert summary["too_short_dropped"] == expected["too_short"] >= 4
    assert summary["characters"] == {s: sum(len(t) for _, _, t in expected[s]) for s in SPLITS}


# --- 3. workers change no byte ---------------------------------------------------------------------------------


def file_digests(*paths: Path) -> dict[str, str]:
    found = {}
    for path in paths:
        if path.is_dir():
            found |= {f"{path.name}/{name}": sha for name, sha in tree_digest(path).items()}
        else:
            found[path.name] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


@pytest.mark.slow
def test_one_worker_and_two_write_the_same_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Both constants are read in the main process only: sources.chunks (the reader) runs there and feeds the
    # workers, and corpus.SplitWriter (the row groups) writes there; the spawned workers only parse and encode.
    # A row group is whole chunks' documents, so small chunks make many row groups.
    monkeypatch.setattr(sources, "CHUNK_BYTES", 128 << 10)
    monkeypatch.setattr(corpus_module, "ROW_GROUP_BYTES", 64 << 10)
    documents = word_documents(1000, seed=3, min_words=100, max_words=1400)
    documents += documents[::50]  # duplicates in later chunks
    (tmp_path / "corpus").mkdir()
    source = tmp_path / "corpus/big.jsonl"
    source.write_bytes(jsonl_bytes([{"text": t} for t in documents]))
    assert source.stat().st_size > 5_000_000
    params = corpus_params("corpus/big.jsonl")
    assert sum(1 for _ in sources.chunks(sources.locate(params, tmp_path), params, tmp_path)) >= 40

    summaries = [prepare(params, tmp_path / f"corpus{w}", tmp_path, workers=w) for w in (1, 2)]
    assert summaries[0] == summaries[1]
    assert summaries[0]["duplicates_dropped"] == 20
    assert corpus_module.row_groups(tmp_path / "corpus1", "train") >= 20
    corpus1, corpus2 = (file_digests(tmp_path / f"corpus{w}") for w in (1, 2))
    assert set(corpus1) == {
        "corpus1/train.parquet",
        "corpus1/val.parquet",
        "corpus1/test.parquet",
        "corpus1/summary.json",
    }
    assert list(corpus1.values()) == list(corpus2.values())

    tokenizer = TokenizerParams(vocab_size=1024)
    for w in (1, 2):
        tokenizer_module.build(
            tmp_path / "corpus1", tokenizer, tmp_path / f"tokenizer{w}.json", tmp_path / f"tokens{w}", w
        )
    tokens1 = file_digests(tmp_path / "tokenizer1.json", tmp_path / "tokens1")
    tokens2 = file_digests(tmp_path / "tokenizer2.json", tmp_path / "tokens2")
    assert len(tokens1) == 5  # tokenizer.json, meta.json, train/val/test.bin
    assert list(tokens1.values()) == list(tokens2.values())


def test_the_default_pool_grows_with_the_input_up_to_every_core() -> None:
    """Left to choose, a stage starts no worker for a small input (its start costs more than the work) and one
    per ``bytes_per_worker`` above that, never more than the cores; whatever it picks, the bytes are the same
    (above)."""
    assert pool_size(0, 4 << 20, cores=2) == 1
    assert pool_size((8 << 20) - 1, 4 << 20, cores=2) == 1
    assert pool_size(8 << 20, 4 << 20, cores=2) == 2
    assert pool_size(10 << 30, 4 << 20, cores=2) == 2
    assert pool_size(10 << 30, 4 << 20, cores=16) == 16
    assert corpus_module.BYTES_PER_WORKER > tokenizer_module.BYTES_PER_WORKER  # encoding pays a worker sooner


# --- 4. the tokenizer's sample ---------------------------------------------------------------------------------


def sample_corpus(tmp_path: Path, name: str, records: list[dict]) -> Path:
    (tmp_path / "corpus").mkdir(exist_ok=True)
    (tmp_path / "corpus" / f"{name}.jsonl").write_bytes(jsonl_bytes(records))
    prepare(corpus_params(f"corpus/{name}.jsonl"), tmp_path / name, tmp_path)
    return tmp_path / name


def test_tokenizer_sample_is_the_smallest_sha256_cut_at_the_first_misfit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the sample is gathered across row groups (a row group is whole chunks' documents)
    monkeypatch.setattr(sources, "CHUNK_BYTES", 16 << 10)
    monkeypatch.setattr(corpus_module, "ROW_GROUP_BYTES", 16 << 10)
    budget = 40_000
    documents = word_documents(400, seed=5, min_words=5, max_words=400)
    records = [{"text": t} for t in documents]
    corpus_dir = sample_corpus(tmp_path, "ordered", records)
    assert corpus_module.row_groups(corpus_dir, "train") >= 5

    train = sorted(read_documents(corpus_dir, "train", ["sha256", "bytes", "text"]), key=lambda d: d["sha256"])
    taken, total = [], 0
    for doc in train:
        if total + doc["bytes"] > budget:
            break
        taken.append(doc)
        total += doc["bytes"]
    later = train[len(taken) + 1 :]
    assert any(total + d["bytes"] <= budget for d in later)  # a cut, not a greedy fill: later ones would fit

    params = TokenizerParams(vocab_size=512, sample_bytes=budget)
    meta = tokenizer_module.build(corpus_dir, params, tmp_path / "ordered.json", tmp_path / "ordered-tokens")
    assert meta["sample"] == {"documents": len(taken), "bytes": total, "budget_bytes": budget}
    chosen, count, size = tokenizer_module.sample_rows(corpus_dir, budget)
    assert (count, size) == (len(taken), total)
    assert sorted(tokenizer_module.sample_texts(corpus_dir, chosen)) == sorted(d["text"] for d in taken)

    shuffled = list(records)
    random.Random(99).shuffle(shuffled)
    shuffled_dir = sample_corpus(tmp_path, "shuffled", shuffled)
    texts = [[d["text"] for d in read_documents(d, "train", ["text"])] for d in (corpus_dir, shuffled_dir)]
    assert texts[0] != texts[1] and sorted(texts[0]) == sorted(texts[1])
    meta2 = tokenizer_module.build(shuffled_dir, params, tmp_path / "shuffled.json", tmp_path / "shuffled-tokens")
    assert meta2["sample"] == meta["sample"]
    assert (tmp_path / "shuffled.json").read_bytes() == (tmp_path / "ordered.json").read_bytes()


# --- 5. broken files: one line, a non-zero exit, data/ untouched -----------------------------------------------


def write_params(workdir: Path, corpus_overrides: dict) -> None:
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    (workdir / "params.yaml").write_text(yaml.safe_dump(merge(params, {"corpus": corpus_overrides})))


def run_stage(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=workdir, capture_output=True, text=True)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A directory holding an earlier, valid data/corpus that a failing run must leave alone."""
    previous = tmp_path / "data/corpus"
    previous.mkdir(parents=True)
    for split in SPLITS:
        (previous / f"{split}.parquet").write_bytes(f"earlier {split}".encode())
    (previous / "summary.json").write_text('{"earlier": true}\n')
    (tmp_path / "corpus").mkdir()
    shutil.copytree(ROOT / "tasks", tmp_path / "tasks")  # the check stage reads eval.tasks' files
    return tmp_path


def many_records(n: int = 120) -> list[dict]:
    return [
        {"id": f"r{i}", "text": text} for i, text in enumerate(word_documents(n, seed=1, min_words=20, max_words=60))
    ]


def truncated_gzip(corpus: Path) -> str:
    data = gzip.compress(jsonl_bytes(many_records()))
    cut = data[: len(data) // 2]
    (corpus / "docs.jsonl.gz").write_bytes(cut)
    whole_lines = zlib.decompressobj(wbits=31).decompress(cut).count(b"\n")
    assert whole_lines > 3
    return f"corpus/docs.jsonl.gz is damaged near line {whole_lines + 1} ("


def zst_with_garbage(corpus: Path) -> str:
    data = zstandard.ZstdCompressor(level=3).compress(jsonl_bytes(many_records(1500)))
    (corpus / "docs.jsonl.zst").write_bytes(data[: len(data) // 2] + random.Random(0).randbytes(4096))
    return "corpus/docs.jsonl.zst"


def bad_json_line_3(corpus: Path) -> str:
    lines = jsonl_bytes(many_records()).split(b"\n")
    lines[2] = b'{"id": "r2", "text": "unterminated}'
    (corpus / "docs.jsonl").write_bytes(b"\n".join(lines))
    return "corpus/docs.jsonl line 3 is not valid JSON"


def latin1_line(corpus: Path) -> str:
    lines = jsonl_bytes(many_records()).split(b"\n")
    lines[6] = '{"text": "caf\u00e9 au lait, d\u00e9j\u00e0 vu"}'.encode("latin-1")
    (corpus / "docs.jsonl").write_bytes(b"\n".join(lines))
    return "corpus/docs.jsonl line 7 is not UTF-8 (byte 0xe9 at column 14)"


def not_parquet(corpus: Path) -> str:
    (corpus / "docs.parquet").write_bytes(random.Random(2).randbytes(5000))
    return "corpus/docs.parquet is not a readable Parquet file"


def parquet_without_text(corpus: Path) -> str:
    records = many_records()
    table = pa.table({"id": [r["id"] for r in records], "body": [r["text"] for r in records]})
    pq.write_table(table, corpus / "docs.parquet")
    return "corpus/docs.parquet has no column 'text'"


def parquet_null_in_row_5(corpus: Path) -> str:
    texts: list[str | None] = [r["text"] for r in many_records()]
    texts[5] = None  # row 5 counted from 0, as pyarrow and the default ids (docs.parquet:5) count
    pq.write_table(pa.table({"text": pa.array(texts, pa.string())}), corpus / "docs.parquet", row_group_size=4)
    return "corpus/docs.parquet row 5: 'text' is null"


def unpaired_surrogate_line_9(corpus: Path) -> str:
    lines = jsonl_bytes(many_records()).split(b"\n")
    lines[8] = b'{"text": "half an emoji \\ud83d here"}'  # valid JSON whose string UTF-8 cannot hold
    (corpus / "docs.jsonl").write_bytes(b"\n".join(lines))
    return "corpus/docs.jsonl line 9: 'text' holds an unpaired surrogate (\\ud83d at character 14)"


def parquet_latin1_row_7(corpus: Path) -> str:
    raw = [r["text"].encode("utf-8") for r in many_records()]
    raw[7] = "caf\u00e9".encode("latin-1")
    # a string column whose bytes are not UTF-8, as a careless writer can leave one: pyarrow's view does not check
    column = pa.array(raw, pa.binary()).view(pa.string())
    pq.write_table(pa.table({"text": column}), corpus / "docs.parquet", row_group_size=50)
    return "corpus/docs.parquet row 7: 'text' is not UTF-8"


def mixed_directory(corpus: Path) -> str:
    (corpus / "mixed").mkdir()
    for i, r in enumerate(many_records(40)):
        (corpus / "mixed" / f"{i:02d}.txt").write_text(r["text"], encoding="utf-8")
    (corpus / "mixed/extra.jsonl").write_bytes(jsonl_bytes(many_records(5)))
    return "corpus.source 'corpus/mixed' mixes formats (jsonl, text)"


BROKEN = {
    "jsonl.gz truncated": ("corpus/docs.jsonl.gz", truncated_gzip),
    "jsonl.zst with garbage": ("corpus/docs.jsonl.zst", zst_with_garbage),
    "jsonl line 3 not JSON": ("corpus/docs.jsonl", bad_json_line_3),
    "jsonl line not UTF-8": ("corpus/docs.jsonl", latin1_line),
    "parquet that is not": ("corpus/docs.parquet", not_parquet),
    "parquet without text column": ("corpus/docs.parquet", parquet_without_text),
    "parquet null text": ("corpus/docs.parquet", parquet_null_in_row_5),
    "directory mixing formats": ("corpus/mixed", mixed_directory),
    "jsonl unpaired surrogate": ("corpus/docs.jsonl", unpaired_surrogate_line_9),
    "parquet text not UTF-8": ("corpus/docs.parquet", parquet_latin1_row_7),
}


def one_error_line(done: subprocess.CompletedProcess) -> str:
    assert done.returncode != 0, done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    return lines[0]


@pytest.mark.parametrize("case", list(BROKEN))
def test_broken_source_stops_prepare_with_one_line(workdir: Path, case: str) -> None:
    source, make = BROKEN[case]
    expected = make(workdir / "corpus")
    write_params(workdir, {"source": source})
    before = tree_digest(workdir / "data")
    done = run_stage(workdir, str(ROOT / "stages/prepare.py"), "data/corpus")
    line = one_error_line(done)
    assert expected in line, line
    if case == "jsonl.zst with garbage":  # where the stream ends depends on the decoder: the file and a line
        assert " line " in line, line
    if case == "parquet without text column":
        assert "(its columns: id, body)" in line
    assert tree_digest(workdir / "data") == before
    assert sorted(p.name for p in (workdir / "data").iterdir()) == ["corpus"]  # no temporary leftovers
    assert sorted(p.name for p in (workdir / "data/corpus").iterdir()) == sorted(tree_digest(workdir / "data/corpus"))


def gz_first_record_without_text(corpus: Path) -> str:
    records = [{"body": "no text field here"}, *many_records()]
    (corpus / "docs.jsonl.gz").write_bytes(gzip.compress(jsonl_bytes(records)))
    return "corpus/docs.jsonl.gz line 1 has no 'text' field"


CHECKED = {
    "parquet without text column": ("corpus/docs.parquet", parquet_without_text),
    "jsonl.gz first record without text": ("corpus/docs.jsonl.gz", gz_first_record_without_text),
}


@pytest.mark.parametrize("case", list(CHECKED))
def test_check_stage_refuses_a_source_without_its_text(workdir: Path, case: str) -> None:
    source, make = CHECKED[case]
    expected = make(workdir / "corpus")
    write_params(workdir, {"source": source})
    before = tree_digest(workdir / "data")
    line = one_error_line(run_stage(workdir, str(ROOT / "stages/check.py")))
    assert expected in line, line
    assert tree_digest(workdir / "data") == before


def test_check_stage_accepts_the_good_formats(workdir: Path) -> None:
    source = write_format("jsonl.zst", records_of(format_documents()), workdir / "corpus")
    write_params(workdir, {"source": source})
    done = run_stage(workdir, str(ROOT / "stages/check.py"))
    assert done.returncode == 0, done.stderr


def test_line_and_row_numbers_count_across_chunks_and_batches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sources, "CHUNK_BYTES", 4 << 10)  # many chunks of lines
    (tmp_path / "corpus").mkdir()
    lines = jsonl_bytes(many_records(600)).split(b"\n")
    lines[456] = b'{"text": "fine so far" "then broken"}'
    (tmp_path / "corpus/docs.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(b"\n".join(lines)))
    with pytest.raises(SolomonError, match=r"^corpus/docs\.jsonl\.zst line 457 is not valid JSON"):
        prepare(corpus_params("corpus/docs.jsonl.zst"), tmp_path / "out", tmp_path, workers=1)

    texts: list[str | None] = [f"row text number {i}" for i in range(3 * sources.PARQUET_BATCH_ROWS)]
    texts[2 * sources.PARQUET_BATCH_ROWS + 17] = None  # in the third batch, and a later row group
    pq.write_table(
        pa.table({"text": pa.array(texts, pa.string())}), tmp_path / "corpus/rows.parquet", row_group_size=1000
    )
    with pytest.raises(SolomonError, match=rf"^corpus/rows\.parquet row {2 * sources.PARQUET_BATCH_ROWS + 17}: "):
        prepare(corpus_params("corpus/rows.parquet"), tmp_path / "out", tmp_path, workers=1)
    assert not (tmp_path / "out").exists()


# --- a compressed file cut where its decoder can stop cleanly ---------------------------------------------------


def cut_at_block_boundary(kind: str, corpus: Path, records: list[dict]) -> int:
    """Compress ``records`` in blocks of 10 lines, flushed at each block's end, and keep only the first 4 blocks
    (no end of stream): a decoder reads whole lines up to the cut. Returns the records that survive."""
    if kind == "gz":
        compressor = zlib.compressobj(wbits=31)
        flush = zlib.Z_FULL_FLUSH
    else:
        compressor = zstandard.ZstdCompressor(level=3).compressobj()
        flush = zstandard.COMPRESSOBJ_FLUSH_BLOCK
    pieces = [compressor.compress(jsonl_bytes(records[i : i + 10])) + compressor.flush(flush) for i in range(0, 40, 10)]
    (corpus / f"docs.jsonl.{kind}").write_bytes(b"".join(pieces))
    return 40


@pytest.mark.parametrize(
    "kind",
    ["gz", "zst"],
)
def test_compressed_file_cut_between_lines_is_refused(tmp_path: Path, kind: str) -> None:
    records = many_records(200)
    (tmp_path / "corpus").mkdir()
    survivors = cut_at_block_boundary(kind, tmp_path / "corpus", records)
    data = (tmp_path / f"corpus/docs.jsonl.{kind}").read_bytes()
    decoder = zlib.decompressobj(wbits=31) if kind == "gz" else zstandard.ZstdDecompressor().decompressobj()
    held = decoder.decompress(data)
    assert held == jsonl_bytes(records[:survivors])  # what the file still holds: a clean cut, between lines
    assert not decoder.eof  # and its stream never ends: the file is truncated
    with pytest.raises(SolomonError, match=rf"corpus/docs\.jsonl\.{kind} is damaged near line {survivors + 1} "):
        prepare(corpus_params(f"corpus/docs.jsonl.{kind}"), tmp_path / "out", tmp_path)
    assert not (tmp_path / "out").exists()


def test_zst_with_garbage_is_called_damaged(tmp_path: Path) -> None:
    (tmp_path / "corpus").mkdir()
    source = zst_with_garbage(tmp_path / "corpus")
    with pytest.raises(SolomonError, match=r"corpus/docs\.jsonl\.zst is damaged near line \d+ "):
        prepare(corpus_params(source), tmp_path / "out", tmp_path)
