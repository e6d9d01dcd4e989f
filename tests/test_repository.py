"""The committed reference run is whole: the files review tools read exist and agree with each other."""

from __future__ import annotations

import json

import yaml
from conftest import ROOT, latest_run_dir

from solomon import records
from solomon.hashing import sha256_file
from solomon.records import RunFiles


def test_latest_run_directory_is_committed_whole() -> None:
    latest = records.read_latest(ROOT)
    run_dir = ROOT / latest["path"]
    for name in (*RunFiles.PAGES, RunFiles.MANIFEST, RunFiles.RUN_INFO, RunFiles.HYPERPARAMETERS, RunFiles.METRICS):
        assert (run_dir / name).is_file(), name
    run = json.loads((run_dir / RunFiles.RUN_INFO).read_text())
    assert run["run_id"] == latest["run_id"] == run_dir.name
    assert sum(f.stat().st_size for f in run_dir.iterdir()) < 2_000_000  # small enough to commit; no weights
    assert run["sha256"]["metrics"] == sha256_file(ROOT / records.METRICS)


def test_dvc_lock_matches_the_committed_metrics_and_logs() -> None:
    lock = yaml.safe_load((ROOT / "dvc.lock").read_text())
    outs = {o["path"]: o for stage in lock["stages"].values() for o in stage.get("outs", [])}
    for path in (records.METRICS, records.STEP_LOG, records.EVAL_LOG, records.LATEST):
        assert path in outs, path
        assert outs[path]["size"] == (ROOT / path).stat().st_size, path


def test_committed_run_directory_matches_its_manifest() -> None:
    """The run directory's own files, as committed, against their SHA256 in its manifest (the weights and data
    are DVC outputs, not in git: `solomon verify` checks those where they exist)."""
    from solomon.audit.manifest import RUN
    from solomon.audit.verify import verify

    run_dir = latest_run_dir(ROOT)
    subjects = json.loads((run_dir / RunFiles.MANIFEST).read_text())["subject"]
    names = {s["name"] for s in subjects if s["annotations"]["location"] == RUN}
    assert {"metrics.json", "hyperparameters.yaml", "datacard.md", "run.json"} <= names
    result = verify(run_dir, ROOT, names)
    assert result.problems == [] and result.checked == len(names)
    assert result.files == {name: run_dir / name for name in names}  # where verify found what it checked
