"""The built-in benchmark tasks' data, made from the corpus's test split: a pure function of its documents.

- ``heldout.jsonl``: every test document whole, one ``{"text"}`` a line, in the split's order (as the encoded
  split). Scored with lm-eval's ``loglikelihood_rolling`` (``tasks/solomon_heldout.yaml``): its bits per byte is
  the evaluate stage's test bits per byte, measured the harness's way (each document from an end-of-document token,
  in disjoint windows).
- ``next_line.jsonl``: multiple choice (``tasks/solomon_next_line.yaml``): a passage of a test document, and four
  candidates for the passage that follows it — the true one and three passages of other test documents. A passage
  is a line (the default corpus: a verse), or a sentence where a document has no line breaks.

Which items and which distractors are drawn from a generator seeded by ``SEED`` over the passages in the order of
their documents' SHA256, so the files do not depend on how the split is stored or read.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from solomon.atomic import write_text
from solomon.data.corpus import read_documents
from solomon.errors import SolomonError

HELDOUT_FILE = "heldout.jsonl"
NEXT_LINE_FILE = "next_line.jsonl"
SEED = 20261207  # the draw of items and distractors: fixed, so the task is the same task in every run
MAX_ITEMS = 400  # next_line items at most: enough for a standard error of about 0.025 on accuracy
CHOICES = 4
MAX_PASSAGE_CHARS = 400  # a longer passage is cut at a word boundary: a context keeps its end, a choice its start
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def task_data_files(data_dir: str) -> tuple[str, ...]:
    """The files ``build_task_data`` makes in ``data_dir``, by path."""
    return tuple(f"{data_dir}/{name}" for name in (HELDOUT_FILE, NEXT_LINE_FILE))


def build_task_data(corpus_dir: Path, out_dir: Path) -> dict[str, Path]:
    """Write the built-in tasks' data files into ``out_dir``; return {file name: path}."""
    in_split_order = list(read_documents(corpus_dir, "test", ["sha256", "text"]))
    if not in_split_order:
        raise SolomonError(f"{corpus_dir}: the test split is empty; raise corpus.split.test")
    heldout = [{"text": d["text"]} for d in in_split_order]
    by_digest = sorted(in_split_order, key=lambda d: d["sha256"])
    items = next_line_items([passages(d["text"]) for d in by_digest])
    paths = {HELDOUT_FILE: out_dir / HELDOUT_FILE, NEXT_LINE_FILE: out_dir / NEXT_LINE_FILE}
    write_text(paths[HELDOUT_FILE], _json_lines(heldout))
    write_text(paths[NEXT_LINE_FILE], _json_lines(items))
    return paths


def passages(text: str) -> list[str]:
    """A document's passages: its non-empty lines, or its sentences when it is one line."""
    lines = [line.strip() for line in text.split("\n") if line.strip()]
    if len(lines) == 1:
        lines = [s.strip() for s in _SENTENCE_END.split(lines[0]) if s.strip()]
    return lines


def next_line_items(documents: list[list[str]]) -> list[dict]:
    """Items {"context", "choices", "label"}: a passage, and its successor among three passages of other
    documents at a position drawn per item."""
    candidates = [(d, i) for d, lines in enumerate(documents) for i in range(1, len(lines))]
    others = [(d, i) for d, lines in enumerate(documents) for i in range(len(lines))]
    if len(documents) < 2 or not candidates:
        raise SolomonError(
            "the test split has too few documents or passages for the next_line task (two documents, one of two "
            "lines at least): raise corpus.split.test, or drop tasks/solomon_next_line.yaml from eval.tasks"
        )
    rng = np.random.default_rng(SEED)
    picked = sorted(rng.choice(len(candidates), size=min(MAX_ITEMS, len(candidates)), replace=False).tolist())
    items = []
    for index in picked:
        d, i = candidates[index]
        pool = [other for other in others if other[0] != d]
        drawn = rng.choice(len(pool), size=min(CHOICES - 1, len(pool)), replace=False).tolist()
        distractors = [_head(documents[pool[k][0]][pool[k][1]]) for k in drawn]
        label = int(rng.integers(len(distractors) + 1))
        choices = [*distractors[:label], _head(documents[d][i]), *distractors[label:]]
        items.append({"context": _tail(documents[d][i - 1]), "choices": choices, "label": label})
    return items


def _head(text: str) -> str:
    if len(text) <= MAX_PASSAGE_CHARS:
        return text
    cut = text[:MAX_PASSAGE_CHARS]
    return cut[: cut.rfind(" ")] if " " in cut else cut


def _tail(text: str) -> str:
    if len(text) <= MAX_PASSAGE_CHARS:
        return text
    cut = text[-MAX_PASSAGE_CHARS:]
    return cut[cut.find(" ") + 1 :] if " " in cut else cut


def _json_lines(records: list[dict]) -> str:
    return "".join(json.dumps(record, ensure_ascii=False, sort_keys=True) + "\n" for record in records)
