"""Bad params and corpora through `dvc exp run -S`, as a user would make them: each stops with one line and a
non-zero exit before DVC deletes anything (the check stage runs first), so no output is lost to a typo."""

from __future__ import annotations

import subprocess

import pytest
from conftest import DVC, tree_digest

from solomon.pipeline import pipeline_env

# (-S overrides, a fragment of the one error line)
CASES = [
    (["train.max_steps=yes"], "'train.max_steps': Input should be a valid integer"),
    (["train.max_steps='30'"], "'train.max_steps': Input should be a valid integer"),
    (["lr.warmup=-1"], "'lr.warmup': Input should be greater than 0"),
    (["lr.peak=true"], "'lr.peak': Input should be a valid number"),
    (["train.samples.prompts=['In the beginning', '']"], "'train.samples.prompts.1': String should have at least"),
    (["corpus.split.val=0"], "'corpus.split.val': must be above 0"),
    (["corpus.split.test=0.0"], "'corpus.split.test': must be above 0"),
    (["train.accum_steps=3"], "accum_steps × nproc (3 × 1) must divide batch_size (8)"),
    (["model.n_head=3"], "n_embd (64) must be divisible by n_head (3)"),
    (["corpus.source=/etc/*.conf"], "'corpus.source': must name files inside the repository"),
    (["corpus.source=../outside"], "'corpus.source': must name files inside the repository"),
    (["corpus.source=corpus/broken.jsonl"], "corpus/broken.jsonl line 2 is not valid JSON"),
    (["corpus.source=corpus/latin1.txt"], "corpus/latin1.txt is not UTF-8"),
    (["corpus.source=corpus/nothing"], "corpus.source 'corpus/nothing' holds no .txt, .jsonl or .parquet files"),
    (["corpus.source=corpus/two.jsonl"], "too small to split"),
]
WATCHED = ("data", "models", "checkpoints", "reports")


def outputs(workspace) -> dict:
    """Every output a bad input must leave alone; the check stage's own outputs (which DVC removes just before
    running it, and which a valid run writes again with the same bytes) aside."""
    found = {name: tree_digest(workspace / name) for name in WATCHED}
    found["data"] = {path: sha for path, sha in found["data"].items() if not path.startswith("checked/")}
    return found


@pytest.fixture
def workspace(repo_copy):
    corpus = repo_copy / "corpus"
    (corpus / "broken.jsonl").write_text('{"text": "fine"}\n{"text": "cut off\n', encoding="utf-8")
    (corpus / "latin1.txt").write_bytes("caf\xe9 au lait\n".encode("latin-1"))
    (corpus / "nothing").mkdir()
    (corpus / "nothing" / "notes.md").write_text("not a .txt file\n", encoding="utf-8")
    (corpus / "two.jsonl").write_text('{"text": "one"}\n{"text": "two"}\n', encoding="utf-8")
    return repo_copy


@pytest.mark.long
def test_each_bad_override_stops_with_one_line_and_touches_no_output(workspace) -> None:
    before = outputs(workspace)
    for overrides, expected in CASES:
        args = [DVC, "exp", "run"] + [arg for override in overrides for arg in ("-S", override)]
        done = subprocess.run(args, cwd=workspace, env=pipeline_env(), capture_output=True, text=True)
        output = done.stdout + done.stderr
        errors = [line for line in output.splitlines() if line.startswith("error:")]
        assert done.returncode != 0, f"{overrides} was accepted"
        assert len(errors) == 1 and expected in errors[0], f"{overrides}: {output[-800:]}"
        assert "Traceback" not in output, f"{overrides}: {output[-800:]}"
        after = outputs(workspace)
        assert after == before, f"{overrides} changed {[name for name in WATCHED if after[name] != before[name]]}"
        subprocess.run(["git", "checkout", "--", "params.yaml"], cwd=workspace, check=True)


def test_valid_jsonl_with_raw_line_separators_in_its_strings_is_read_as_json_lines(tmp_path) -> None:
    """U+2028, U+2029 and U+0085 may stand raw inside a JSON string; only "\\n" ends a JSON Lines record."""
    from solomon.data.sources import chunks, locate
    from solomon.params import CorpusParams

    (tmp_path / "docs.jsonl").write_text('{"text": "a\u2028b"}\n{"text": "c\u0085d\u2029e"}\r\n', encoding="utf-8")
    corpus = CorpusParams(source="docs.jsonl")
    documents = [doc for chunk, _ in chunks(locate(corpus, tmp_path), corpus, tmp_path) for doc in chunk.documents()]
    assert documents == [("docs.jsonl:1", "a\u2028b"), ("docs.jsonl:2", "c\u0085d\u2029e")]
