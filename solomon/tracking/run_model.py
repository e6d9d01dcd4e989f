"""A promoted run as an MLflow model with the ``python_function`` flavour, so that ``mlflow models serve -m
models:/<name>@<alias>`` answers ``/invocations`` and ``mlflow.pyfunc.load_model(...).predict(...)`` works.
``build`` is the one builder: ``solomon promote`` logs what it writes, ``solomon export --format mlflow`` writes it
to a directory (with provenance.json beside).

Only MLflow's model format is written here; the loading is ``solomon.export.pyfunc`` (named, not imported: it
sits above tracking), which verifies every file against the manifest before using it. The signature takes a
``prompt`` column and the params ``max_tokens``, ``temperature``, ``top_k`` and ``seed`` (defaults: the run's own
``train.samples``; seed 0), and answers one string a prompt: the prompt and its continuation.
"""

from __future__ import annotations

import shutil
import tempfile
import warnings
from pathlib import Path

import mlflow.pyfunc
import safetensors
import tokenizers
import torch
from mlflow.models import Model, ModelSignature
from mlflow.types.schema import ColSpec, ParamSchema, ParamSpec, Schema

from solomon.params import read_yaml, runs_root
from solomon.records import SERVING_FILES, WEIGHTS, RunFiles

LOADER_MODULE = "solomon.export.pyfunc"
FLAVOR = "solomon"  # the run's own flavour beside python_function: what the weights are and their SHA256
ROOT = "root"  # the serving root's name: MLflow copies it to data/root
ROOT_EXCLUDES = (RunFiles.PROMOTION, "*.sig")  # run-directory files made after promotion: not the model's


def artifact_path(manifest_sha256: str) -> str:
    """Stored by manifest digest: a registered version's source never changes under it."""
    return f"pyfunc/{manifest_sha256[:16]}"


def run_path(root: Path, run_id: str) -> str:
    """The run directory's path inside the serving root: its path in the repository, as the image holds it."""
    return f"{runs_root(root)}/{run_id}"


def served_root(model: Path) -> Path:
    """Where the MLflow model at ``model`` holds its serving root."""
    return model / "data" / ROOT


def serving_root(run_dir: Path, run_path: str, verified: dict[str, Path], into: Path) -> Path:
    """``into`` laid out as the serving image's root: the run directory at ``run_path`` and the files serving
    loads at their repository paths, copied from where verify found them (what the pyfunc model holds)."""
    shutil.copytree(run_dir, into / run_path, ignore=shutil.ignore_patterns(*ROOT_EXCLUDES))
    for name in SERVING_FILES:
        (into / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(verified[name], into / name)
    return into


def signature(samples: dict) -> ModelSignature:
    return ModelSignature(
        inputs=Schema([ColSpec("string", "prompt")]),
        outputs=Schema([ColSpec("string", "text")]),
        params=ParamSchema(
            [
                ParamSpec("max_tokens", "long", int(samples["max_new_tokens"])),
                ParamSpec("temperature", "double", float(samples["temperature"])),
                ParamSpec("top_k", "long", int(samples["top_k"] or 0)),
                ParamSpec("seed", "long", 0),
            ]
        ),
    )


def save(path: Path, root: Path, run_path: str, manifest_sha256: str, weights_sha256: str, samples: dict) -> None:
    """Write the MLflow model at ``path`` around the serving root ``root`` (the run directory at ``run_path``
    and the files serving loads, as the serving image holds them; MLflow copies it to ``data/<root's name>``)."""
    model = Model()
    weights = f"data/{root.name}/{WEIGHTS}"
    model.add_flavor(FLAVOR, weights=weights, weights_sha256=weights_sha256, loader=LOADER_MODULE)
    with warnings.catch_warnings():  # MLflow asks for an input example to infer a signature from: it is given
        warnings.filterwarnings("ignore", message=".*An input example was not provided")
        mlflow.pyfunc.save_model(
            str(path),
            loader_module=LOADER_MODULE,
            data_path=str(root),
            mlflow_model=model,
            signature=signature(samples),
            pip_requirements=[
                f"torch=={torch.__version__}",
                f"tokenizers=={tokenizers.__version__}",
                f"safetensors=={safetensors.__version__}",
                f"mlflow=={mlflow.__version__}",
            ],
            metadata={"solomon.run_dir": run_path, "manifest.sha256": manifest_sha256},
            model_config={"run_dir": run_path, "manifest_sha256": manifest_sha256},
        )


def build(
    path: Path, run_dir: Path, root: Path, verified: dict[str, Path], manifest_sha256: str, weights_sha256: str
) -> Path:
    """The MLflow model of a verified run at ``path`` (new or empty), from the files verify found and hashed
    (``verified``, the hyperparameters among them): what `solomon promote` logs and `solomon export --format
    mlflow` writes, one builder for both."""
    where = run_path(root, run_dir.name)
    samples = read_yaml(verified[RunFiles.HYPERPARAMETERS])["train"]["samples"]
    with tempfile.TemporaryDirectory() as tmp:
        serving = serving_root(run_dir, where, verified, Path(tmp) / ROOT)
        save(path, serving, where, manifest_sha256, weights_sha256, samples)
    return path
