"""The serving image built and run for real with podman (`make image-check`): the tiny run's image on the local
Debian base, answering /readyz, /v1/provenance and /v1/completions, traced by `solomon lineage` back to the corpus
with the image's ID in the chain; then a checkout whose weights were altered, refused at the build's verify step.

`make test` (CI) skips it: cold, the base image (debootstrap, about 2–3 min) and the image (about 2 GB of wheels
installed, about 5 min) would add most of ten minutes to a suite that must stay under 15 on two cores, and CI's job
runs in a container where podman cannot start containers. Warm (the base image and the wheelhouse cached by
content, the engine's layer cache) it takes under a minute. `make image-check` sets SOLOMON_IMAGE_CHECK=1.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, flip_last_byte, latest_run_dir
from serve_helpers import free_port, request

from lab.scratch import write_params
from solomon.pipeline import pipeline_env

BUILD = [sys.executable, str(ROOT / ".ci/build-image")]
SOLOMON = str(Path(sys.executable).parent / "solomon")
POLICY = {"promote": {"max": {"test.bits_per_byte": 8.0}, "tolerance": 0.99}}  # the tiny model's bar


def _why_not() -> str | None:
    if os.environ.get("SOLOMON_IMAGE_CHECK") != "1":
        return "minutes of image building: `make image-check` runs it (SOLOMON_IMAGE_CHECK=1)"
    if shutil.which("podman") is None:
        return "podman is not installed: `make podman` installs it (root, apt)"
    if os.geteuid() != 0:
        return "the local base image needs root (debootstrap) and rootful podman"
    return None


pytestmark = [pytest.mark.slow, pytest.mark.skipif(_why_not() is not None, reason=_why_not() or "")]


def solomon(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([SOLOMON, *args], cwd=repo, env=pipeline_env(), capture_output=True, text=True)


def build(repo: Path, *args: str) -> subprocess.CompletedProcess:
    env = pipeline_env() | {"PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    return subprocess.run([*BUILD, "--root", str(repo), "--base-image", "local", *args], env=env, text=True,
                          capture_output=True)  # fmt: skip


def test_the_image_serves_the_run_lineage_traces_it_and_altered_weights_fail_the_build(repo_copy: Path) -> None:
    write_params(repo_copy, POLICY)
    run_dir = latest_run_dir(repo_copy)
    digest = hashlib.sha256((run_dir / "manifest.json").read_bytes()).hexdigest()
    done = solomon(repo_copy, "promote", str(run_dir))
    assert done.returncode == 0, done.stdout + done.stderr
    tag = f"localhost/solomon-check:{run_dir.name.lower()}"
    iidfile = repo_copy.parent / "image.iid"
    started = time.monotonic()
    done = build(repo_copy, str(run_dir), "--tag", tag, "--iidfile", str(iidfile))
    assert done.returncode == 0, done.stdout + done.stderr
    built_s = time.monotonic() - started
    image_id = iidfile.read_text().strip()
    labels = json.loads(subprocess.run(["podman", "inspect", image_id], capture_output=True, check=True).stdout)
    config = labels[0]["Config"]
    assert config["Labels"]["dev.solomon.run-id"] == run_dir.name
    assert config["Labels"]["dev.solomon.manifest-sha256"] == digest
    assert config["User"] == "10001"
    size = labels[0]["Size"]  # the serving lock only, torch's unused parts left out (Dockerfile)
    assert size < 10**9, f"the serving image is {size / 1e9:.2f} GB: more than the 1 GB the serving lock allows"

    port, name = free_port(), f"solomon-check-{os.getpid()}"
    started = time.monotonic()
    subprocess.run(
        ["podman", "run", "-d", "--name", name, "--network", "host", "-e", f"SOLOMON_IMAGE_DIGEST={image_id}",
         image_id, "--host", "127.0.0.1", "--port", str(port)],
        check=True, capture_output=True,
    )  # fmt: skip
    try:
        while True:
            try:
                if request(port, "GET", "/readyz")[0] == 200:
                    break
            except OSError:
                pass
            state = subprocess.run(["podman", "inspect", "-f", "{{.State.Running}}", name], capture_output=True)
            logs = subprocess.run(["podman", "logs", name], capture_output=True, text=True)
            assert state.stdout.strip() == b"true", logs.stdout + logs.stderr
            assert time.monotonic() - started < 90, "/readyz not 200 within 90 s"
            time.sleep(0.2)
        ready_s = time.monotonic() - started
        provenance = request(port, "GET", "/v1/provenance")[1]
        assert provenance["manifest_sha256"] == digest and provenance["image_digest"] == image_id
        status, answer, _ = request(port, "POST", "/v1/completions", {"prompt": "In the beginning", "seed": 0})
        assert status == 200 and answer["system_fingerprint"] == digest and answer["choices"][0]["text"]

        done = solomon(repo_copy, "lineage", "--url", f"http://127.0.0.1:{port}")
        assert done.returncode == 0, done.stdout + done.stderr
        lines = done.stdout.splitlines()
        assert lines[1].split() == ["image", image_id], done.stdout  # traffic → image → registry → … → corpus
        assert f"tag manifest.sha256 {digest}" in lines[2] and lines[-1] == "lineage holds: every link verified"
        assert lines[-2].startswith("answers") and "tokens equal over 8 fresh prompts" in lines[-2], done.stdout
        stopped = subprocess.run(["podman", "stop", "-t", "30", name], capture_output=True)
        assert stopped.returncode == 0
        code = subprocess.run(["podman", "inspect", "-f", "{{.State.ExitCode}}", name], capture_output=True, text=True)
        assert code.stdout.strip() == "0"  # SIGTERM drains and exits 0
    finally:
        subprocess.run(["podman", "rm", "-f", name], capture_output=True)
    print(f"\nimage built in {built_s:.1f} s, {size / 1e9:.3f} GB, /readyz after {ready_s:.1f} s")

    # The same run, pinned to its digest as a registry tag would pin it, from a checkout whose weights were altered:
    # nothing refuses it before the build, and the build's own `solomon verify` does, in one line.
    flip_last_byte(repo_copy / "models/model.safetensors")
    done = build(repo_copy, run_dir.name, "--expect-digest", digest, "--tag", f"{tag}-altered")
    assert done.returncode == 1, done.stdout + done.stderr
    refusal = done.stderr.strip().splitlines()
    assert len(refusal) == 1 and refusal[0].startswith(f"image: the build's verify step refused run {run_dir.name}")
    assert "models/model.safetensors: SHA256 mismatch" in refusal[0]
    assert subprocess.run(["podman", "image", "exists", f"{tag}-altered"]).returncode == 1
    subprocess.run(["podman", "untag", image_id, tag], capture_output=True)  # the layers stay cached for the next run
