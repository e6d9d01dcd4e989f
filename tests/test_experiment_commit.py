"""Experiments carry their run directory: the report stage declares the run directories an uncached output, so DVC
commits a `dvc exp run`'s own run directory with it; files written after the report stage (promote, sign) are in
.dvcignore, so they leave the pipeline up to date. And `dvc exp show` as EXP_SHOW runs it shows only the params that
differ and the results."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, dvc, tree_digest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from lab.experiments.runner import EXP_SHOW
from lab.scratch import write_params
from solomon.params import flatten, load_params
from solomon.pipeline import pipeline_env, run
from solomon.records import LATEST, METRICS, PARAMS_FILE, TRAIN_METRICS, RunFiles

SOLOMON = str(Path(sys.executable).parent / "solomon")
# Written into a run directory after the report stage made it, by `solomon promote` and `solomon sign`.
WRITTEN_AFTER_REPORT = (RunFiles.PROMOTION, RunFiles.PROMOTION_SIGNATURE, RunFiles.SIGNATURE)


def test_dvcignore_names_exactly_the_files_written_after_the_report_stage() -> None:
    root = load_params(ROOT / PARAMS_FILE).report.root
    patterns = {
        line.strip() for line in (ROOT / ".dvcignore").read_text().splitlines() if line.strip() and line[0] != "#"
    }
    assert patterns == {f"{root}/*/{name}" for name in WRITTEN_AFTER_REPORT}
    outs = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]["report"]["outs"]
    assert {root: {"cache": False, "persist": True}} in outs  # report.root's runs, committed by git, never deleted


def _exp_ref(repo: Path, name: str) -> str:
    refs = run(["git", "for-each-ref", "--format=%(refname)", "refs/exps"], repo).stdout.split()
    (ref,) = [ref for ref in refs if ref.endswith(f"/{name}")]
    return ref


def _show(repo: Path, rev: str, path: str) -> str:
    return run(["git", "show", f"{rev}:{path}"], repo).stdout


def _solomon(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([SOLOMON, *args], cwd=repo, env=pipeline_env(), capture_output=True, text=True)


@pytest.mark.long
def test_an_experiment_commits_its_run_directory_and_exp_show_shows_changed_params_and_results(
    repo_copy: Path, tmp_path: Path
) -> None:
    repo = repo_copy
    write_params(repo, {"tracking": {"enabled": False}})  # quicker, and the same in every row
    run(["git", "add", PARAMS_FILE, "dvc.lock", ".gitignore", "data/.gitignore", METRICS, "reports"], repo)
    run(["git", "commit", "-q", "-m", "the tiny run"], repo)  # a baseline as after `make run` and a commit
    baseline_run = json.loads((repo / LATEST).read_text())["path"]

    dvc(repo, "exp", "run", "-n", "first", "-S", "lr.warmup=10")
    first = _exp_ref(repo, "first")
    run_dir = json.loads(_show(repo, first, LATEST))["path"]
    assert run_dir != baseline_run
    committed = set(run(["git", "ls-tree", "-r", "--name-only", first], repo).stdout.split())
    in_workspace = {f"{run_dir}/{name}" for name in tree_digest(repo / run_dir)}
    assert in_workspace <= committed and f"{run_dir}/{RunFiles.MANIFEST}" in committed
    assert any(name.startswith(f"{baseline_run}/") for name in committed)  # persist: earlier runs stay

    # The second -S applies on top of the workspace's params.yaml, which holds the first experiment's: they stack.
    dvc(repo, "exp", "run", "-n", "second", "-S", "lr.peak=0.003")
    second = _exp_ref(repo, "second")
    lr = yaml.safe_load(_show(repo, second, PARAMS_FILE))["lr"]
    assert (lr["warmup"], lr["peak"]) == (10, 0.003)

    # `dvc exp show` for review: the two params, and the results that differ between the rows (no hashes, timings).
    header = run(EXP_SHOW, repo).stdout.splitlines()[0]  # `make exps`
    columns = [cell.strip() for cell in header.strip("|").split("|")]
    results = [
        {**flatten(json.loads(_show(repo, rev, METRICS))), **flatten(json.loads(_show(repo, rev, TRAIN_METRICS)))}
        for rev in ("HEAD", first, second)
    ]
    # DVC shows scalar metrics only (the calibrated reliability bins are a list)
    scalars = [key for key in results[0] if not isinstance(results[0][key], list | dict)]
    shown = lambda value: f"{value:.5g}" if isinstance(value, float) else json.dumps(value)  # noqa: E731 (DVC's precision 5)
    changed = {key for key in scalars if len({shown(row[key]) for row in results}) > 1}
    expected = {"Experiment", "lr.warmup", "lr.peak"} | changed
    assert len(columns) == len(set(columns)) and set(columns) == expected, set(columns) ^ expected
    assert {"val.loss", "test.bits_per_byte", "best_val_loss", "tasks.solomon_heldout.bits_per_byte"} <= changed
    # A benchmark score's change in `dvc metrics diff` and in `solomon review`'s note (from the two commits)
    diff = dvc(repo, "metrics", "diff", "HEAD", first, "--md").stdout
    assert "tasks.solomon_heldout.bits_per_byte" in diff, diff
    note = _solomon(repo, "review", "--base", "HEAD", "--head", first)
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in note.stdout.splitlines()]
    assert note.returncode == 0 and ["metrics.json", "tasks.solomon_heldout.bits_per_byte"] in [r[:2] for r in rows]

    # The first experiment back from its commit alone (its run directory removed here), verified.
    shutil.rmtree(repo / "reports/training")
    dvc(repo, "exp", "apply", "first")
    assert json.loads((repo / LATEST).read_text())["path"] == run_dir
    verified = _solomon(repo, "verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr

    # Promote and sign write into the run directory; rebuilding its pages changes no byte; DVC sees no change.
    gate = yaml.safe_load((repo / PARAMS_FILE).read_text())
    gate["promote"]["max"] = {"test.bits_per_byte": 8.0}  # the tiny model is far above the default's 1.6
    (tmp_path / "gate.yaml").write_text(yaml.safe_dump(gate))
    promoted = _solomon(repo, "promote", "--params", str(tmp_path / "gate.yaml"))
    assert promoted.returncode == 0, promoted.stdout + promoted.stderr
    key = tmp_path / "signer.pem"
    key.write_bytes(
        ec.generate_private_key(ec.SECP256R1()).private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    signed = _solomon(repo, "sign", "--private-key", str(key))
    assert signed.returncode == 0, signed.stdout + signed.stderr
    assert all((repo / run_dir / name).is_file() for name in WRITTEN_AFTER_REPORT)
    before = tree_digest(repo / run_dir)
    assert _solomon(repo, "report").returncode == 0
    assert tree_digest(repo / run_dir) == before
    assert json.loads(dvc(repo, "status", "--json").stdout) == {}
