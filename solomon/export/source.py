"""The run an export is made from: verified with the audit chain first, then read only from the paths verify
hashed (as ``solomon serve`` loads), so an export never carries a byte that did not verify."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import torch
from tokenizers import Tokenizer

from solomon import records
from solomon.audit.verify import require_verified
from solomon.data.tokens import load_tokenizer
from solomon.model import weights
from solomon.model.gpt import GPT
from solomon.params import read_yaml
from solomon.records import RunFiles

# The run files an export is made from: the model, its tokenizer, and the run's records the card and the
# generation settings come from.
SOURCES = (
    records.WEIGHTS,
    records.MODEL_CONFIG,
    records.TOKENIZER,
    RunFiles.HYPERPARAMETERS,
    RunFiles.METRICS,
    RunFiles.DATACARD_JSON,
)


@dataclass(frozen=True)
class ExportSource:
    """A run as an export reads it: its identity, and its files at the paths verify hashed; the model, tokenizer
    and hyperparameters are read from those paths when first asked for."""

    run_dir: Path
    run_id: str
    manifest_sha256: str
    files: dict[str, Path]  # subject name -> the path verify hashed
    sha256: dict[str, str]  # subject name -> its SHA256, as the manifest records and verify checked
    git: dict

    @cached_property
    def model(self) -> GPT:
        return weights.load_files(self.files[records.MODEL_CONFIG], self.files[records.WEIGHTS])

    @cached_property
    def state(self) -> dict[str, torch.Tensor]:
        """The run's tensors by Solomon's names, the tied output projection once (as ``wte.weight``)."""
        return {name: t for name, t in self.model.state_dict().items() if name != weights.TIED}

    @cached_property
    def hyperparameters(self) -> dict:
        return read_yaml(self.files[RunFiles.HYPERPARAMETERS])

    @cached_property
    def tokenizer(self) -> Tokenizer:
        return load_tokenizer(self.files[records.TOKENIZER])

    @property
    def eod_token(self) -> str:
        return self.hyperparameters["tokenizer"]["eod_token"]

    @property
    def eod_id(self) -> int:
        return self.tokenizer.token_to_id(self.eod_token)

    def record(self, name: str) -> dict:
        return json.loads(self.files[name].read_text(encoding="utf-8"))


def verified_source(
    run_dir: Path, root: Path, expect_digest: str | None = None, every_subject: bool = False
) -> ExportSource:
    """Verify ``run_dir`` (its manifest, and the export's source files by their SHA256; ``every_subject``: all of
    the manifest's, for an export that carries the whole run directory); refuses in one line."""
    names = None if every_subject else set(SOURCES)
    result = require_verified(run_dir, root, f"{run_dir} does not verify", names=names, expect_digest=expect_digest)
    recorded = {s["name"]: s["digest"]["sha256"] for s in result.statement["subject"]}
    return ExportSource(
        run_dir=run_dir,
        run_id=result.run_id,
        manifest_sha256=result.digest,
        files=dict(result.files),
        sha256={name: recorded[name] for name in SOURCES},
        git=result.statement["predicate"].get("git", {}),
    )
