"""``solomon promote``: the gate a run passes before its model becomes the champion.

In order, each step a refusal with its reason: the run verifies against its manifest, with what
``promote.require`` (or ``--public-key`` / ``--expect-digest``) demands — a signature by a given key, a manifest
digest recorded outside the run directory; its held-out metrics meet ``promote.max`` / ``promote.min``; it does not
regress against the current champion (``promote.compare``, lower is better, within ``promote.tolerance``). Then
its model — the very files verify found and hashed — is registered as a new version, tagged with the manifest
digest, run id and git commit; the alias moves to it; ``promotion.json`` records the decision in the run directory
(what was required included), and its SHA256 becomes the version's tag ``promotion.sha256``, which binds the
record to the registry's decision (``solomon sign`` can add a signature of it); the record joins the MLflow run's
report artifacts. None of it moves the MLflow run's start or end time.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from solomon.atomic import write_json
from solomon.audit.verify import require_verified
from solomon.errors import SolomonError
from solomon.hashing import sha256_file
from solomon.params import PromoteParams
from solomon.records import MODEL_DIR, WEIGHTS, RunFiles, read_json

SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")


class Refused(Exception):
    """The gate said no; the message is the reason."""


@dataclass(frozen=True)
class Promotion:
    version: str
    previous: dict | None
    record: Path


@dataclass(frozen=True)
class Requirements:
    """What this promotion demands of the run beyond verifying: a signature by ``public_key``, the manifest
    digest ``expect_digest``."""

    public_key: Path | None = None
    expect_digest: str | None = None


def _outside(path: Path, run_dir: Path, what: str) -> Path:
    if path.resolve().is_relative_to(run_dir.resolve()):
        raise SolomonError(f"{what} {path} is inside the run directory: a run cannot vouch for itself")
    return path


def requirements(
    policy: PromoteParams,
    run_dir: Path,
    root: Path,
    environ: Mapping[str, str],
    public_key: Path | None = None,
    expect_digest: str | None = None,
) -> Requirements:
    """``promote.require``, with a key or digest given on the command line in place of the policy's: the command
    line can tighten or replace a requirement, never drop one. Keys and digest files are read from outside the run
    directory (paths relative to the repository ``root``); ``promote.require.digest_env`` names a variable of
    ``environ`` (the entry point's environment)."""
    require = policy.require
    if public_key is None and require.signature:
        public_key = root / require.signature
    if expect_digest is None and require.digest_file:
        path = _outside(root / require.digest_file, run_dir, "promote.require.digest_file")
        if not path.is_file():
            raise SolomonError(f"promote.require.digest_file {path} not found: it holds the manifest SHA256 to expect")
        expect_digest = path.read_text(encoding="utf-8").strip()
    if expect_digest is None and require.digest_env:
        expect_digest = environ.get(require.digest_env, "").strip()
        if not expect_digest:
            raise SolomonError(f"${require.digest_env} is not set: promote.require.digest_env names it")
    if expect_digest is not None and not SHA256_HEX.match(expect_digest):
        raise SolomonError(f"the expected manifest digest {expect_digest[:70]!r} is not 64 lowercase hex digits")
    if public_key is not None:
        _outside(public_key, run_dir, "the public key")
        if not public_key.is_file():
            raise SolomonError(f"{public_key} not found: give the PEM public key of the signing key")
    return Requirements(public_key, expect_digest)


def metric(metrics: dict, key: str) -> float:
    """A held-out metric (``test.bits_per_byte``) or a benchmark task's score (``tasks.<task>.<metric>``)."""
    *section, name = key.split(".")
    values = metrics
    for part in section:
        values = values.get(part, {}) if isinstance(values, dict) else {}
    if not isinstance(values, dict) or not isinstance(values.get(name), int | float):
        raise Refused(f"{key}: the run's metrics.json has no such number (a task it did not score?)")
    return float(values[name])


def check_thresholds(metrics: dict, policy: PromoteParams) -> None:
    for key, limit in sorted(policy.max.items()):
        if metric(metrics, key) > limit:
            raise Refused(f"{key} {metric(metrics, key):g} is above promote.max {limit:g}")
    for key, limit in sorted(policy.min.items()):
        if metric(metrics, key) < limit:
            raise Refused(f"{key} {metric(metrics, key):g} is below promote.min {limit:g}")


def check_champion(value: float, champion: dict | None, policy: PromoteParams) -> None:
    if champion is None:
        return
    allowed = champion["value"] * (1 + policy.tolerance)
    if value > allowed:
        raise Refused(
            f"{policy.compare} {value:g} regresses against the {policy.alias} (version {champion['version']}, "
            f"run {champion['run_id']}: {champion['value']:g}; allowed up to {allowed:g} with promote.tolerance "
            f"{policy.tolerance:g})"
        )


def predicate_weights(result) -> str:
    """The weights' SHA256 as the manifest records it."""
    return next(s["digest"]["sha256"] for s in result.statement["subject"] if s["name"] == WEIGHTS)


def promote(
    run_dir: Path, policy: PromoteParams, root: Path = Path("."), required: Requirements = Requirements()
) -> Promotion:
    from solomon.tracking import registry, run_model, store, sync  # imports mlflow

    result = require_verified(
        run_dir,
        root,
        "verify failed",
        expect_digest=required.expect_digest,
        public_key=required.public_key,
        refuse=Refused,
    )
    predicate = result.statement["predicate"]
    metrics = read_json(result.files[RunFiles.METRICS])
    run_id = predicate["run_id"]
    try:
        value = metric(metrics, policy.compare)
    except KeyError:
        raise SolomonError(f"{run_dir / RunFiles.METRICS} has no {policy.compare}: check promote.compare") from None
    check_thresholds(metrics, policy)
    with store.redacted_errors(f"reading the champion of {policy.model_name}", root):  # never a raw URI
        champion = registry.champion(policy.model_name, policy.alias, policy.compare, root)
    check_champion(value, champion, policy)

    tags = {
        "manifest.sha256": result.digest,
        "git.commit": str(predicate["git"]["commit"]),
        f"metric.{policy.compare}": repr(value),
    }
    with store.redacted_errors(f"registering {run_id}", root), tempfile.TemporaryDirectory() as tmp:
        # the model `solomon export --format mlflow` writes, built by the same function
        model = run_model.build(
            Path(tmp) / "pyfunc", run_dir, root, result.files, result.digest, predicate_weights(result)
        )
        # its serving root's models/ holds the verified weights and config: the model directory sync logs
        mlflow_run = sync.sync_run(run_dir, root, model_dir=run_model.served_root(model) / MODEL_DIR)
        source = registry.log_model(mlflow_run, model, run_model.artifact_path(result.digest), root)
        version = registry.register_version(mlflow_run, policy.model_name, tags, root, source)
        registry.set_alias(policy.model_name, policy.alias, version, root)
    record = {
        "run_id": run_id,
        "manifest_sha256": result.digest,
        "model": {"name": policy.model_name, "version": version, "alias": policy.alias},
        "previous": champion,
        "compare": {"metric": policy.compare, "value": value, "tolerance": policy.tolerance},
        "thresholds": {"max": dict(policy.max), "min": dict(policy.min)},
        "required": {  # what this gate demanded beyond verifying, so the record says what it proves
            "signed_by_public_key_sha256": sha256_file(required.public_key) if required.public_key else None,
            "expected_digest": required.expect_digest is not None,
        },
        "verified_in": dict(sorted(result.where.items())),
        "tracking_uri": store.public_uri(root),
        "promoted_utc": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    write_json(run_dir / RunFiles.PROMOTION, record)
    # The registry's own record of this decision names the promotion record's bytes.
    with store.redacted_errors(f"tagging {policy.model_name} version {version}", root):
        registry.record_promotion(policy.model_name, version, run_dir / RunFiles.PROMOTION, root)
    return Promotion(version, champion, run_dir / RunFiles.PROMOTION)
