"""The run's git record tells source and params changes apart from the pipeline's own outputs (dvc.lock and
dvc.yaml's outs, metrics and plots), names both, and the pages say "uncommitted changes" for the first only."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT, latest_run_dir

from solomon import records
from solomon.git_origin import git_state, uncommitted_note
from solomon.pipeline import output_paths
from solomon.report.run import render_pages

# committed in the test repository: source, params, and outputs of the train, evaluate and report stages
FILES = (
    records.DVC_YAML,
    records.PARAMS_FILE,
    "solomon/train/loop.py",
    "stages/train.py",
    records.DVC_LOCK,
    records.METRICS,
    records.STEP_LOG,
    f"{records.REPORTS_DIR}/training/run-1/run.json",
)


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    for name in FILES:
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        source = ROOT / name
        (repo / name).write_bytes(source.read_bytes() if name == records.DVC_YAML else b"committed\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t.invalid", "commit", "-q", "--allow-empty", "-m", "empty")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t.invalid", "commit", "-q", "-m", "pipeline")
    return repo


def test_dvc_yaml_names_the_outputs_the_pipeline_writes() -> None:
    outputs = output_paths(ROOT)
    assert outputs[0] == records.DVC_LOCK
    for path in (records.METRICS, records.STEP_LOG, records.TRAIN_METRICS, records.LATEST, records.MODEL_DIR):
        assert path in outputs
    assert f"{records.REPORTS_DIR}/training" in outputs and records.PARAMS_FILE not in outputs


def test_a_run_that_changed_only_its_outputs_is_clean_and_names_them(repo: Path) -> None:
    commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    assert git_state(repo) == {"commit": commit.strip(), "dirty": False, "changed": [], "pipeline_outputs_changed": []}
    outputs = [records.DVC_LOCK, records.METRICS, records.STEP_LOG, f"{records.REPORTS_DIR}/training/run-1/run.json"]
    for name in outputs:
        (repo / name).write_text("written by the run\n")
    state = git_state(repo)
    assert (state["dirty"], state["changed"], state["pipeline_outputs_changed"]) == (False, [], sorted(outputs))
    assert uncommitted_note(state) == ""


def test_source_and_params_changes_are_dirty_and_named_staged_or_not(repo: Path) -> None:
    (repo / records.DVC_LOCK).write_text("written by the run\n")
    (repo / records.PARAMS_FILE).write_text("train: {max_steps: 1}\n")
    (repo / "stages/train.py").unlink()  # a deletion is a change
    (repo / "solomon/train/loop.py").write_text("changed\n")
    git(repo, "add", "solomon/train/loop.py")  # staged counts as well
    (repo / "untracked.py").write_text("not part of the checkout's record\n")
    state = git_state(repo)
    assert state["dirty"] is True
    assert state["changed"] == [records.PARAMS_FILE, "solomon/train/loop.py", "stages/train.py"]
    assert state["pipeline_outputs_changed"] == [records.DVC_LOCK]
    assert uncommitted_note(state) == " (uncommitted changes: params.yaml, solomon/train/loop.py, stages/train.py)"


def test_outside_a_git_checkout_nothing_is_claimed(tmp_path: Path) -> None:
    state = git_state(tmp_path)
    assert state == {"commit": None, "dirty": None, "changed": None, "pipeline_outputs_changed": None}
    assert uncommitted_note(state) == ""


def test_the_note_shortens_long_lists_and_reads_older_records() -> None:
    many = {"dirty": True, "changed": [f"f{i}.py" for i in range(8)]}
    assert uncommitted_note(many) == " (uncommitted changes: f0.py, f1.py, f2.py, f3.py, f4.py and 3 more)"
    assert uncommitted_note({"commit": "abc", "dirty": True}) == " (uncommitted changes)"  # before the lists
    assert uncommitted_note({"commit": "abc", "dirty": False}) == ""


def test_the_run_page_names_source_changes_only(repo_copy: Path) -> None:
    run_dir = latest_run_dir(repo_copy)
    info_path = run_dir / records.RunFiles.RUN_INFO
    info = json.loads(info_path.read_text())
    assert set(info["git"]) == {"commit", "dirty", "changed", "pipeline_outputs_changed"}
    cases = [
        ({"dirty": False, "changed": [], "pipeline_outputs_changed": ["dvc.lock"]}, "."),
        (
            {"dirty": True, "changed": ["params.yaml"], "pipeline_outputs_changed": []},
            " (uncommitted changes: params.yaml).",
        ),
        ({"dirty": True}, " (uncommitted changes)."),  # a record from before the lists
    ]
    for git_record, expected in cases:
        info["git"] = {"commit": "5be61c2"} | git_record
        info_path.write_text(json.dumps(info))
        render_pages(run_dir)
        assert f"from git commit 5be61c2{expected} MLflow run" in (run_dir / "README.md").read_text()
    shutil.rmtree(run_dir)
