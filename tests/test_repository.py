"""The committed reference run is whole: the files review tools read exist and agree with each other."""

from __future__ import annotations

import json

import yaml
from conftest import ROOT, latest_run_dir

from solomon.hashing import sha256_file


def test_latest_run_directory_is_committed_whole() -> None:
    latest = json.loads((ROOT / "reports/latest.json").read_text())
    run_dir = ROOT / latest["path"]
    for name in ("index.html", "README.md", "manifest.json", "run.json", "hyperparameters.yaml", "metrics.json"):
        assert (run_dir / name).is_file(), name
    run = json.loads((run_dir / "run.json").read_text())
    assert run["run_id"] == latest["run_id"] == run_dir.name
    assert sum(f.stat().st_size for f in run_dir.iterdir()) < 2_000_000  # small enough to commit; no weights
    assert run["sha256"]["metrics"] == sha256_file(ROOT / "metrics.json")


def test_dvc_lock_matches_the_committed_metrics_and_logs() -> None:
    lock = yaml.safe_load((ROOT / "dvc.lock").read_text())
    outs = {o["path"]: o for stage in lock["stages"].values() for o in stage.get("outs", [])}
    for path in ("metrics.json", "reports/train_log.tsv", "reports/train_evals.jsonl", "reports/latest.json"):
        assert path in outs, path
        assert outs[path]["size"] == (ROOT / path).stat().st_size, path


def test_committed_run_directory_matches_its_manifest() -> None:
    """The run directory's own files, as committed, against their SHA256 in its manifest (the weights and data
    are DVC outputs, not in git: `solomon verify` checks those where they exist)."""
    from solomon.audit.manifest import RUN
    from solomon.audit.verify import verify

    run_dir = latest_run_dir(ROOT)
    subjects = json.loads((run_dir / "manifest.json").read_text())["subject"]
    names = {s["name"] for s in subjects if s["annotations"]["location"] == RUN}
    assert {"metrics.json", "hyperparameters.yaml", "datacard.md", "run.json"} <= names
    result = verify(run_dir, ROOT, names)
    assert result.problems == [] and result.checked == len(names)
