"""`solomon promote` on real runs of the tiny pipeline, with the MLflow registry in the embedded SQLite store."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import digest, dvc, latest_run_dir
from mlflow.artifacts import download_artifacts
from mlflow.models import Model
from mlflow.tracking import MlflowClient

from lab.scratch import write_params
from solomon.pipeline import pipeline_env
from solomon.tracking.sync import sync_run

SOLOMON = str(Path(sys.executable).parent / "solomon")


def promote(repo: Path) -> subprocess.CompletedProcess:
    run_dir = str(latest_run_dir(repo))
    return subprocess.run([SOLOMON, "promote", run_dir], cwd=repo, env=pipeline_env(), capture_output=True, text=True)


def retrain(repo: Path, overrides: dict) -> None:
    write_params(repo, overrides)
    shutil.rmtree(repo / "checkpoints")
    dvc(repo, "repro")


@pytest.mark.long
def test_the_gate_refuses_for_each_reason_and_promotes_a_better_run(repo_copy: Path, tmp_path: Path) -> None:
    first = latest_run_dir(repo_copy)
    done = promote(repo_copy)  # params.yaml asks test.bits_per_byte <= 1.6; the tiny model is far above
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.startswith("promote refused: test.bits_per_byte ") and "above promote.max 1.6" in done.stdout

    write_params(repo_copy, {"promote": {"max": {"test.bits_per_byte": 8.0}}})
    metrics = first / "metrics.json"
    original = metrics.read_bytes()
    metrics.write_bytes(original.replace(b"0", b"1", 1))
    done = promote(repo_copy)
    metrics.write_bytes(original)
    assert done.returncode == 1 and done.stdout.startswith(
        "promote refused: verify failed: metrics.json: SHA256 mismatch"
    )

    # The training run as the report stage logged it (repo_copy leaves the MLflow store behind).
    client = MlflowClient(f"sqlite:///{repo_copy / 'mlflow.db'}")
    trained = client.get_run(sync_run(first, repo_copy))
    done = promote(repo_copy)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "version 1 is now champion (the first)" in done.stdout
    record = json.loads((first / "promotion.json").read_text())
    manifest_digest = record["manifest_sha256"]
    assert record["model"] == {"name": "solomon", "version": "1", "alias": "champion"} and record["previous"] is None
    # Promotion registers and records without reopening the training run: its status and times stay as they were.
    after = client.get_run(trained.info.run_id).info
    assert (after.status, after.start_time, after.end_time) == (
        "FINISHED",
        trained.info.start_time,
        trained.info.end_time,
    )
    assert "report/promotion.json" in [a.path for a in client.list_artifacts(trained.info.run_id, "report")]
    # The registered version is an MLflow model: its MLmodel, read back through the registry, names the weights.
    with pytest.MonkeyPatch.context() as env:  # the registry is found where the tracking store is
        env.setenv("MLFLOW_TRACKING_URI", client.tracking_uri)
        mlmodel = Model.load(download_artifacts("models:/solomon@champion/MLmodel", dst_path=str(tmp_path)))
    assert mlmodel.flavors["solomon"]["weights_sha256"] == digest(repo_copy / "models/model.safetensors")
    champion = client.get_model_version_by_alias("solomon", "champion")
    assert str(champion.version) == "1"
    assert champion.tags["manifest.sha256"] == manifest_digest and champion.tags["solomon.run_id"] == first.name
    # The registry's version names the promotion record's bytes; the record says what the gate demanded and where
    # each file it promoted was verified.
    assert champion.tags["promotion.sha256"] == hashlib.sha256((first / "promotion.json").read_bytes()).hexdigest()
    assert record["required"] == {"signed_by_public_key_sha256": None, "expected_digest": False}
    assert record["verified_in"]["models/model.safetensors"] == "workspace"

    retrain(repo_copy, {"lr": {"peak": 1e-6}})  # barely trains: worse than the champion
    worse = latest_run_dir(repo_copy)
    assert worse != first
    done = promote(repo_copy)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "regresses against the champion (version 1, run " + first.name in done.stdout
    assert not (worse / "promotion.json").exists()

    retrain(repo_copy, {"lr": {"peak": 1e-3}, "train": {"max_steps": 60}})  # trains longer: better
    better = latest_run_dir(repo_copy)
    done = promote(repo_copy)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "version 2 is now champion from version 1" in done.stdout
    assert str(client.get_model_version_by_alias("solomon", "champion").version) == "2"
    assert json.loads((better / "promotion.json").read_text())["previous"]["version"] == "1"
    # The promotion record is outside the manifest, bound by naming this run and manifest: the run still verifies.
    verified = subprocess.run([SOLOMON, "verify", str(better)], cwd=repo_copy, env=pipeline_env(), capture_output=True)
    assert verified.returncode == 0


def test_promote_require_is_validated_strictly(tmp_path: Path) -> None:
    from solomon.errors import SolomonError
    from solomon.params import load_params

    base = (Path(__file__).resolve().parents[1] / "params.yaml").read_text()
    bad = {
        "  require:\n    signature: 1\n": "'promote.require.signature': Input should be a valid string",
        "  require:\n    digest_env: 'not a name'\n": "'promote.require.digest_env': String should match pattern",
        "  require:\n    digest_file: d.txt\n    digest_env: D\n": "give digest_file or digest_env, not both",
        "  require:\n    key: k.pub\n": "unknown key 'promote.require.key'",
    }
    for section, message in bad.items():
        text = base[: base.index("  require:")] + section
        (tmp_path / "params.yaml").write_text(text)
        try:
            load_params(tmp_path / "params.yaml")
        except SolomonError as exc:
            assert message in str(exc), (section, str(exc))
        else:
            raise AssertionError(f"accepted {section!r}")


def test_records_never_hold_tracking_credentials(monkeypatch) -> None:
    from solomon.tracking.store import public_uri

    monkeypatch.setenv("MLFLOW_TRACKING_URI", "https://alice:s3cret@mlflow.example:8443/base")
    assert public_uri() == "https://mlflow.example:8443/base"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:////srv/solomon/mlflow.db")
    assert public_uri() == "sqlite:////srv/solomon/mlflow.db"
