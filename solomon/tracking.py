"""MLflow tracking: the only module that imports mlflow.

A run directory (``reports/training/<run-id>/``) is the record of truth; ``sync_run`` copies it into MLflow —
params, every step's metrics, evaluations, sample generations, the data card and the report — as one MLflow
run tagged with the run id. It is idempotent: it finds that MLflow run again and adds only what is missing,
so after an outage ``solomon track sync <run-id>`` completes the history without duplicates.

Where: ``MLFLOW_TRACKING_URI`` when set (a server such as ``http://127.0.0.1:5000``, or any database URI);
otherwise the embedded default, SQLite in ``mlflow.db`` at the repository root with artifacts in
``mlartifacts/`` beside it. Never the deprecated ``./mlruns`` file store.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

# Fail fast instead of retrying for minutes when a server is down: tracking must never hold up a run.
os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")

from mlflow.entities import Metric, Param, RunStatus, RunTag
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from solomon.errors import SolomonError
from solomon.hashing import sha256_file
from solomon.params import flatten
from solomon.train.run_log import read_evals, read_steps

EXPERIMENT = "solomon"
RUN_ID_TAG = "solomon.run_id"
STEP_METRICS = {
    "loss": "train/loss",
    "lr": "train/lr",
    "grad_norm": "train/grad_norm",
    "tokens_per_s": "train/tokens_per_s",
}
BATCH = 500  # MLflow accepts at most 1000 metrics per log_batch call


def workspace_root(root: Path) -> Path:
    """The repository whose ``mlflow.db`` is the default store. ``dvc exp run --temp`` and queued experiments
    run in a copy under ``<repo>/.dvc/tmp/exps/``; they log to the workspace's store, not the copy's."""
    parts = root.resolve().parts
    for i in range(len(parts) - 2):
        if parts[i : i + 3] == (".dvc", "tmp", "exps"):
            return Path(*parts[:i])
    return root.resolve()


def tracking_uri(root: Path = Path(".")) -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{workspace_root(root) / 'mlflow.db'}"


def _experiment_id(client: MlflowClient, uri: str, root: Path) -> str:
    name = os.environ.get("MLFLOW_EXPERIMENT_NAME", EXPERIMENT)
    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        return experiment.experiment_id
    # Embedded SQLite keeps artifacts beside the database; a server decides for itself.
    location = (workspace_root(root) / "mlartifacts").as_uri() if uri.startswith("sqlite:") else None
    return client.create_experiment(name, artifact_location=location)


def _find_or_create_run(client: MlflowClient, experiment_id: str, run_info: dict, tags: dict[str, str]) -> str:
    run_id = run_info["run_id"]
    found = client.search_runs([experiment_id], filter_string=f"tags.`{RUN_ID_TAG}` = '{run_id}'", max_results=1)
    if found:
        return found[0].info.run_id
    name = f"{os.environ['DVC_EXP_NAME']}-{run_id}" if os.environ.get("DVC_EXP_NAME") else run_id
    return client.create_run(experiment_id, run_name=name, tags=tags).info.run_id


def _tags(run_info: dict, root: Path) -> dict[str, str]:
    tags = {
        RUN_ID_TAG: run_info["run_id"],
        "git.commit": str(run_info["git"]["commit"]),
        "git.dirty": str(run_info["git"]["dirty"]),
    }
    for env, tag in (("DVC_EXP_NAME", "dvc.exp_name"), ("DVC_EXP_BASELINE_REV", "dvc.exp_baseline_rev")):
        if os.environ.get(env):
            tags[tag] = os.environ[env]
    lock = root / "dvc.lock"
    if lock.is_file():
        tags["dvc.lock.sha256"] = sha256_file(lock)
    return tags


def _metrics(run_dir: Path, base_ms: int) -> list[Metric]:
    """Every metric of the run with a deterministic timestamp (creation time + step ms), so replays match."""
    metrics = []
    for row in read_steps(run_dir / "train_log.tsv"):
        step = int(row["step"])
        metrics += [Metric(key, row[column], base_ms + step, step) for column, key in STEP_METRICS.items()]
    for record in read_evals(run_dir / "train_evals.jsonl"):
        step = record["step"]
        for name in ("val_loss", "val_perplexity", "val_bits_per_byte"):
            metrics.append(Metric(f"eval/{name}", record[name], base_ms + step, step))
    final_step = max((m.step for m in metrics), default=0)
    held_out = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
    for split, values in held_out.items():
        for name in ("loss", "perplexity", "bits_per_byte", "accuracy"):
            metrics.append(Metric(f"{split}/{name}", values[name], base_ms + final_step, final_step))
    return metrics


def _samples_markdown(run_dir: Path) -> str:
    lines = ["# Samples at each evaluation", ""]
    for record in read_evals(run_dir / "train_evals.jsonl"):
        lines.append(f"## step {record['step']}")
        lines += [f"- **{s['prompt']}**{s['completion']}" for s in record["samples"]]
        lines.append("")
    return "\n".join(lines)


def _matching_model_dir(run_info: dict, model_dir: Path | None) -> Path | None:
    """The model directory only if it still holds the weights this run recorded (never log another model)."""
    if model_dir is None or not (model_dir / "model.safetensors").is_file():
        return None
    expected = run_info["sha256"].get("model")
    return model_dir if sha256_file(model_dir / "model.safetensors") == expected else None


def sync_run(run_dir: Path, root: Path = Path("."), model_dir: Path | None = None) -> str:
    """Log ``run_dir`` (and ``model_dir``, when it holds this run's weights) to MLflow, idempotently; return
    the MLflow run id."""
    uri = tracking_uri(root)
    client = MlflowClient(tracking_uri=uri)
    run_info = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    experiment_id = _experiment_id(client, uri, root)
    tags = _tags(run_info, root)
    mlflow_run = _find_or_create_run(client, experiment_id, run_info, tags)

    hyperparameters = json.loads((run_dir / "hyperparameters.json").read_text(encoding="utf-8"))
    params = {k: json.dumps(v) if isinstance(v, list) else str(v) for k, v in flatten(hyperparameters).items()}
    logged = client.get_run(mlflow_run).data
    new_params = [Param(k, v[:6000]) for k, v in sorted(params.items()) if k not in logged.params]
    new_tags = [RunTag(k, v) for k, v in tags.items() if logged.tags.get(k) != v]
    for i in range(0, max(len(new_params), len(new_tags)), 100):
        client.log_batch(mlflow_run, params=new_params[i : i + 100], tags=new_tags[i : i + 100])

    base_ms = client.get_run(mlflow_run).info.start_time
    present: dict[str, set[int]] = {}
    missing = []
    for metric in _metrics(run_dir, base_ms):
        if metric.key not in present:
            present[metric.key] = {m.step for m in client.get_metric_history(mlflow_run, metric.key)}
        if metric.step not in present[metric.key]:
            missing.append(metric)
    for i in range(0, len(missing), BATCH):
        client.log_batch(mlflow_run, metrics=missing[i : i + BATCH])

    client.log_text(mlflow_run, _samples_markdown(run_dir), "samples.md")
    client.log_artifacts(mlflow_run, str(run_dir), "report")
    model = _matching_model_dir(run_info, model_dir)
    if model is not None:
        client.log_artifacts(mlflow_run, str(model), "model")
    client.set_terminated(mlflow_run, RunStatus.to_string(RunStatus.FINISHED))
    return mlflow_run


def sync_or_warn(run_dir: Path, root: Path = Path("."), model_dir: Path | None = None) -> str | None:
    """``sync_run`` for the pipeline: an unreachable or failing tracking store is a warning, never an error."""
    try:
        return sync_run(run_dir, root, model_dir)
    except Exception as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(
            f"warning: tracking: could not log run {run_dir.name} to {tracking_uri(root)} ({reason[:200]}); "
            f"it is recorded in {run_dir}; replay with `solomon track sync {run_dir.name}`",
            file=sys.stderr,
        )
        return None


def register_version(run_id: str, name: str, tags: dict[str, str], root: Path = Path(".")) -> str:
    """Register the model logged with Solomon run ``run_id`` as a new version of ``name``; return the version."""
    client = MlflowClient(tracking_uri=tracking_uri(root))
    experiment = client.get_experiment_by_name(os.environ.get("MLFLOW_EXPERIMENT_NAME", EXPERIMENT))
    runs = (
        []
        if experiment is None
        else client.search_runs(
            [experiment.experiment_id], filter_string=f"tags.`{RUN_ID_TAG}` = '{run_id}'", max_results=1
        )
    )
    if not runs:
        raise SolomonError(f"run {run_id!r} is not in {tracking_uri(root)}: `solomon track sync {run_id}` first")
    mlflow_run = runs[0].info.run_id
    if not any(a.path == "model/model.safetensors" for a in client.list_artifacts(mlflow_run, "model")):
        raise SolomonError(f"MLflow run of {run_id} has no model artifact: sync it from the checkout that trained it")
    try:
        client.create_registered_model(name)
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
    source = f"runs:/{mlflow_run}/model"
    version = client.create_model_version(name, source, run_id=mlflow_run, tags={RUN_ID_TAG: run_id, **tags})
    return version.version


def set_alias(name: str, alias: str, version: str, root: Path = Path(".")) -> None:
    """Point ``alias`` (e.g. ``production``) at ``version`` of ``name``, moving it from any other version."""
    MlflowClient(tracking_uri=tracking_uri(root)).set_registered_model_alias(name, alias, version)


def alias_version(name: str, alias: str, root: Path = Path(".")) -> str:
    return MlflowClient(tracking_uri=tracking_uri(root)).get_model_version_by_alias(name, alias).version
