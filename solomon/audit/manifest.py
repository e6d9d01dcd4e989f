"""The run's SHA256 manifest: an in-toto Statement v1 over every artifact of the run.

Subjects are the weights, the tokenizer, the raw corpus, the prepared and encoded splits, the replay anchors, the
data files of the scored benchmark tasks (found in the workspace, or in the DVC cache once the workspace has moved
on) and the files of the run directory itself, the scored tasks' files among them. The predicate says how they were
made: git commit, dvc.lock and its stage entries, requirements.lock, versions, the machine (CPU, its kind: what
selects the kernels, ``solomon.machine``), threads, seeds, the MLflow run, times. ``manifest.json`` is canonical
JSON (sorted keys, two-space indent, UTF-8, one trailing newline), so its SHA256 — the run's identity — is a
function of its content alone.

``index.html`` and ``README.md`` show that digest, so they are views outside the manifest; everything they
show comes from files it covers. The subject names are relative POSIX paths: a run directory's files by their
name in it, pipeline outputs and raw corpus files by their repository path (the default corpus by its package
resource name), which ``verify`` holds to.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

import solomon
from solomon import records
from solomon.atomic import canonical_json
from solomon.hashing import sha256_file
from solomon.machine import cpu_model, describe
from solomon.params import read_yaml
from solomon.records import RunFiles, run_file_role

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "urn:solomon:training-run:v1"
# Files of the run directory that are not its subjects: the manifest itself, the pages that show its digest, and
# the promotion record (and its signature) written after it. verify says how each is bound instead.
NOT_SUBJECTS = (RunFiles.MANIFEST, *RunFiles.PAGES, RunFiles.PROMOTION, RunFiles.PROMOTION_SIGNATURE)
RUN = "run"  # location of a subject in the run directory (name relative to it)
WORKSPACE = "workspace"  # a pipeline output, relative to the repository root; also in the DVC cache
CORPUS = "corpus"  # a raw corpus file, relative to the repository root or inside an installed package


@dataclass(frozen=True)
class Subject:
    name: str
    role: str
    location: str
    path: Path  # where it is now, to hash it

    def descriptor(self) -> dict:
        return {
            "name": self.name,
            "digest": {"sha256": sha256_file(self.path)},
            "annotations": {"role": self.role, "location": self.location, "size": self.path.stat().st_size},
        }


def encode(statement: dict) -> bytes:
    return canonical_json(statement).encode("utf-8")


def digest_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def dvc_stages(lock_path: Path, exclude: tuple[str, ...] = ("report",)) -> dict:
    """dvc.lock's stage entries (commands, deps, params, outs with their MD5s) as they stood for this run. The
    report stage's own entry is excluded: it is being written by this very run."""
    lock = read_yaml(lock_path)
    return {name: entry for name, entry in lock.get("stages", {}).items() if name not in exclude}


def workspace_subjects(root: Path, corpus_files: list[tuple[str, Path]]) -> list[Subject]:
    """The pipeline's outputs this run used (weights, tokenizer, splits) and its raw corpus files."""
    subjects = [
        Subject(name, role, WORKSPACE, root / name)
        for name, role in (
            (records.WEIGHTS, "weights"),
            (records.MODEL_CONFIG, "model-config"),
            (records.TOKENIZER, "tokenizer"),
        )
    ]
    for folder, role in ((records.TOKENS_DIR, "encoded-split"), (records.CORPUS_DIR, "prepared-corpus")):
        subjects += [
            Subject(f"{folder}/{path.name}", role, WORKSPACE, path) for path in sorted((root / folder).iterdir())
        ]
    subjects += [Subject(name, "raw-corpus", CORPUS, path) for name, path in corpus_files]
    anchors = root / records.ANCHORS_DIR  # none for a run trained before anchors were kept
    if anchors.is_dir():
        subjects += [
            Subject(f"{records.ANCHORS_DIR}/{path.name}", records.ANCHOR_ROLE, WORKSPACE, path)
            for path in sorted(anchors.iterdir())
        ]
    return subjects


def task_data_subjects(root: Path, tasks: dict) -> list[Subject]:
    """The data files the scored tasks read (metrics.json's ``tasks`` section), by repository path."""
    names = sorted({name for section in tasks.values() for name in section.get("data_sha256", {})})
    return [Subject(name, records.TASK_DATA_ROLE, WORKSPACE, root / name) for name in names]


def run_subjects(run_dir: Path) -> list[Subject]:
    """Every file of the run directory except the manifest and the pages that show its digest."""
    return [
        Subject(path.name, run_file_role(path.name), RUN, path)
        for path in sorted(run_dir.iterdir())
        if path.is_file() and path.name not in NOT_SUBJECTS
    ]


def build(subjects: list[Subject], predicate: dict) -> dict:
    return {
        "_type": STATEMENT_TYPE,
        "subject": [s.descriptor() for s in subjects],
        "predicateType": PREDICATE_TYPE,
        "predicate": predicate,
    }


def environment(train_threads: int, eval_threads: int) -> dict:
    return {
        "solomon": solomon.__version__,
        "python": platform.python_version(),
        "torch": str(torch.__version__),
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "machine": describe(),  # the report's process; train_metrics.json has the kinds that trained each step
        "cpu_count": os.cpu_count(),
        "threads": {"train": train_threads, "eval": eval_threads},
        "byteorder": sys.byteorder,
    }


def read(run_dir: Path) -> tuple[dict, bytes]:
    data = (run_dir / RunFiles.MANIFEST).read_bytes()
    return json.loads(data), data
