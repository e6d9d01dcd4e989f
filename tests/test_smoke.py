"""`python -m lab smoke` runs the whole pipeline in a scratch copy and leaves the workspace untouched."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from conftest import LAB, ROOT, tree_digest

from lab.scratch import PIPELINE_FILES, lab_env

pytestmark = pytest.mark.slow


@pytest.mark.long
def test_smoke_runs_everything_and_touches_nothing(tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    for name in PIPELINE_FILES:
        subprocess.run(["cp", "-r", str(ROOT / name), str(workspace / name)], check=True)
    before = tree_digest(workspace)
    kept = tmp_path / "smoke-run"  # what CI keeps as the smoke job's artifact
    done = subprocess.run(
        [*LAB, "smoke", "--source", str(workspace), "--keep-run", str(kept)],
        capture_output=True,
        text=True,
        env=lab_env(),
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["metrics"]["val"]["bits_per_byte"] > 0
    assert result["scratch"] is None
    assert tree_digest(workspace) == before
    manifest = json.loads((kept / "manifest.json").read_text())
    assert manifest["predicate"]["run_id"] == result["run"]
    assert json.loads((kept / "metrics.json").read_text()) == result["metrics"]
