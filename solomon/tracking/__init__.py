"""MLflow tracking: the only module that imports mlflow.

One MLflow run per training run, found again by its run id (tag ``solomon.run_id``; the same id names the run
directory), so a killed and resumed run, and every report made of it, land in the same MLflow run.

- ``LiveTracker`` streams the training loop's steps, evaluations and samples while it trains, from a background
  thread: a slow or dead server never holds up a step, and never stops one.
- ``sync_run`` logs a report directory (``reports/training/<run-id>/``) — params, every step's metrics,
  evaluations, samples, held-out metrics, the report and the model — adding only what is missing. The report
  stage calls it, and so does ``solomon track sync <run-id>`` after an outage.

The local logs are the record of truth; MLflow is a view of them. Where: ``MLFLOW_TRACKING_URI`` when set (a
server such as ``http://127.0.0.1:5000``, or any database URI); otherwise the embedded default, SQLite in
``mlflow.db`` at the repository root with artifacts in ``mlartifacts/`` beside it. Never the deprecated
``./mlruns`` file store.
"""

from __future__ import annotations

import json
import os
import queue
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

# Fail fast instead of retrying for minutes when a server is down: tracking must never hold up a run.
os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")

import yaml
from mlflow.entities import Metric, Param, RunStatus, RunTag
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from solomon.errors import SolomonError, first_line
from solomon.hashing import sha256_file
from solomon.params import Params, flatten
from solomon.provenance import git_state
from solomon.records import read_evals, read_steps

EXPERIMENT = "solomon"
RUN_ID_TAG = "solomon.run_id"
MODEL_TAG = "model.sha256"  # the model of the newest report logged to the run
STEP_METRICS = {
    "loss": "train/loss",
    "lr": "train/lr",
    "grad_norm": "train/grad_norm",
    "tokens_per_s": "train/tokens_per_s",
}
EVAL_METRICS = ("val_loss", "val_perplexity", "val_bits_per_byte")
HELD_OUT_METRICS = ("loss", "perplexity", "bits_per_byte", "accuracy")
BATCH = 500  # MLflow accepts at most 1000 metrics per log_batch call
FLUSH_ROWS = 100  # live: send after this many steps ...
FLUSH_S = 5.0  # ... or this many seconds, and at every evaluation
FINISH_TIMEOUT_S = 60.0  # how long the end of training waits for the last sends


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


def _warn(message: str) -> None:
    print(f"warning: tracking: {message}", file=sys.stderr, flush=True)


def _experiment_id(client: MlflowClient, uri: str, root: Path) -> str:
    name = os.environ.get("MLFLOW_EXPERIMENT_NAME", EXPERIMENT)
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


def _find_run(client: MlflowClient, experiment_id: str, filter_string: str) -> str | None:
    found = client.search_runs([experiment_id], filter_string=filter_string, max_results=1)
    return found[0].info.run_id if found else None


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


def _open_run(root: Path, run_id: str, tags: dict[str, str], params: dict) -> tuple[MlflowClient, str]:
    """The MLflow run of ``run_id`` (created when new), given the params and tags it lacks."""
    uri = tracking_uri(root)
    ensure_sqlite_store(uri)
    client = MlflowClient(tracking_uri=uri)
    experiment_id = _experiment_id(client, uri, root)
    mlflow_run = _find_run(client, experiment_id, f"tags.`{RUN_ID_TAG}` = '{run_id}'")
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


def samples_path(step: int) -> str:
    return f"samples/step_{step:07d}.md"


def samples_markdown(record: dict) -> str:
    lines = [f"# Samples at step {record['step']}", ""]
    lines += [f"- **{s['prompt']}**{s['completion']}" for s in record["samples"]]
    return "\n".join(lines) + "\n"


def _present_steps(client: MlflowClient, mlflow_run: str, keys) -> dict[str, set[int]]:
    return {key: {m.step for m in client.get_metric_history(mlflow_run, key)} for key in keys}


def _present_samples(client: MlflowClient, mlflow_run: str) -> set[str]:
    return {a.path for a in client.list_artifacts(mlflow_run, "samples")}


def _log_metrics(client: MlflowClient, mlflow_run: str, metrics: list[Metric]) -> None:
    for i in range(0, len(metrics), BATCH):
        client.log_batch(mlflow_run, metrics=metrics[i : i + BATCH])


class LiveTracker:
    """Streams one training run to MLflow while it trains (see the module docstring).

    The loop calls ``start`` (with the rows a resume brought back), then ``step`` and ``evaluation`` as they
    happen, and ``finish`` with the run's status. Each call only puts an item on a queue. A background thread
    sends batches (every ``FLUSH_ROWS`` steps or ``FLUSH_S`` seconds, and at each evaluation) and keeps what it
    could not deliver; after a failure it warns once, tries again every ``SOLOMON_TRACKING_RETRY_S`` seconds
    (default 30), and on reconnecting first asks the server what it already has, so nothing is sent twice.
    """

    def __init__(self, params: Params, root: Path = Path(".")) -> None:
        self.uri = tracking_uri(root)
        self._root = root
        self._params = param_values(params.model_dump(mode="json"))
        self._tags = source_tags()
        self._retry_s = float(os.environ.get("SOLOMON_TRACKING_RETRY_S", "30"))
        self._queue: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None
        self._client: MlflowClient | None = None
        self._mlflow_run: str | None = None
        self._history: tuple[list[dict], list[dict]] = ([], [])
        self._pending: list[Metric] = []
        self._pending_samples: list[dict] = []
        self._connected_once = False
        self._outage = False
        self._next_try = 0.0
        self._last_send = time.monotonic()

    # --- called by the training loop (cheap, never raises) ---

    def start(self, run_id: str, steps: list[dict], evals: list[dict]) -> None:
        self.run_id = run_id
        self._history = (list(steps), list(evals))
        self._thread = threading.Thread(target=self._work, name="solomon-tracking", daemon=True)
        self._thread.start()

    def step(self, row: dict) -> None:
        self._queue.put(("step", dict(row), int(time.time() * 1000)))

    def evaluation(self, record: dict) -> None:
        self._queue.put(("eval", record, int(time.time() * 1000)))

    def finish(self, status: str) -> None:
        """``status``: FINISHED, KILLED or FAILED. Waits up to ``FINISH_TIMEOUT_S`` for the last sends."""
        if self._thread is None:
            return
        self._queue.put(("finish", status, 0))
        self._thread.join(FINISH_TIMEOUT_S)
        if self._thread.is_alive():
            _warn(f"{self.uri} still busy after {FINISH_TIMEOUT_S:.0f} s; leaving it. {self._replay_hint()}")
        self._thread = None

    # --- the background thread ---

    def _replay_hint(self) -> str:
        return "The report stage logs what is missing, or later `solomon track sync <run-id>`."

    def _work(self) -> None:
        status = None
        while status is None:
            try:
                kind, item, timestamp_ms = self._queue.get(timeout=1.0)
            except queue.Empty:
                kind = None
            if kind == "step":
                self._pending += step_metrics(item, timestamp_ms)
            elif kind == "eval":
                self._pending += eval_metrics(item, timestamp_ms)
                self._pending_samples.append(item)
            elif kind == "finish":
                status = item
            now = time.monotonic()
            due = kind in ("eval", "finish") or len(self._pending) >= FLUSH_ROWS * len(STEP_METRICS)
            due = due or now - self._last_send >= FLUSH_S
            if due and (now >= self._next_try or kind == "finish"):
                self._send()
        if not self._outage:
            try:
                self._client.set_terminated(self._mlflow_run, status)
            except Exception as exc:
                self._fail(exc)
        if self._outage:
            missing = len(self._pending) // len(STEP_METRICS)
            _warn(
                f"about {missing} steps of training run {self.run_id} did not reach {self.uri}. " + self._replay_hint()
            )

    def _connect(self) -> None:
        client, mlflow_run = _open_run(self._root, self.run_id, self._tags, self._params)
        info = client.get_run(mlflow_run).info
        if info.status != "RUNNING":
            client.update_run(mlflow_run, status="RUNNING")
        if not self._connected_once:  # rows a resume brought back: timestamped like a replay
            steps, evals = self._history
            history = [m for r in steps for m in step_metrics(r, info.start_time + int(r["step"]))]
            history += [m for e in evals for m in eval_metrics(e, info.start_time + e["step"])]
            self._pending = history + self._pending
            self._pending_samples = evals + self._pending_samples
        present = _present_steps(client, mlflow_run, {m.key for m in self._pending})
        self._pending = [m for m in self._pending if m.step not in present[m.key]]
        have_samples = _present_samples(client, mlflow_run)
        self._pending_samples = [e for e in self._pending_samples if samples_path(e["step"]) not in have_samples]
        self._client, self._mlflow_run, self._connected_once = client, mlflow_run, True

    def _send(self) -> None:
        self._last_send = time.monotonic()
        try:
            if self._client is None:
                self._connect()
                if self._outage:  # a failure after this point is a new outage, with its own warning
                    print(f"tracking: {self.uri} reachable again; catching up", file=sys.stderr, flush=True)
                    self._outage = False
            while self._pending:
                self._client.log_batch(self._mlflow_run, metrics=self._pending[:BATCH])
                del self._pending[:BATCH]
            while self._pending_samples:
                record = self._pending_samples[0]
                self._client.log_text(self._mlflow_run, samples_markdown(record), samples_path(record["step"]))
                del self._pending_samples[0]
        except Exception as exc:
            self._fail(exc)

    def _fail(self, exc: Exception) -> None:
        if not self._outage:
            _warn(
                f"cannot reach {self.uri} ({first_line(exc)}); training goes on, the local log keeps every step, "
                f"and sending resumes when it answers (tried every {self._retry_s:g} s)"
            )
        self._outage = True
        self._client = None  # reconnect, and ask what arrived, before sending again
        self._next_try = time.monotonic() + self._retry_s


def _matching_model_dir(run_info: dict, model_dir: Path | None) -> Path | None:
    """The model directory only if it still holds the weights this run recorded (never log another model)."""
    if model_dir is None or not (model_dir / "model.safetensors").is_file():
        return None
    expected = run_info["sha256"].get("model")
    return model_dir if sha256_file(model_dir / "model.safetensors") == expected else None


def model_artifact_path(model_sha256: str) -> str:
    """Models are stored by content, so a registered version's source never changes under it."""
    return f"models/{model_sha256[:16]}"


def sync_run(run_dir: Path, root: Path = Path("."), model_dir: Path | None = None) -> str:
    """Log ``run_dir`` (and ``model_dir``, when it holds this run's weights) to MLflow, adding only what is
    missing; return the MLflow run id."""
    run_info = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    run_id = run_info["run_id"]
    model_sha = run_info["sha256"]["model"]
    tags = source_tags(run_info["git"]) | {MODEL_TAG: model_sha}
    lock = root / "dvc.lock"
    if lock.is_file():
        tags["dvc.lock.sha256"] = sha256_file(lock)
    hyperparameters = yaml.safe_load((run_dir / "hyperparameters.yaml").read_text(encoding="utf-8"))
    client, mlflow_run = _open_run(root, run_id, tags, param_values(hyperparameters))

    # Training metrics are deterministic per step: a step already present is never logged again. Replayed
    # steps get the timestamp start + step (ms), so two replays of one step are identical rows.
    base_ms = client.get_run(mlflow_run).info.start_time
    steps = read_steps(run_dir / "train_log.tsv")
    evals = read_evals(run_dir / "train_evals.jsonl")
    metrics = [m for row in steps for m in step_metrics(row, base_ms + int(row["step"]))]
    metrics += [m for record in evals for m in eval_metrics(record, base_ms + record["step"])]
    present = _present_steps(client, mlflow_run, {m.key for m in metrics})
    missing = [m for m in metrics if m.step not in present[m.key]]

    # Held-out metrics belong to the model at the final step; a re-evaluation logs a new value only if it differs.
    final_step = max((int(row["step"]) for row in steps), default=0)
    held_out = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
    for split, values in held_out.items():
        for name in HELD_OUT_METRICS:
            key = f"{split}/{name}"
            history = sorted(
                (m.timestamp, m.value) for m in client.get_metric_history(mlflow_run, key) if m.step == final_step
            )
            if not history or history[-1][1] != values[name]:
                missing.append(Metric(key, values[name], int(time.time() * 1000), final_step))
    _log_metrics(client, mlflow_run, missing)

    have_samples = _present_samples(client, mlflow_run)
    for record in evals:
        if samples_path(record["step"]) not in have_samples:
            client.log_text(mlflow_run, samples_markdown(record), samples_path(record["step"]))
    client.log_artifacts(mlflow_run, str(run_dir), "report")
    model = _matching_model_dir(run_info, model_dir)
    if model is not None:
        client.log_artifacts(mlflow_run, str(model), model_artifact_path(model_sha))
    client.set_terminated(mlflow_run, RunStatus.to_string(RunStatus.FINISHED))
    return mlflow_run


def open_run_or_warn(run_id: str, params: Params, root: Path = Path(".")) -> str | None:
    """The MLflow run id of ``run_id`` (created if training could not log it), for the manifest; None, with a
    warning, when the store cannot be reached."""
    try:
        return _open_run(root, run_id, source_tags(), param_values(params.model_dump(mode="json")))[1]
    except Exception as exc:
        _warn(f"cannot reach {tracking_uri(root)} ({first_line(exc)}); the manifest records no MLflow run id")
        return None


def sync_or_warn(run_dir: Path, root: Path = Path("."), model_dir: Path | None = None) -> str | None:
    """``sync_run`` for the pipeline: an unreachable or failing tracking store is a warning, never an error."""
    try:
        return sync_run(run_dir, root, model_dir)
    except Exception as exc:
        _warn(
            f"could not log run {run_dir.name} to {tracking_uri(root)} ({first_line(exc)}); "
            f"it is recorded in {run_dir}; replay with `solomon track sync {run_dir.name}`"
        )
        return None


def register_version(run_id: str, name: str, tags: dict[str, str], root: Path = Path(".")) -> str:
    """Register the model of run ``run_id`` (as its newest report logged it) as a new version of ``name``;
    return the version."""
    client = MlflowClient(tracking_uri=tracking_uri(root))
    experiment = client.get_experiment_by_name(os.environ.get("MLFLOW_EXPERIMENT_NAME", EXPERIMENT))
    found = (
        None if experiment is None else _find_run(client, experiment.experiment_id, f"tags.`{RUN_ID_TAG}` = '{run_id}'")
    )
    model_sha = None if found is None else client.get_run(found).data.tags.get(MODEL_TAG)
    if model_sha is None:
        raise SolomonError(f"run {run_id!r} is not in {tracking_uri(root)}: `solomon track sync {run_id}` first")
    mlflow_run = found
    source = model_artifact_path(model_sha)
    if not any(a.path == f"{source}/model.safetensors" for a in client.list_artifacts(mlflow_run, source)):
        raise SolomonError(f"MLflow run of {run_id} has no model artifact: sync it from the checkout that trained it")
    try:
        client.create_registered_model(name)
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
    version = client.create_model_version(
        name,
        f"runs:/{mlflow_run}/{source}",
        run_id=mlflow_run,
        tags={RUN_ID_TAG: run_id, MODEL_TAG: model_sha, **tags},
    )
    return str(version.version)


def champion(name: str, alias: str, compare: str, root: Path = Path(".")) -> dict | None:
    """The version ``alias`` names, with its run id and its ``compare`` metric (e.g. test.bits_per_byte); None
    when there is no such registered model or alias yet."""
    client = MlflowClient(tracking_uri=tracking_uri(root))
    try:
        version = client.get_model_version_by_alias(name, alias)
    except MlflowException as exc:
        if exc.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE", "NOT_FOUND"):
            return None
        raise
    value = version.tags.get(f"metric.{compare}")
    if value is None:  # registered by hand: read the metric from its MLflow run
        value = client.get_run(version.run_id).data.metrics[compare.replace(".", "/", 1)]
    return {"version": str(version.version), "run_id": version.tags.get(RUN_ID_TAG), "value": float(value)}


def public_uri(root: Path = Path(".")) -> str:
    """The tracking URI without any credentials in it, for records."""
    uri = tracking_uri(root)
    parts = urlsplit(uri)
    if not (parts.username or parts.password):
        return uri  # unchanged: urlunsplit would turn sqlite://// into sqlite://
    return urlunsplit(parts._replace(netloc=parts.hostname + (f":{parts.port}" if parts.port else "")))


def set_alias(name: str, alias: str, version: str, root: Path = Path(".")) -> None:
    """Point ``alias`` (e.g. ``production``) at ``version`` of ``name``, moving it from any other version."""
    MlflowClient(tracking_uri=tracking_uri(root)).set_registered_model_alias(name, alias, version)


def alias_version(name: str, alias: str, root: Path = Path(".")) -> str:
    return str(MlflowClient(tracking_uri=tracking_uri(root)).get_model_version_by_alias(name, alias).version)
