"""The run an export is made from: verified with the audit chain first, then read only from the paths verify
hashed (as ``solomon serve`` loads), so an export never carries a byte that did not verify."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import torch
import yaml
from tokenizers import Tokenizer

from solomon import records
from solomon.audit.verify import verify
from solomon.data.tokenizer import load_tokenizer
from solomon.errors import SolomonError
from solomon.model import weights
from solomon.model.gpt import GPT
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
class Source:
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
        return yaml.safe_load(self.files[RunFiles.HYPERPARAMETERS].read_text(encoding="utf-8"))

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


def verified_source(run_dir: Path, root: Path, expect_digest: str | None = None) -> Source:
    """Verify ``run_dir`` (its manifest, and the export's source files by their SHA256); refuses in one line."""
    result = verify(run_dir, root, set(SOURCES), expect_digest)
    if result.problems:
        more = f" (and {len(result.problems) - 1} more)" if len(result.problems) > 1 else ""
        raise SolomonError(f"{run_dir} does not verify: {result.problems[0]}{more}; run `solomon verify {run_dir}`")
    recorded = {s["name"]: s["digest"]["sha256"] for s in result.statement["subject"]}
    return Source(
        run_dir=run_dir,
        run_id=result.run_id,
        manifest_sha256=result.digest,
        files=dict(result.files),
        sha256={name: recorded[name] for name in SOURCES},
        git=result.statement["predicate"].get("git", {}),
    )
