"""The MLflow model registry: a registered version is the model of one logged MLflow run (as ``replay`` stored
it, by content), and an alias (``champion``, ``production``) names the version in use."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from mlflow.exceptions import MlflowException

from solomon.errors import SolomonError
from solomon.hashing import sha256_file
from solomon.params import runs_root
from solomon.records import WEIGHTS_FILE
from solomon.tracking import store


def logged_run(run_id: str, root: Path = Path(".")) -> str:
    """The MLflow run id of training run ``run_id``, for registering a run synced earlier."""
    found = store.find_run(run_id, root)
    if found is None:
        raise SolomonError(f"run {run_id!r} is not in {store.public_uri(root)}: `solomon track sync {run_id}` first")
    return found


def register_version(
    mlflow_run: str, name: str, tags: dict[str, str], root: Path = Path("."), source: str | None = None
) -> str:
    """Register the model of ``mlflow_run`` (the one ``sync.sync_run`` returned: the model of the newest report
    logged to it, or the artifact ``source``, e.g. the pyfunc model promote logs) as a new version of ``name``;
    return the version."""
    client = store.connect(root)
    run_tags = client.get_run(mlflow_run).data.tags
    run_id, model_sha = run_tags.get(store.RUN_ID_TAG), run_tags.get(store.MODEL_TAG)
    if model_sha is None:
        raise SolomonError(f"no report of run {run_id!r} is in {store.public_uri(root)}: `solomon track sync` it")
    if source is None:
        source = store.model_artifact_path(model_sha)
        if not any(a.path == f"{source}/{WEIGHTS_FILE}" for a in client.list_artifacts(mlflow_run, source)):
            raise SolomonError(
                f"MLflow run of {run_id} has no model artifact: sync it from the checkout that trained it"
            )
    try:
        client.create_registered_model(name)
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
    version = client.create_model_version(
        name,
        f"runs:/{mlflow_run}/{source}",
        run_id=mlflow_run,
        tags={store.RUN_ID_TAG: run_id, store.MODEL_TAG: model_sha, **tags},
    )
    return str(version.version)


def log_model(mlflow_run: str, model_dir: Path, artifact: str, root: Path = Path(".")) -> str:
    """Log the MLflow model directory ``model_dir`` to ``mlflow_run`` at ``artifact`` (once: stored by content)."""
    client = store.connect(root)
    if not any(a.path == f"{artifact}/MLmodel" for a in client.list_artifacts(mlflow_run, artifact)):
        client.log_artifacts(mlflow_run, str(model_dir), artifact)
    return artifact


def champion(name: str, alias: str, compare: str, root: Path = Path(".")) -> dict | None:
    """The version ``alias`` names, with its run id and its ``compare`` metric (e.g. test.bits_per_byte); None
    when there is no such registered model or alias yet."""
    client = store.connect(root)
    try:
        version = client.get_model_version_by_alias(name, alias)
    except MlflowException as exc:
        if exc.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE", "NOT_FOUND"):
            return None
        raise
    value = version.tags.get(f"metric.{compare}")
    if value is None:  # registered by hand: read the metric from its MLflow run
        value = client.get_run(version.run_id).data.metrics[compare.replace(".", "/", 1)]
    return {"version": str(version.version), "run_id": version.tags.get(store.RUN_ID_TAG), "value": float(value)}


def set_alias(name: str, alias: str, version: str, root: Path = Path(".")) -> None:
    """Point ``alias`` (e.g. ``production``) at ``version`` of ``name``, moving it from any other version."""
    store.connect(root).set_registered_model_alias(name, alias, version)


def alias_version(name: str, alias: str, root: Path = Path(".")) -> str:
    return str(store.connect(root).get_model_version_by_alias(name, alias).version)


MANIFEST_TAG = "manifest.sha256"  # set by `solomon promote`: the digest recorded outside the run directory
PROMOTION_TAG = "promotion.sha256"  # the version's tag naming its promotion record's SHA256


def record_promotion(name: str, version: str, record: Path, root: Path = Path(".")) -> None:
    """The registry's record of a promotion: version ``version`` of ``name`` tagged with the SHA256 of the
    promotion record ``record`` (``promotion.json``), which also joins the training run's report artifacts. Tags
    and artifacts only: the training run's status, start and end time stay as training left them."""
    client = store.connect(root)
    client.set_model_version_tag(name, version, PROMOTION_TAG, sha256_file(record))
    client.log_artifact(client.get_model_version(name, version).run_id, str(record), store.REPORT_DIR)


REFERENCE = re.compile(r"^models:/(?P<name>[^/@]+)@(?P<alias>[^/@]+)$")


@dataclass(frozen=True)
class AliasedVersion:
    """What ``models:/<name>@<alias>`` names now: the version, its manifest digest and run, and the run
    directory in the workspace."""

    name: str
    alias: str
    version: str
    manifest_sha256: str
    run_id: str
    run_dir: Path

    def as_dict(self) -> dict:
        return {"name": self.name, "version": self.version, "alias": self.alias}


def parse_reference(reference: str) -> tuple[str, str]:
    """(name, alias) of ``models:/<name>@<alias>``."""
    match = REFERENCE.match(reference)
    if match is None:
        raise SolomonError(f"{reference!r} is not a registry reference: write models:/<name>@<alias>")
    return match["name"], match["alias"]


def resolve(reference: str, root: Path = Path(".")) -> AliasedVersion:
    """The version ``reference`` (``models:/<name>@<alias>``) names, through its tags ``manifest.sha256`` and
    ``solomon.run_id`` (both set by ``solomon promote``), to its run directory under the repository ``root``."""
    name, alias = parse_reference(reference)
    with store.redacted_errors(f"resolving {reference}", root):
        try:
            version = store.connect(root).get_model_version_by_alias(name, alias)
        except MlflowException as exc:
            if exc.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE", "NOT_FOUND"):
                raise SolomonError(
                    f"{reference}: no such registered model or alias in {store.public_uri(root)} "
                    "(promote a run first: `solomon promote`)"
                ) from None
            raise
    digest, run_id = version.tags.get(MANIFEST_TAG), version.tags.get(store.RUN_ID_TAG)
    if not digest or not run_id:
        raise SolomonError(
            f"{reference} (version {version.version}) has no {MANIFEST_TAG} or {store.RUN_ID_TAG} tag: "
            "register it with `solomon promote`"
        )
    run_dir = root / runs_root(root) / run_id
    return AliasedVersion(name, alias, str(version.version), digest, run_id, run_dir)
