"""A promoted run as an MLflow model with the ``python_function`` flavour, so that ``mlflow models serve -m
models:/<name>@<alias>`` answers ``/invocations`` and ``mlflow.pyfunc.load_model(...).predict(...)`` works.

Only MLflow's model format is written here; the loading is ``solomon.export.pyfunc`` (named, not imported: it
sits above tracking), which verifies every file against the manifest before using it. The signature takes a
``prompt`` column and the params ``max_tokens``, ``temperature``, ``top_k`` and ``seed`` (defaults: the run's own
``train.samples``; seed 0), and answers one string a prompt: the prompt and its continuation.
"""

from __future__ import annotations

from pathlib import Path

import mlflow.pyfunc
import safetensors
import tokenizers
import torch
from mlflow.models import Model, ModelSignature
from mlflow.types.schema import ColSpec, ParamSchema, ParamSpec, Schema

from solomon.records import WEIGHTS

LOADER_MODULE = "solomon.export.pyfunc"
FLAVOR = "solomon"  # the run's own flavour beside python_function: what the weights are and their SHA256


def artifact_path(manifest_sha256: str) -> str:
    """Stored by manifest digest: a registered version's source never changes under it."""
    return f"pyfunc/{manifest_sha256[:16]}"


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
