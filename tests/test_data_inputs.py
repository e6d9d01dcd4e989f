"""Corpus inputs as users have them, beyond the clean formats: byte-order marks, hidden editor copies, files of
the same name in different folders, ids of odd types, unreadable folders, rows of any size in Parquet,
category-typed text, the end-of-document marker quoted inside a document, a document larger than the
tokenizer's whole sample budget. Each is read as the text it holds or stopped with one line naming what to fix."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from conftest import ROOT

from solomon.data import sources
from solomon.data import tokenizer as tokenizer_module
from solomon.data.corpus import SPLITS, prepare, read_documents
from solomon.data.tokens import open_tokens, read_meta
from solomon.errors import SolomonError
from solomon.params import CorpusParams, SplitParams, TokenizerParams
from solomon.pipeline import pipeline_env

SPLIT = SplitParams(val=0.2, test=0.2)


def documents_of(params: CorpusParams, root: Path) -> list[tuple[str, str]]:
    """(id, text) of every document the source yields, in reading order."""
    spec = sources.locate(params, root)
    return [doc for chunk, _ in sources.chunks(spec, params, root) for doc in chunk.documents()]


def jsonl(records: list[dict]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in records).encode("utf-8")


def texts(n: int, words: int = 30) -> list[str]:
    rng = np.random.default_rng(n)
    vocab = [f"w{i}" for i in range(500)]
    return [f"Document {i}. " + " ".join(rng.choice(vocab, words)) for i in range(n)]


# --- reading ---------------------------------------------------------------------------------------------------


def test_a_byte_order_mark_is_not_text(tmp_path: Path) -> None:
    books = tmp_path / "corpus/books"
    books.mkdir(parents=True)
    (books / "a.txt").write_bytes(b"\xef\xbb\xbfIn the beginning")
    (books / "b.txt").write_bytes(b"In the beginning")
    assert [t for _, t in documents_of(CorpusParams(source="corpus/books"), tmp_path)] == ["In the beginning"] * 2
    (tmp_path / "corpus/docs.jsonl").write_bytes(b"\xef\xbb\xbf" + jsonl([{"text": "first"}, {"text": "second"}]))
    params = CorpusParams(source="corpus/docs.jsonl")
    sources.inspect(sources.locate(params, tmp_path), params, tmp_path)  # the check stage's look
    assert documents_of(params, tmp_path) == [("docs.jsonl:1", "first"), ("docs.jsonl:2", "second")]


def test_hidden_files_and_folders_are_not_part_of_a_directory_source(tmp_path: Path) -> None:
    books = tmp_path / "corpus/books"
    (books / ".ipynb_checkpoints").mkdir(parents=True)
    (books / "a.txt").write_text("kept", encoding="utf-8")
    (books / ".ipynb_checkpoints/a.txt").write_text("an editor's copy", encoding="utf-8")
    (books / ".draft.txt").write_text("hidden", encoding="utf-8")
    assert documents_of(CorpusParams(source="corpus/books"), tmp_path) == [("a.txt", "kept")]
    assert documents_of(CorpusParams(source="corpus/books/**/*.txt"), tmp_path) == [("corpus/books/a.txt", "kept")]


def test_default_ids_tell_files_of_the_same_name_apart(tmp_path: Path) -> None:
    for language, text in [("en", "hello"), ("de", "hallo")]:
        (tmp_path / f"corpus/jsonl/{language}").mkdir(parents=True)
        (tmp_path / f"corpus/jsonl/{language}/train.jsonl").write_bytes(jsonl([{"text": text}]))
        (tmp_path / f"corpus/parquet/{language}").mkdir(parents=True)
        pq.write_table(pa.table({"text": [text]}), tmp_path / f"corpus/parquet/{language}/train.parquet")
    assert documents_of(CorpusParams(source="corpus/jsonl"), tmp_path) == [
        ("de/train.jsonl:1", "hallo"),
        ("en/train.jsonl:1", "hello"),
    ]
    assert documents_of(CorpusParams(source="corpus/parquet"), tmp_path) == [
        ("de/train.parquet:0", "hallo"),
        ("en/train.parquet:0", "hello"),
    ]


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"text": "x", "id": True}, "corpus/docs.jsonl line 2: 'id' is a boolean; an id is a string or an integer"),
        ({"text": "x", "id": {"a": 1}}, "corpus/docs.jsonl line 2: 'id' is an object"),
        ({"text": "x"}, "corpus/docs.jsonl line 2 has no 'id' field: give every line one, or set corpus.id_field"),
        ({"text": None, "id": "b"}, "corpus/docs.jsonl line 2: 'text' is null, not a string: fix or remove"),
        ({"text": ["a"], "id": "b"}, "corpus/docs.jsonl line 2: 'text' is an array, not a string"),
        ({"text": "x", "id": "\ud83d"}, "corpus/docs.jsonl line 2: 'id' holds an unpaired surrogate (\\ud83d"),
    ],
)
def test_odd_values_stop_with_the_line(tmp_path: Path, record: dict, message: str) -> None:
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus/docs.jsonl").write_bytes(jsonl([{"text": "fine", "id": "a"}, record]))
    with pytest.raises(SolomonError) as info:
        documents_of(CorpusParams(source="corpus/docs.jsonl", id_field="id"), tmp_path)
    assert message in str(info.value)


def test_integer_ids_and_null_ids_are_read(tmp_path: Path) -> None:
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus/docs.jsonl").write_bytes(jsonl([{"text": "a", "id": 7}, {"text": "b", "id": None}]))
    params = CorpusParams(source="corpus/docs.jsonl", id_field="id")
    assert documents_of(params, tmp_path) == [("7", "a"), ("docs.jsonl:2", "b")]


def test_an_unreadable_folder_is_named_not_skipped(tmp_path: Path) -> None:
    books = tmp_path / "corpus/books"
    (books / "locked").mkdir(parents=True)
    (books / "a.txt").write_text("open", encoding="utf-8")
    (books / "locked/b.txt").write_text("behind a closed door", encoding="utf-8")
    check = (
        "import sys; from pathlib import Path; from solomon.data.sources import locate; "
        "from solomon.params import CorpusParams; from solomon.errors import SolomonError\n"
        "try: locate(CorpusParams(source=sys.argv[1]), Path('.'))\n"
        "except SolomonError as e: print(e)"
    )
    as_user: list[str] = []
    if os.geteuid() == 0:  # root reads any folder: drop the capabilities that let it, as an ordinary user lacks them
        setpriv = shutil.which("setpriv") or pytest.skip("setpriv (util-linux) not found")
        caps = "-dac_override,-dac_read_search"
        as_user = [setpriv, f"--inh-caps={caps}", f"--bounding-set={caps}"]
    (books / "locked").chmod(0)
    try:
        for source in ("corpus/books", "corpus/books/**/*.txt"):
            done = subprocess.run(
                [*as_user, sys.executable, "-c", check, source],
                cwd=tmp_path,
                capture_output=True,
                text=True,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
            )
            assert f"corpus.source '{source}': corpus/books/locked cannot be read (Permission denied)" in done.stdout, (
                done.stdout + done.stderr
            )
    finally:
        (books / "locked").chmod(0o755)


def test_an_over_long_line_is_named_by_its_size_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sources, "MAX_DOCUMENT_BYTES", 2000)
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus/docs.jsonl").write_bytes(jsonl([{"text": "x" * 5000}]))
    params = CorpusParams(source="corpus/docs.jsonl")
    expected = "corpus/docs.jsonl line 1 is one document of more than 0 MiB, over the 0 MiB"
    with pytest.raises(SolomonError, match=expected):  # the check stage's look: not "invalid JSON"
        sources.inspect(sources.locate(params, tmp_path), params, tmp_path)
    with pytest.raises(SolomonError, match=expected):
        documents_of(params, tmp_path)


# --- Parquet ---------------------------------------------------------------------------------------------------


def test_parquet_chunks_are_bounded_in_bytes_whatever_the_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sources, "CHUNK_BYTES", 64 << 10)
    rng = np.random.default_rng(3)
    sizes = np.concatenate([rng.integers(10, 200, 3000), rng.integers(20_000, 60_000, 40), rng.integers(10, 200, 500)])
    rows = [f"{i} " + "y" * int(n) for i, n in enumerate(sizes)]  # tweets, then books, then tweets
    (tmp_path / "corpus").mkdir()
    pq.write_table(pa.table({"text": rows}), tmp_path / "corpus/rows.parquet", row_group_size=1200)
    params = CorpusParams(source="corpus/rows.parquet")
    got = list(sources.chunks(sources.locate(params, tmp_path), params, tmp_path))
    largest = max(len(r) for r in rows)
    for chunk, _ in got:
        size = sum(len(t) for t in chunk.texts)
        assert size < sources.CHUNK_BYTES + largest, (len(chunk.texts), size)
    assert len(got) > sum(len(r) for r in rows) // (sources.CHUNK_BYTES + largest)
    assert [t for chunk, _ in got for t in chunk.texts] == rows
    assert [chunk.first_row for chunk, _ in got] == list(np.cumsum([0] + [len(c.texts) for c, _ in got[:-1]]))


def test_category_typed_parquet_text_reads_as_its_strings(tmp_path: Path) -> None:
    rows = texts(60)
    (tmp_path / "corpus").mkdir()
    pq.write_table(pa.table({"text": pa.array(rows).dictionary_encode()}), tmp_path / "corpus/cat.parquet")
    pq.write_table(pa.table({"text": pa.array(rows)}), tmp_path / "corpus/plain.parquet")
    assert pa.types.is_dictionary(pq.read_schema(tmp_path / "corpus/cat.parquet").field("text").type)
    read = [
        [t for _, t in documents_of(CorpusParams(source=f"corpus/{name}.parquet"), tmp_path)]
        for name in ("cat", "plain")
    ]
    assert read[0] == read[1] == rows


# --- the tokenizer ---------------------------------------------------------------------------------------------


def prepared_corpus(tmp_path: Path, records: list[dict]) -> Path:
    (tmp_path / "corpus").mkdir(exist_ok=True)
    (tmp_path / "corpus/docs.jsonl").write_bytes(jsonl(records))
    prepare(CorpusParams(source="corpus/docs.jsonl", split=SPLIT), tmp_path / "prepared", tmp_path, workers=1)
    return tmp_path / "prepared"


def test_the_end_of_document_marker_quoted_in_a_document_is_text(tmp_path: Path) -> None:
    quoting = [t + " as models write <|endoftext|> between samples" for t in texts(40)]
    corpus_dir = prepared_corpus(tmp_path, [{"text": t} for t in quoting])
    params = TokenizerParams(vocab_size=400)
    meta = tokenizer_module.build(corpus_dir, params, tmp_path / "tokenizer.json", tmp_path / "tokens")
    tokenizer = tokenizer_module._tokenizer_from((tmp_path / "tokenizer.json").read_text())
    for split in SPLITS:
        ids = np.asarray(open_tokens(tmp_path / "tokens", split))
        documents = [d["text"] for d in read_documents(corpus_dir, split, ["text"])]
        assert int((ids == meta["eod_id"]).sum()) == len(documents) == meta["splits"][split]["documents"]
        assert tokenizer.decode(ids[ids != meta["eod_id"]].tolist()) == "".join(documents)
    assert read_meta(tmp_path / "tokens")["eod_token"] == "<|endoftext|>"


def test_a_document_larger_than_the_sample_budget_is_passed_over(tmp_path: Path) -> None:
    small = texts(200, words=20)
    large = [t + " " + "z" * 12_000 for t in texts(10, words=20)]
    corpus_dir = prepared_corpus(tmp_path, [{"text": t} for t in small + large])
    train = sorted(read_documents(corpus_dir, "train", ["sha256", "bytes"]), key=lambda d: d["sha256"])
    budget = 10_000
    taken, total = [], 0
    for doc in train:
        if doc["bytes"] > budget:
            continue  # could never fit
        if total + doc["bytes"] > budget:
            break
        taken.append(doc["sha256"])
        total += doc["bytes"]
    last = taken[-1]
    assert any(d["bytes"] > budget and d["sha256"] < last for d in train)  # one would have cut the sample short
    _, count, size = tokenizer_module.sample_rows(corpus_dir, budget)
    assert (count, size) == (len(taken), total)
    with pytest.raises(SolomonError, match=r"^tokenizer.sample_bytes 10 holds not one train document \(every"):
        tokenizer_module.build(corpus_dir, TokenizerParams(sample_bytes=10), tmp_path / "t.json", tmp_path / "t")


# --- the stages ------------------------------------------------------------------------------------------------


def test_a_file_gone_between_check_and_prepare_is_named(tmp_path: Path) -> None:
    (tmp_path / "corpus/books").mkdir(parents=True)
    for i, text in enumerate(texts(60)):
        (tmp_path / f"corpus/books/{i:02d}.txt").write_text(text, encoding="utf-8")
    spec = sources.locate(CorpusParams(source="corpus/books"), tmp_path)
    (tmp_path / "corpus/books/33.txt").unlink()  # located, then gone: what a reader meets as it streams
    with pytest.raises(SolomonError, match=r"corpus/books/33\.txt cannot be read \(No such file or directory\)"):
        list(sources.chunks(spec, CorpusParams(source="corpus/books"), tmp_path))


def test_a_long_document_is_encoded_in_pieces_to_the_same_tokens(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    words = ["alpha", "Beta", "42", "x", "don't", "naïve", "—", "co-op", "  ", "\n", "\n\n", "3.14", "U.S.A.", "日本"]
    text = " ".join(rng.choice(words, 4000)) + " end"
    corpus_dir = prepared_corpus(tmp_path, [{"text": t} for t in texts(60)] + [{"text": text}])
    tokenizer_module.build(corpus_dir, TokenizerParams(vocab_size=400), tmp_path / "tok.json", tmp_path / "tokens")
    tokenizer = tokenizer_module._tokenizer_from((tmp_path / "tok.json").read_text())
    whole = tokenizer.encode(text, add_special_tokens=False).ids
    for size in (40, 300, 5000):
        cut = tokenizer_module.pieces(text, size)
        assert "".join(cut) == text and (len(cut) > 1) == (size < len(text))
        assert [i for piece in cut for i in tokenizer.encode(piece, add_special_tokens=False).ids] == whole, size
    assert tokenizer_module.pieces("nospaces" * 100, 10) == ["nospaces" * 100]  # no point to cut at: one piece


def test_a_zst_file_with_a_long_window_is_named_as_such(tmp_path: Path) -> None:
    import zstandard

    (tmp_path / "corpus").mkdir()
    window = zstandard.ZstdCompressionParameters.from_level(3, window_log=31, enable_ldm=True)
    with zstandard.ZstdCompressor(compression_params=window).stream_writer(
        open(tmp_path / "corpus/docs.jsonl.zst", "wb")
    ) as writer:
        writer.write(jsonl([{"text": "hello"}] * 100))
    params = CorpusParams(source="corpus/docs.jsonl.zst")
    expected = r"^corpus/docs\.jsonl\.zst was compressed with a window larger than 128 MiB \(zstd --long=28 or more\)"
    with pytest.raises(SolomonError, match=expected):
        sources.inspect(sources.locate(params, tmp_path), params, tmp_path)
    with pytest.raises(SolomonError, match=expected):
        documents_of(params, tmp_path)


def test_an_oversized_parquet_value_is_refused_before_it_becomes_a_string(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sources, "MAX_DOCUMENT_BYTES", 1000)
    (tmp_path / "corpus").mkdir()
    rows = ["short"] * 50 + ["y" * 5000] + ["short"] * 10
    pq.write_table(pa.table({"text": rows}), tmp_path / "corpus/rows.parquet")
    with pytest.raises(SolomonError, match=r"^corpus/rows\.parquet row 50 is one document of 0\.0 MiB, over"):
        documents_of(CorpusParams(source="corpus/rows.parquet"), tmp_path)


@pytest.fixture(scope="module")
def large_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A corpus that keeps two prepare workers busy for seconds on any host kind (stopped long before its end)."""
    from lab.bench.data import synthetic_corpus

    path = tmp_path_factory.mktemp("large") / "synthetic.jsonl"
    synthetic_corpus(path, 200)
    return path


@pytest.mark.slow
@pytest.mark.parametrize("signal_name", ["SIGKILL", "SIGINT"])
def test_a_stopped_stage_leaves_no_worker_behind(tmp_path: Path, large_corpus: Path, signal_name: str) -> None:
    import signal as signals

    import psutil

    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus/synthetic.jsonl").symlink_to(large_corpus)
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["corpus"]["source"] = "corpus/synthetic.jsonl"
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    stage = subprocess.Popen(
        [sys.executable, str(ROOT / "stages/prepare.py"), "data/corpus", "--workers", "2"],
        cwd=tmp_path,
        env=pipeline_env(),
        stderr=subprocess.PIPE,
        text=True,
    )
    process = psutil.Process(stage.pid)
    deadline = time.monotonic() + 60

    def workers() -> list[psutil.Process]:
        return [p for p in process.children() if "resource_tracker" not in " ".join(p.cmdline())]

    while len(started := workers()) < 2:
        assert stage.poll() is None and time.monotonic() < deadline, "no workers started"
        time.sleep(0.05)
    time.sleep(0.3)  # inside the work
    assert stage.poll() is None, "the stage ended before it could be stopped: give it a larger corpus"
    stage.send_signal(getattr(signals, signal_name))
    _, err = stage.communicate(timeout=60)
    _, alive = psutil.wait_procs(started, timeout=10)
    assert not alive, [p.cmdline() for p in alive]
    if signal_name == "SIGINT":
        assert stage.returncode == 130, f"the stage ended {stage.returncode} after SIGINT; its stderr: {err}"
        assert err.strip() == "error: interrupted: the stage's previous outputs are left as they were"
    assert not (tmp_path / "data/corpus").exists()


def test_a_map_left_early_kills_its_workers_at_once() -> None:
    """A stop reaches the stage while its workers hold items: it is not held until they finish (a stuck one never
    would); the same when an item fails or the reader stops reading."""
    import psutil

    from solomon.data.parallel import ordered_map

    results = ordered_map(time.sleep, [0, 3600, 3600, 3600], workers=2, in_flight=3)
    assert next(results) is None
    workers = [p for p in psutil.Process().children() if "resource_tracker" not in " ".join(p.cmdline())]
    assert len(workers) == 2, [p.cmdline() for p in workers]
    started = time.monotonic()
    results.close()  # as a Stopped raised in the reader does
    _, alive = psutil.wait_procs(workers, timeout=30)
    assert not alive and time.monotonic() - started < 30, [p.cmdline() for p in alive]
