"""``solomon promote``: the gate a run passes before its model becomes the champion.

In order, each step a refusal with its reason: the run verifies against its manifest; its held-out metrics meet
``promote.max`` / ``promote.min``; it does not regress against the current champion (``promote.compare``, lower
is better, within ``promote.tolerance``). Then its model is registered as a new version — tagged with the
manifest digest, run id and git commit — the alias moves to it, and ``promotion.json`` records the decision in
the run directory.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from solomon.atomic import write_json
from solomon.audit.verify import verify
from solomon.errors import SolomonError
from solomon.params import PromoteParams
from solomon.records import MODEL_FILES, RunFiles, read_json


class Refused(Exception):
    """The gate said no; the message is the reason."""


@dataclass(frozen=True)
class Promotion:
    version: str
    previous: dict | None
    record: Path


def metric(metrics: dict, key: str) -> float:
    split, name = key.split(".")
    return float(metrics[split][name])


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


def _model_dir(verified: dict[str, Path], into: Path) -> Path:
    """The run's weights and config (from the workspace or the DVC cache, where verify found them) in ``into``."""
    for name in MODEL_FILES:
        shutil.copyfile(verified[name], into / Path(name).name)
    return into


def promote(run_dir: Path, policy: PromoteParams, root: Path = Path(".")) -> Promotion:
    from solomon.tracking import registry, replay, store  # imports mlflow

    result = verify(run_dir, root)
    if result.problems:
        more = f" (and {len(result.problems) - 1} more)" if len(result.problems) > 1 else ""
        raise Refused(f"verify failed: {result.problems[0]}{more}; run `solomon verify {run_dir}`")
    predicate = result.statement["predicate"]
    metrics = read_json(run_dir / RunFiles.METRICS)
    run_id = predicate["run_id"]
    try:
        value = metric(metrics, policy.compare)
    except KeyError:
        raise SolomonError(f"{run_dir / RunFiles.METRICS} has no {policy.compare}: check promote.compare") from None
    check_thresholds(metrics, policy)
    champion = registry.champion(policy.model_name, policy.alias, policy.compare, root)
    check_champion(value, champion, policy)

    with tempfile.TemporaryDirectory() as tmp:
        mlflow_run = replay.sync_run(run_dir, root, model_dir=_model_dir(result.files, Path(tmp)))
    tags = {
        "manifest.sha256": result.digest,
        "git.commit": str(predicate["git"]["commit"]),
        f"metric.{policy.compare}": repr(value),
    }
    version = registry.register_version(mlflow_run, policy.model_name, tags, root)
    registry.set_alias(policy.model_name, policy.alias, version, root)
    record = {
        "run_id": run_id,
        "manifest_sha256": result.digest,
        "model": {"name": policy.model_name, "version": version, "alias": policy.alias},
        "previous": champion,
        "compare": {"metric": policy.compare, "value": value, "tolerance": policy.tolerance},
        "thresholds": {"max": dict(policy.max), "min": dict(policy.min)},
        "tracking_uri": store.public_uri(root),
        "promoted_utc": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    write_json(run_dir / RunFiles.PROMOTION, record)
    return Promotion(version, champion, run_dir / RunFiles.PROMOTION)
