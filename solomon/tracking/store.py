"""Where the tracking store is, and what every other tracking module builds on.

- the store: ``tracking_uri`` (``MLFLOW_TRACKING_URI``, else ``workspace_store``: SQLite in the workspace's
  ``mlflow.db``, artifacts in ``workspace_artifacts``), ``workspace_root`` and ``ensure_sqlite_store``;
- what may be shown of it: ``redact`` (the one redactor: user info and credential-like query parameters out of
  any text), ``public_uri`` (the store's URI, redacted) and ``warn`` (every tracking warning, redacted);
- the MLflow run of a training run: ``find_run`` looks it up by its tag ``solomon.run_id``, ``open_run`` also
  creates it and gives it the params and tags it lacks;
- what a run's records become in MLflow: params and tags (``param_values``, ``source_tags`` with MLflow's standard
  ``mlflow.source.*`` and ``mlflow.user``), step and evaluation metrics, sample pages, the corpus as a dataset
  input (``corpus_dataset``).

Both openers of the store (``connect``, ``open_run``) first give MLflow's HTTP client its fail-fast defaults
(``fail_fast``); importing this module changes nothing.
"""

from __future__ import annotations

import getpass
import json
import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

from mlflow.data.meta_dataset import MetaDataset
from mlflow.data.sources import LocalArtifactDatasetSource
from mlflow.entities import Dataset, DatasetInput, InputTag, Metric, Param, RunTag, SourceType
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient
from mlflow.utils.mlflow_tags import (
    MLFLOW_DATASET_CONTEXT,
    MLFLOW_GIT_COMMIT,
    MLFLOW_SOURCE_NAME,
    MLFLOW_SOURCE_TYPE,
    MLFLOW_USER,
)

from solomon.errors import SolomonError, first_line
from solomon.git_origin import git_state
from solomon.params import flatten
from solomon.records import TASKS

# The embedded store at the workspace root: where the stages log and `solomon promote` registers unless
# MLFLOW_TRACKING_URI names another store, and what `solomon track server` serves unless told another backend.
STORE_DB = "mlflow.db"
STORE_ARTIFACTS = "mlartifacts"  # beside the database
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
REPORT_DIR = "report"  # the run directory, as an artifact of its MLflow run
NULL_PARAM = "null"  # a null param, spelled as params.yaml spells it: never Python's "None"
SOURCE_NAME = "stages/train.py"  # the training run's entry point: MLflow's Source column
KEEP_FIRST_TAGS = (MLFLOW_USER,)  # who started the run: a later sync by someone else does not rewrite it
DATASET_CONTEXT = "training"
# MLflow allows a dataset digest of at most 36 characters: the corpus's SHA256 is cut to its first 32 hex digits
# there, and kept whole in the dataset's profile.
DATASET_DIGEST_HEX = 32
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


def workspace_store(root: Path = Path(".")) -> str:
    """The embedded store's URI: SQLite in the workspace's ``mlflow.db``."""
    return f"sqlite:///{workspace_root(root) / STORE_DB}"


def workspace_artifacts(root: Path = Path(".")) -> Path:
    """Where the embedded store keeps artifacts: beside its database."""
    return workspace_root(root) / STORE_ARTIFACTS


def tracking_uri(root: Path = Path(".")) -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or workspace_store(root)


# MLflow reads these at each request; one retry and 10 s instead of its minutes of retries, unless the user set them.
HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}


def fail_fast() -> None:
    """Fail fast instead of retrying for minutes when a server is down: tracking must never hold up a run."""
    for name, value in HTTP_DEFAULTS.items():
        os.environ.setdefault(name, value)


def connect(root: Path = Path(".")) -> MlflowClient:
    fail_fast()
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


# --- what may be shown of it ------------------------------------------------------------------------------------
# A URI's user info (``user:password@``), dropped.
_USER_INFO = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://)[^/?#\s'\"<>]*@")
# The value of a query (or fragment) parameter whose name suggests a credential: token, access_token, password,
# secret, api_key, sig, X-Amz-Signature, X-Goog-Credential ... (every X-Amz-*/X-Goog-* parameter of a signed URL).
_CREDENTIAL_PARAMETER = re.compile(
    r"([?&;#][^=&;?#\s'\"<>/]*(?:token|pass|pwd|secret|key|sig|credential|auth|session|cookie|jwt|bearer|private"
    r"|x-amz-|x-goog-)[^=&;?#\s'\"<>/]*=)[^&;#\s'\"<>]*",
    re.IGNORECASE,
)
REDACTED = "***"


def redact(text: str) -> str:
    """``text`` with the credentials of every URI in it taken out: user info dropped, the value of each
    credential-like query parameter replaced by ``***``. Every tracking URI, and every message that may quote
    one (an MLflow error quotes the URL it called), goes through here before it is printed, logged or recorded."""
    return _CREDENTIAL_PARAMETER.sub(rf"\1{REDACTED}", _USER_INFO.sub(r"\1", text))


def public_uri(root: Path = Path(".")) -> str:
    """The tracking URI without any credentials in it: the only form of it that is shown or recorded."""
    return redact(tracking_uri(root))


def error_line(exc: BaseException) -> str:
    """``first_line`` of ``exc``, redacted before it is cut to length: a cut could part a credential from the ``@``
    or ``=`` that marks it as one (an MLflow error quotes the whole URL it called)."""
    text = redact(str(exc))
    return first_line(RuntimeError(text)) if text.strip() else first_line(exc)


@contextmanager
def redacted_errors(doing: str, root: Path = Path(".")) -> Iterator[None]:
    """For commands that talk to the store: a failure becomes one redacted line (``SolomonError``), never a
    traceback, which would print the URL with its credentials."""
    try:
        yield
    except SolomonError:
        raise
    except Exception as exc:
        raise SolomonError(f"{doing} at {public_uri(root)} failed: {error_line(exc)}") from None


def warn(message: str) -> None:
    """A tracking warning on stderr, redacted: it often quotes the store's URI or an error that contains it."""
    print(f"warning: tracking: {redact(message)}", file=sys.stderr, flush=True)


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
    location = workspace_artifacts(root).as_uri() if uri.startswith("sqlite:") else None
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
    fail_fast()
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
    new_tags = [
        RunTag(k, v)
        for k, v in sorted(tags.items())
        if logged.tags.get(k) != v and not (k in KEEP_FIRST_TAGS and k in logged.tags)
    ]
    for i in range(0, max(len(new_params), len(new_tags)), 100):
        client.log_batch(mlflow_run, params=new_params[i : i + 100], tags=new_tags[i : i + 100])
    return client, mlflow_run


# --- what a run's records become in MLflow --------------------------------------------------------------------
def param_value(value: object) -> str:
    """One param as MLflow stores it (a string): lists as JSON, null as ``null``, anything else as ``str``."""
    if value is None:
        return NULL_PARAM
    return json.dumps(value) if isinstance(value, list) else str(value)


def param_values(hyperparameters: dict) -> dict[str, str]:
    """params.yaml flattened to MLflow params: dotted keys, values as ``param_value`` writes them."""
    return {k: param_value(v) for k, v in flatten(hyperparameters).items()}


def _user() -> str | None:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # a container's uid with no passwd entry and no $USER
        return None


def source_tags(git: dict | None = None) -> dict[str, str]:
    """Where the run came from: git commit and dirty flag, the DVC experiment it belongs to, and MLflow's standard
    tags (``mlflow.source.name``/``type``/``git.commit``, ``mlflow.user``) that its UI shows as source and user."""
    git = git or git_state()
    tags = {"git.commit": str(git["commit"]), "git.dirty": str(git["dirty"])}
    tags |= {MLFLOW_SOURCE_NAME: SOURCE_NAME, MLFLOW_SOURCE_TYPE: SourceType.to_string(SourceType.LOCAL)}
    if git["commit"]:
        tags[MLFLOW_GIT_COMMIT] = str(git["commit"])
    if user := _user():
        tags[MLFLOW_USER] = user
    for env, tag in (("DVC_EXP_NAME", "dvc.exp_name"), ("DVC_EXP_BASELINE_REV", "dvc.exp_baseline_rev")):
        if os.environ.get(env):
            tags[tag] = os.environ[env]
    return tags


def step_metrics(row: dict, timestamp_ms: int) -> list[Metric]:
    step = int(row["step"])
    return [Metric(key, float(row[column]), timestamp_ms, step) for column, key in STEP_METRICS.items()]


def system_metrics(row: dict, timestamp_ms: int) -> list[Metric]:
    """A system-log row (``records.SYSTEM_COLUMNS``) as MLflow's system metrics, ``system/<name>``."""
    step = int(row["step"])
    return [Metric(f"system/{key}", float(value), timestamp_ms, step) for key, value in row.items()
            if key not in ("step", "utc")]  # fmt: skip


def recorded_system_metrics(rows: list[dict]) -> list[Metric]:
    """The system log's rows, each timestamped when it was sampled."""
    return [m for row in rows for m in system_metrics(row, int(datetime.fromisoformat(row["utc"]).timestamp() * 1000))]


def eval_metrics(record: dict, timestamp_ms: int) -> list[Metric]:
    return [Metric(f"eval/{name}", float(record[name]), timestamp_ms, record["step"]) for name in EVAL_METRICS]


def history_metrics(steps: list[dict], evals: list[dict], start_ms: int) -> list[Metric]:
    """Rows logged after the fact (a replay, or the rows a resume brought back), timestamped start + step (ms):
    two replays of one step are identical rows."""
    metrics = [m for row in steps for m in step_metrics(row, start_ms + int(row["step"]))]
    return metrics + [m for record in evals for m in eval_metrics(record, start_ms + record["step"])]


def held_out_metrics(metrics: dict) -> dict[str, float]:
    """Every number of ``metrics.json`` (``{split: {name: value}}``) as the metric ``<split>/<name>``: loss,
    perplexity, bits per byte, accuracy, ECE, MCE, and the tokens and bytes they were measured on; each benchmark
    task's scores (``{"tasks": {task: {name: value}}}``) as ``tasks/<task>/<name>``."""
    flat = {
        f"{split}/{name}": value
        for split, values in metrics.items()
        if split != TASKS
        for name, value in values.items()
    }
    flat |= {
        f"{TASKS}/{task}/{name}": value
        for task, values in metrics.get(TASKS, {}).items()
        for name, value in values.items()
    }
    numbers = {key: value for key, value in flat.items() if isinstance(value, int | float)}
    return {key: float(value) for key, value in numbers.items() if not isinstance(value, bool)}


def corpus_dataset(datacard: dict) -> DatasetInput | None:
    """The corpus a run was trained on as an MLflow dataset input (its Dataset column): named by the corpus
    source's description, its source ``corpus.source`` as params.yaml gives it, its digest the source's SHA256 (cut
    to ``DATASET_DIGEST_HEX``); the whole SHA256 and each split's documents, bytes, tokens and SHA256 in its
    profile. None for a data card without source statistics."""
    statistics = datacard.get("statistics", {})
    source = statistics.get("source")
    if not source or not source.get("sha256"):
        return None
    splits = {
        split: {key: stats[key] for key in ("documents", "bytes", "tokens", "sha256_corpus") if key in stats}
        for split, stats in statistics.get("splits", {}).items()
    }
    profile = {"sha256": source["sha256"], "kind": source.get("kind"), "splits": splits}
    meta = MetaDataset(
        LocalArtifactDatasetSource(source.get("spec") or source["kind"]),
        name=source.get("description") or source["kind"],
        digest=source["sha256"][:DATASET_DIGEST_HEX],
    )._to_mlflow_entity()
    dataset = Dataset(meta.name, meta.digest, meta.source_type, meta.source, meta.schema, json.dumps(profile))
    return DatasetInput(dataset, tags=[InputTag(MLFLOW_DATASET_CONTEXT, DATASET_CONTEXT)])


def log_dataset_once(client: MlflowClient, mlflow_run: str, dataset_input: DatasetInput) -> None:
    """Log ``dataset_input`` unless the run already has a dataset of that name and digest."""
    present = {(i.dataset.name, i.dataset.digest) for i in client.get_run(mlflow_run).inputs.dataset_inputs}
    if (dataset_input.dataset.name, dataset_input.dataset.digest) not in present:
        client.log_inputs(mlflow_run, datasets=[dataset_input])


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
