"""Verify a run, then load what serving needs — model, tokenizer, hyperparameters — from the very paths verify
hashed. ``solomon generate`` and ``solomon serve`` both load through here, so neither ever reads a file that did
not verify.

A workspace whose ``dvc.lock`` is another run's (verify's status 3) is acceptable: verify then locates the run's
own weights, config and tokenizer in the DVC cache and hashes them there, and those are the paths loaded; the
difference is kept in ``Served.workspace`` so the provenance says so. So is a workspace without a ``dvc.lock``
(status 3 too: its files are hashed where they are), unless the caller declares that the root holds only the run's
files (``dvc_lock=False``: the serving image, ``solomon serve --no-dvc-lock``). Any ``FAIL`` refuses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import torch
from tokenizers import Tokenizer

from solomon import __version__, records
from solomon.audit.verify import Result, require_verified, summary
from solomon.data.tokens import load_tokenizer
from solomon.model import weights
from solomon.model.gpt import GPT
from solomon.params import read_yaml
from solomon.records import RunFiles
from solomon.runtime import configure_torch
from solomon.serving.limits import DEFAULT_PRECISION
from solomon.serving.precision import in_precision

# What generation reads: the serving files and the run's hyperparameters (sampling defaults, end-of-document token).
LOADED = (*records.SERVING_FILES, RunFiles.HYPERPARAMETERS)


@dataclass
class Served:
    """A loaded model and what it is: the facts ``/v1/provenance`` reports."""

    model: GPT
    tokenizer: Tokenizer
    stop_id: int | None  # the end-of-document token
    samples: dict  # the run's train.samples: default temperature, top_k, max_new_tokens
    run_id: str
    manifest_sha256: str
    files: dict[str, dict]  # loaded subject -> {"sha256", "verified_in"}
    git: dict
    verified: str  # verify's summary line
    verified_utc: str
    threads: int
    precision: str  # fp32 or bf16: what the model computes in (solomon.serving.precision)
    workspace: list[str] = field(default_factory=list)  # how the workspace's dvc.lock differs from the run's
    registry: dict | None = None  # name, version, alias when served from the registry

    @property
    def weights_sha256(self) -> str:
        return self.files[records.WEIGHTS]["sha256"]

    def provenance(self) -> dict:
        return {
            "run_id": self.run_id,
            "manifest_sha256": self.manifest_sha256,
            "weights_sha256": self.weights_sha256,
            "files": self.files,
            "registry": self.registry,
            "git": self.git,
            "verified_utc": self.verified_utc,
            "verified": self.verified,
            "workspace_dvc_lock_differs": self.workspace,
            "solomon_version": __version__,
            "torch_version": torch.__version__,
            "threads": self.threads,
            "precision": self.precision,
        }


def load_verified(
    run_dir: Path,
    root: Path,
    expect_digest: str | None = None,
    threads: int = 1,
    registry: dict | None = None,
    dvc_lock: bool = True,
    precision: str = DEFAULT_PRECISION,
) -> Served:
    """Verify the files serving reads of ``run_dir`` (against ``expect_digest`` when given; ``dvc_lock=False``:
    ``root`` holds only the run's files, as in the serving image), then load them from the paths verify hashed.
    Any problem refuses (SolomonError, one line). The model computes in ``precision`` (fp32 or bf16)."""
    result = require_verified(
        run_dir, root, f"refusing to load {run_dir}", names=set(LOADED), expect_digest=expect_digest, dvc_lock=dvc_lock
    )
    return load_from(result, threads, registry, precision)


def load_from(
    result: Result, threads: int = 1, registry: dict | None = None, precision: str = DEFAULT_PRECISION
) -> Served:
    """What serving needs, loaded from the paths a verification without problems hashed (``load_verified``'s, or a
    caller's that verified the whole run already, as ``solomon lineage`` does)."""
    if result.problems or not set(LOADED) <= result.files.keys():
        raise ValueError(f"load_from takes a verification of {', '.join(LOADED)} without problems")
    files = {name: result.files[name] for name in LOADED}
    hyper = read_yaml(files[RunFiles.HYPERPARAMETERS])
    configure_torch(threads)
    model = in_precision(weights.load_files(files[records.MODEL_CONFIG], files[records.WEIGHTS]), precision)
    tokenizer = load_tokenizer(files[records.TOKENIZER])
    recorded = {s["name"]: s["digest"]["sha256"] for s in result.statement["subject"]}
    return Served(
        model=model,
        tokenizer=tokenizer,
        stop_id=tokenizer.token_to_id(hyper["tokenizer"]["eod_token"]),
        samples=hyper["train"]["samples"],
        run_id=result.run_id,
        manifest_sha256=result.digest,
        files={name: {"sha256": recorded[name], "verified_in": result.where[name]} for name in sorted(files)},
        git=result.statement["predicate"].get("git", {}),
        verified=summary(result),
        verified_utc=datetime.now(UTC).isoformat(timespec="seconds"),
        threads=threads,
        precision=precision,
        workspace=result.workspace,
        registry=registry,
    )
