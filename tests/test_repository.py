"""The committed reference run is whole: the files review tools read exist and agree with each other."""

from __future__ import annotations

import json

import yaml
from conftest import ROOT

from solomon.hashing import sha256_file


def test_latest_run_directory_is_committed_whole() -> None:
    latest = json.loads((ROOT / "reports/latest.json").read_text())
    run_dir = ROOT / latest["path"]
    for name in ("report.html", "report.md", "run.json", "params.yaml", "datacard.md", "metrics.json"):
        assert (run_dir / name).is_file(), name
    run = json.loads((run_dir / "run.json").read_text())
    assert run["run_id"] == latest["run_id"] == run_dir.name
    assert run["sha256"]["metrics"] == sha256_file(ROOT / "metrics.json")


def test_dvc_lock_matches_the_committed_metrics_and_logs() -> None:
    lock = yaml.safe_load((ROOT / "dvc.lock").read_text())
    outs = {o["path"]: o for stage in lock["stages"].values() for o in stage.get("outs", [])}
    for path in ("metrics.json", "reports/train_log.tsv", "reports/train_evals.jsonl", "reports/latest.json"):
        assert path in outs, path
        assert outs[path]["size"] == (ROOT / path).stat().st_size, path
