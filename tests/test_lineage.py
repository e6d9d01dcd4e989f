"""`solomon lineage --url` against a real server on 127.0.0.1 serving the champion of the tiny pipeline's
registry: every link holds; once the alias moves to another version while the old server still runs, it fails,
naming the registry link. A server of a run the workspace has moved on from still loads it, from the DVC cache."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

from conftest import dvc, latest_run_dir
from serve_helpers import SOLOMON, request, start, stop, wait

from solomon.tools.scratch import pipeline_env, write_params

# The tiny model is far above the default promote.max; any later run is allowed to become the champion.
POLICY = {"promote": {"max": {"test.bits_per_byte": 8.0}, "tolerance": 0.99}}


def solomon(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([SOLOMON, *args], cwd=repo, env=pipeline_env(), capture_output=True, text=True)


def test_lineage_holds_then_names_the_registry_link_once_the_alias_moves(repo_copy: Path) -> None:
    write_params(repo_copy, POLICY)
    first = latest_run_dir(repo_copy)
    done = solomon(repo_copy, "promote", str(first))
    assert done.returncode == 0, done.stdout + done.stderr
    digest = hashlib.sha256((first / "manifest.json").read_bytes()).hexdigest()
    process, port = start(repo_copy, "--model", "models:/solomon@champion", env={"SOLOMON_IMAGE_DIGEST": "sha256:ab"})
    try:
        wait(port, process)
        provenance = request(port, "GET", "/v1/provenance")[1]
        assert provenance["registry"] == {"name": "solomon", "version": "1", "alias": "champion"}
        assert provenance["manifest_sha256"] == digest and provenance["image_digest"] == "sha256:ab"
        done = solomon(repo_copy, "lineage", "--url", f"http://127.0.0.1:{port}")
        assert done.returncode == 0, done.stdout + done.stderr
        lines = done.stdout.splitlines()
        links = [line.split()[0] for line in lines[:-1]]
        chain = "traffic image registry manifest run weights tokenizer corpus params git requirements"
        assert links == chain.split(), done.stdout
        assert f"tag manifest.sha256 {digest}" in done.stdout and first.name in done.stdout
        assert lines[-1] == "lineage holds: every link verified"

        write_params(repo_copy, {"lr": {"peak": 1e-3}, "train": {"max_steps": 40}})
        shutil.rmtree(repo_copy / "checkpoints")
        dvc(repo_copy, "repro")
        second = latest_run_dir(repo_copy)
        done = solomon(repo_copy, "promote", str(second))
        assert done.returncode == 0 and "version 2 is now champion" in done.stdout, done.stdout + done.stderr
        done = solomon(repo_copy, "lineage", "--url", f"http://127.0.0.1:{port}")
        assert done.returncode == 1, done.stdout + done.stderr
        assert done.stdout.startswith("lineage broken at registry: models:/solomon@champion is version 2")
        assert len(done.stdout.splitlines()) == 1 and f"the server serves manifest {digest}" in done.stdout
    finally:
        stop(process)

    # The first run again, now that the workspace's dvc.lock is the second's: its files verify in the DVC cache.
    process, port = start(repo_copy, "--run", str(first))
    try:
        wait(port, process)
        provenance = request(port, "GET", "/v1/provenance")[1]
        assert provenance["manifest_sha256"] == digest and provenance["workspace_dvc_lock_differs"]
        assert provenance["files"]["models/model.safetensors"]["verified_in"] == "DVC cache"
    finally:
        stop(process)
