"""Where the tracking store is, and what every other tracking module builds on.

- the store: ``tracking_uri`` (``MLFLOW_TRACKING_URI``, else SQLite in the workspace's ``mlflow.db``),
  ``workspace_root``, ``ensure_sqlite_store`` and ``public_uri``;
- the MLflow run of a training run: ``find_run`` looks it up by its tag ``solomon.run_id``, ``open_run`` also
  creates it and gives it the params and tags it lacks;
- what a run's records become in MLflow: params and tags (``param_values``, ``source_tags``), step and
  evaluation metrics, sample pages.

Every tracking module imports this one before mlflow: it sets MLflow's HTTP defaults.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

# Fail fast instead of retrying for minutes when a server is down: tracking must never hold up a run.
os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")

from mlflow.entities import Metric, Param, RunTag
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from solomon.params import flatten
from solomon.provenance import git_state

EXPERIMENT = "solomon"  # unless MLFLOW_EXPERIMENT_NAME names another
RUN_ID_TAG = "solomon.run_id"  # the training run id: one MLflow run per training run
MODEL_TAG = "model.sha256"  # the model of the newest report logged to the run
STEP_METRICS = {
    "loss": "train/loss",
    "lr": "train/lr",
    "grad_norm": "train/grad_norm",
    "tokens_per_s": "train/tokens_per_s",
}
EVAL_METRICS = ("val_loss", "val_perplexity", "val_bits_per_byte")
BATCH = 500  # MLflow accepts at most 1000 metrics per log_batch call


# --- where the store is ----------------------------------------------------------------------------------------
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


def public_uri(root: Path = Path(".")) -> str:
    """The tracking URI without any credentials in it, for records."""
    uri = tracking_uri(root)
    parts = urlsplit(uri)
    if not (parts.username or parts.password):
        return uri  # unchanged: urlunsplit would turn sqlite://// into sqlite://
    return urlunsplit(parts._replace(netloc=parts.hostname + (f":{parts.port}" if parts.port else "")))


def connect(root: Path = Path(".")) -> MlflowClient:
    return MlflowClient(tracking_uri=tracking_uri(root))


def ensure_sqlite_store(uri: str) -> None:
    """Build a new SQLite store under a temporary name and link it into place. MLflow creates its schema in many
    steps; a kill in the middle (a run killed in its first seconds) would leave a database it can never open."""
    if not uri.startswith("sqlite:///"):
        return
    path = Path(uri.removeprefix("sqlite:///"))
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    try:
        MlflowClient(tracking_uri=f"sqlite:///{tmp}").search_experiments(max_results=1)
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.link(tmp, path)  # fails, harmlessly, when another process got there first
    except FileExistsError:
        pass
    finally:
        tmp.unlink(missing_ok=True)


def warn(message: str) -> None:
    print(f"warning: tracking: {message}", file=sys.stderr, flush=True)


# --- the MLflow run of a training run ----------------------------------------------------------------------------
def _experiment_name() -> str:
    return os.environ.get("MLFLOW_EXPERIMENT_NAME", EXPERIMENT)


def _experiment_id(client: MlflowClient, uri: str, root: Path) -> str:
    """The experiment's id, created when new."""
    name = _experiment_name()
    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        return experiment.experiment_id
    # Embedded SQLite keeps artifacts beside the database; a server decides for itself.
    location = (workspace_root(root) / "mlartifacts").as_uri() if uri.startswith("sqlite:") else None
    try:
        return client.create_experiment(name, artifact_location=location)
    except MlflowException as exc:  # another process created it first
        if exc.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
        return client.get_experiment_by_name(name).experiment_id


def _run_tagged(client: MlflowClient, experiment_id: str, run_id: str) -> str | None:
    found = client.search_runs([experiment_id], filter_string=f"tags.`{RUN_ID_TAG}` = '{run_id}'", max_results=1)
    return found[0].info.run_id if found else None


def find_run(run_id: str, root: Path = Path(".")) -> str | None:
    """The MLflow run id of training run ``run_id``; None when it was never logged to this store."""
    client = connect(root)
    experiment = client.get_experiment_by_name(_experiment_name())
    return None if experiment is None else _run_tagged(client, experiment.experiment_id, run_id)


def open_run(
    run_id: str, tags: dict[str, str], params: dict[str, str], root: Path = Path(".")
) -> tuple[MlflowClient, str]:
    """The MLflow run of training run ``run_id`` (created when new), given the params and tags it lacks."""
    uri = tracking_uri(root)
    ensure_sqlite_store(uri)
    client = MlflowClient(tracking_uri=uri)
    experiment_id = _experiment_id(client, uri, root)
    mlflow_run = _run_tagged(client, experiment_id, run_id)
    if mlflow_run is None:
        exp_name = os.environ.get("DVC_EXP_NAME")
        name = f"{exp_name}-{run_id}" if exp_name else run_id
        mlflow_run = client.create_run(experiment_id, run_name=name, tags={RUN_ID_TAG: run_id}).info.run_id
    logged = client.get_run(mlflow_run).data
    # MLflow params are immutable: a value that changed since (train.max_steps on a resume) stays as first logged;
    # the run directory's hyperparameters.yaml is the record.
    new_params = [Param(k, v[:6000]) for k, v in sorted(params.items()) if k not in logged.params]
    new_tags = [RunTag(k, v) for k, v in sorted(tags.items()) if logged.tags.get(k) != v]
    for i in range(0, max(len(new_params), len(new_tags)), 100):
        client.log_batch(mlflow_run, params=new_params[i : i + 100], tags=new_tags[i : i + 100])
    return client, mlflow_run


# --- what a run's records become in MLflow --------------------------------------------------------------------
def param_values(hyperparameters: dict) -> dict[str, str]:
    """params.yaml flattened to MLflow params: dotted keys, lists as JSON."""
    return {k: json.dumps(v) if isinstance(v, list) else str(v) for k, v in flatten(hyperparameters).items()}


def source_tags(git: dict | None = None) -> dict[str, str]:
    """Where the run came from: git commit and dirty flag, and the DVC experiment it belongs to."""
    git = git or git_state()
    tags = {"git.commit": str(git["commit"]), "git.dirty": str(git["dirty"])}
    for env, tag in (("DVC_EXP_NAME", "dvc.exp_name"), ("DVC_EXP_BASELINE_REV", "dvc.exp_baseline_rev")):
        if os.environ.get(env):
            tags[tag] = os.environ[env]
    return tags


def step_metrics(row: dict, timestamp_ms: int) -> list[Metric]:
    step = int(row["step"])
    return [Metric(key, float(row[column]), timestamp_ms, step) for column, key in STEP_METRICS.items()]


def eval_metrics(record: dict, timestamp_ms: int) -> list[Metric]:
    return [Metric(f"eval/{name}", float(record[name]), timestamp_ms, record["step"]) for name in EVAL_METRICS]


def history_metrics(steps: list[dict], evals: list[dict], start_ms: int) -> list[Metric]:
    """Rows logged after the fact (a replay, or the rows a resume brought back), timestamped start + step (ms):
    two replays of one step are identical rows."""
    metrics = [m for row in steps for m in step_metrics(row, start_ms + int(row["step"]))]
    return metrics + [m for record in evals for m in eval_metrics(record, start_ms + record["step"])]


def samples_path(step: int) -> str:
    return f"samples/step_{step:07d}.md"


def samples_markdown(record: dict) -> str:
    lines = [f"# Samples at step {record['step']}", ""]
    lines += [f"- **{s['prompt']}**{s['completion']}" for s in record["samples"]]
    return "\n".join(lines) + "\n"


def model_artifact_path(model_sha256: str) -> str:
    """Models are stored by content, so a registered version's source never changes under it."""
    return f"models/{model_sha256[:16]}"


def missing_metrics(client: MlflowClient, mlflow_run: str, metrics: list[Metric]) -> list[Metric]:
    """``metrics`` less those whose key already has that step: training metrics are deterministic per step, so a
    step present is never logged again."""
    present = {key: {m.step for m in client.get_metric_history(mlflow_run, key)} for key in {m.key for m in metrics}}
    return [m for m in metrics if m.step not in present[m.key]]


def missing_samples(client: MlflowClient, mlflow_run: str, evals: list[dict]) -> list[dict]:
    """The evaluations whose sample page is not yet an artifact of the run."""
    present = {a.path for a in client.list_artifacts(mlflow_run, "samples")}
    return [record for record in evals if samples_path(record["step"]) not in present]
