"""Exports of a verified run (Hugging Face, GGUF, MLflow) that carry its manifest digest and map back to its
weights: one registry of formats, each format's writing and its verifying side by side in its own module."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

HF, GGUF, MLFLOW = "hf", "gguf", "mlflow"


@dataclass(frozen=True)
class Format:
    """An export format: what it is, and the module that holds its ``write(source, root, out) -> Path`` (the path
    written) and its ``verify(export_dir, provenance, source, root) -> str`` (what was checked)."""

    description: str
    module: str  # imported when used: MLflow's pulls in mlflow
    every_subject: bool = False  # it carries the whole run directory, so every subject of the run is verified

    def load(self) -> ModuleType:
        return importlib.import_module(self.module)


# The one list `solomon export --format`, provenance.json and `solomon verify --export` know.
FORMATS = {
    HF: Format(
        "a directory transformers loads with AutoTokenizer and as the family's class (GPT2LMHeadModel, "
        "LlamaForCausalLM, Qwen3ForCausalLM with QK-norm), with a model card",
        "solomon.export.hf",
    ),
    GGUF: Format(
        "model.gguf for llama.cpp (architecture gpt2, llama or qwen3 by the family; fp32)", "solomon.export.gguf_file"
    ),
    MLFLOW: Format(
        "an MLflow python_function model directory (`mlflow models serve -m DIR`, `mlflow.pyfunc.load_model`), "
        "the very model `solomon promote` registers",
        "solomon.export.mlflow_model",
        every_subject=True,
    ),
}


def export(kind: str, run_dir: Path, root: Path, out: Path) -> Path:
    """Verify ``run_dir``, then write its ``kind`` export to ``out`` (staged: a refusal writes nothing); the path
    written: the export's directory, or GGUF's file in it."""
    from solomon.export.source import verified_source  # the run's verification loads torch and the model

    found = FORMATS[kind]
    return found.load().write(verified_source(run_dir, root, every_subject=found.every_subject), root, out)
