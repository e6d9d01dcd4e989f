"""Logs a run directory (``reports/training/<run-id>/``) to MLflow after the fact, adding only what is missing:
params, every step's metrics, evaluations, samples, held-out metrics, the corpus as a dataset input, the report and
the model (with an ``MLmodel`` that describes it).

The report stage calls it, and so does ``solomon track sync <run-id>`` after an outage; ``solomon promote``
registers the MLflow run it returns. A run the live tracker already closed keeps its status and times: a sync or a
promotion months later does not make a 31-second run last months.
"""

from __future__ import annotations

import time
from pathlib import Path

from mlflow.entities import Metric, RunStatus
from mlflow.models import Model

from solomon.hashing import sha256_file
from solomon.params import Params, read_yaml
from solomon.records import (
    CONFIG_FILE,
    DVC_LOCK,
    WEIGHTS_FILE,
    RunFiles,
    read_evals,
    read_json,
    read_steps,
    read_system,
)
from solomon.tracking import store

MLMODEL = "MLmodel"  # MLflow's description of a model directory, beside the weights
MODEL_FLAVOR = "solomon"  # loaded by `solomon serve --model models:/<name>@<alias>`, which verifies first


def _matching_model_dir(run_info: dict, model_dir: Path | None) -> Path | None:
    """The model directory only if it still holds the weights this run recorded (never log another model)."""
    if model_dir is None or not (model_dir / WEIGHTS_FILE).is_file():
        return None
    expected = run_info["sha256"].get("model")
    return model_dir if sha256_file(model_dir / WEIGHTS_FILE) == expected else None


def _mlmodel(mlflow_run: str, artifact_path: str, model_sha: str) -> str:
    """The ``MLmodel`` of a model directory: what its files are and the weights' SHA256 (a deterministic uuid
    from it). Written once per model directory, so a registered version's source never changes."""
    flavor = {"weights": WEIGHTS_FILE, "config": CONFIG_FILE, "weights_sha256": model_sha, "loader": "solomon serve"}
    model = Model(artifact_path=artifact_path, run_id=mlflow_run, model_uuid=model_sha[:32])
    model.add_flavor(MODEL_FLAVOR, **flavor)
    return model.to_yaml()


def sync_run(run_dir: Path, root: Path = Path("."), model_dir: Path | None = None) -> str:
    """Log ``run_dir`` (and ``model_dir``, when it holds this run's weights) to MLflow, adding only what is
    missing; return the MLflow run id."""
    run_info = read_json(run_dir / RunFiles.RUN_INFO)
    run_id = run_info["run_id"]
    model_sha = run_info["sha256"]["model"]
    tags = store.source_tags(run_info["git"]) | {store.MODEL_TAG: model_sha}
    lock = root / DVC_LOCK
    if lock.is_file():
        tags["dvc.lock.sha256"] = sha256_file(lock)
    hyperparameters = read_yaml(run_dir / RunFiles.HYPERPARAMETERS)
    client, mlflow_run = store.open_run(run_id, tags, store.param_values(hyperparameters), root)

    steps = read_steps(run_dir / RunFiles.STEP_LOG)
    evals = read_evals(run_dir / RunFiles.EVAL_LOG)
    start_ms = client.get_run(mlflow_run).info.start_time
    history = store.history_metrics(steps, evals, start_ms)
    if (run_dir / RunFiles.SYSTEM_LOG).is_file():  # runs reported before the system log have none
        history += store.recorded_system_metrics(read_system(run_dir / RunFiles.SYSTEM_LOG))
    missing = store.missing_metrics(client, mlflow_run, history)

    # Held-out metrics belong to the model at the final step; a re-evaluation logs a new value only if it differs.
    final_step = max((int(row["step"]) for row in steps), default=0)
    for key, value in store.held_out_metrics(read_json(run_dir / RunFiles.METRICS)).items():
        history = sorted(
            (m.timestamp, m.value) for m in client.get_metric_history(mlflow_run, key) if m.step == final_step
        )
        if not history or history[-1][1] != value:
            missing.append(Metric(key, value, int(time.time() * 1000), final_step))
    for i in range(0, len(missing), store.BATCH):
        client.log_batch(mlflow_run, metrics=missing[i : i + store.BATCH])

    for record in store.missing_samples(client, mlflow_run, evals):
        client.log_text(mlflow_run, store.samples_markdown(record), store.samples_path(record["step"]))
    dataset = store.corpus_dataset(read_json(run_dir / RunFiles.DATACARD_JSON))
    if dataset is not None:
        store.log_dataset_once(client, mlflow_run, dataset)
    client.log_artifacts(mlflow_run, str(run_dir), store.REPORT_DIR)
    model = _matching_model_dir(run_info, model_dir)
    if model is not None:
        source = store.model_artifact_path(model_sha)
        client.log_artifacts(mlflow_run, str(model), source)
        if not any(a.path == f"{source}/{MLMODEL}" for a in client.list_artifacts(mlflow_run, source)):
            client.log_text(mlflow_run, _mlmodel(mlflow_run, source, model_sha), f"{source}/{MLMODEL}")
    finished = RunStatus.to_string(RunStatus.FINISHED)
    if client.get_run(mlflow_run).info.status != finished:  # closing it again would move its end time to now
        client.set_terminated(mlflow_run, finished)
    return mlflow_run


def sync_or_warn(run_dir: Path, root: Path = Path("."), model_dir: Path | None = None) -> str | None:
    """``sync_run`` for the pipeline: an unreachable or failing tracking store is a warning, never an error."""
    try:
        return sync_run(run_dir, root, model_dir)
    except Exception as exc:
        store.warn(
            f"could not log run {run_dir.name} to {store.public_uri(root)} ({store.error_line(exc)}); "
            f"it is recorded in {run_dir}; replay with `solomon track sync {run_dir.name}`"
        )
        return None


def open_run_or_warn(run_id: str, params: Params, root: Path = Path(".")) -> str | None:
    """The MLflow run id of ``run_id`` (created if training could not log it), for the manifest; None, with a
    warning, when the store cannot be reached."""
    try:
        return store.open_run(run_id, store.source_tags(), store.param_values(params.model_dump(mode="json")), root)[1]
    except Exception as exc:
        store.warn(
            f"cannot reach {store.public_uri(root)} ({store.error_line(exc)}); the manifest records no MLflow run id"
        )
        return None
