"""`solomon lineage --url` against a real server on 127.0.0.1 serving the champion of the tiny pipeline's
registry: every link holds, the answers to fresh prompts included; once the alias moves to another version while the
old server still runs, it fails, naming the registry link; from the answers alone the server is the first run's, a
proxy that makes it claim the second run's digest is caught by its answers, and so is `mlflow models serve` of the
second run's model challenged as the first's. A server of a run the workspace has moved on from still loads it,
from the DVC cache. `solomon lineage --export` from an export of each format: the same chain after the export
link; a tampered export breaks it there. The chain challenges with the weights its manifest link verified."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import urllib.request
from dataclasses import replace
from itertools import zip_longest
from pathlib import Path

import pytest
import torch
from conftest import dvc, flip_last_byte, latest_run_dir, wait_until
from serve_helpers import SOLOMON, LyingProxy, free_port, request, start, stop, wait

from lab.scratch import write_params
from solomon import records
from solomon.audit.verify import verify
from solomon.export.gguf_file import export_gguf
from solomon.export.hf import export_hf
from solomon.lineage.chain import export_chain
from solomon.pipeline import pipeline_env
from solomon.serving.loader import load_from, load_verified

# The tiny model is far above the default promote.max; any later run is allowed to become the champion.
POLICY = {"promote": {"max": {"test.bits_per_byte": 8.0}, "tolerance": 0.99}}
# the tail a server's chain and an export's share
RUN_LINKS = ["manifest", "run id", "weights", "tokenizer", "corpus", "params", "git commit", "requirements"]


def links(stdout: str) -> list[str]:
    """The link names of `solomon lineage`'s chain (each line: the name in 13 columns, then what holds)."""
    return [line[:13].strip() for line in stdout.splitlines()[:-1]]


def solomon(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([SOLOMON, *args], cwd=repo, env=pipeline_env(), capture_output=True, text=True)


def subject_sha256(run_dir: Path, name: str) -> str:
    statement = json.loads((run_dir / "manifest.json").read_text())
    return next(s["digest"]["sha256"] for s in statement["subject"] if s["name"] == name)


def mlflow_serve(repo: Path, tmp_path: Path) -> tuple[subprocess.Popen, int]:
    """`mlflow models serve` of the registry's champion on a free loopback port, answering."""
    port = free_port()
    log = open(tmp_path / "mlflow-serve.log", "w")  # noqa: SIM115 (the server holds it open until it stops)
    env = pipeline_env() | {"MLFLOW_TRACKING_URI": f"sqlite:///{repo / 'mlflow.db'}"}
    server = subprocess.Popen(
        [str(Path(SOLOMON).parent / "mlflow"), "models", "serve", "-m", "models:/solomon@champion",
         "--env-manager", "local", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        cwd=repo, env=env, stdout=log, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    wait_until(lambda: pings(port), "mlflow models serve to answer /ping", process=server, timeout=180)
    return server, port


def pings(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=5) as answer:
            return answer.status == 200
    except OSError:
        return False


@pytest.mark.long
def test_lineage_holds_then_names_the_registry_link_once_the_alias_moves(repo_copy: Path, tmp_path: Path) -> None:
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
        assert links(done.stdout) == ["traffic", "image", "registry", *RUN_LINKS, "answers"], done.stdout
        answers = lines[-2][13:]
        assert re.match(r"(\d+)/\1 tokens equal over 8 fresh prompts, max \|Δ logprob\| ", answers), answers
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

        # From the answers alone: the server computes with the first run's weights, not the second's.
        url = f"http://127.0.0.1:{port}"
        done = solomon(repo_copy, "lineage", "--url", url, "--answers-only", "--run", first.name)
        assert done.returncode == 0 and links(done.stdout) == ["run", "answers"], done.stdout + done.stderr
        done = solomon(repo_copy, "lineage", "--url", url, "--answers-only", "--run", second.name)
        assert done.returncode == 1, done.stdout + done.stderr
        assert re.match(r"lineage broken at answers: prompt \d+ token \d+: the server answered ", done.stdout)
        done = solomon(repo_copy, "lineage", "--url", url, "--identify")
        assert done.returncode == 0 and done.stdout.splitlines()[-1] == f"identify: {first.name} answers", done.stdout

        # A proxy that makes the first run's server say it is the champion (the second run): every claim-based
        # link holds, and the answers catch it.
        second_digest = hashlib.sha256((second / "manifest.json").read_bytes()).hexdigest()
        claims = {
            "manifest_sha256": second_digest,
            "run_id": second.name,
            "weights_sha256": subject_sha256(second, "models/model.safetensors"),
        }
        proxy = LyingProxy(port, claims)
        try:
            done = solomon(repo_copy, "lineage", "--url", f"http://127.0.0.1:{proxy.port}")
        finally:
            proxy.close()
        assert done.returncode == 1, done.stdout + done.stderr
        assert done.stdout.startswith("lineage broken at answers: prompt "), done.stdout
    finally:
        stop(process)

    # MLflow's server of the champion (the second run), challenged on its text alone.
    server, port = mlflow_serve(repo_copy, tmp_path)
    try:
        url = f"http://127.0.0.1:{port}/invocations"
        done = solomon(repo_copy, "lineage", "--url", url, "--answers-only", "--run", second.name)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "8/8 sampled texts equal" in done.stdout and "text only" in done.stdout, done.stdout
        done = solomon(repo_copy, "lineage", "--url", url, "--answers-only", "--run", first.name)
        assert done.returncode == 1 and done.stdout.startswith("lineage broken at answers: prompt "), done.stdout
    finally:
        server.terminate()
        server.wait(timeout=30)

    # The first run again, now that the workspace's dvc.lock is the second's: its files verify in the DVC cache.
    process, port = start(repo_copy, "--run", str(first))
    try:
        wait(port, process)
        provenance = request(port, "GET", "/v1/provenance")[1]
        assert provenance["manifest_sha256"] == digest and provenance["workspace_dvc_lock_differs"]
        assert provenance["files"]["models/model.safetensors"]["verified_in"] == "DVC cache"
    finally:
        stop(process)


def test_lineage_from_an_export_holds_for_each_format_and_breaks_at_a_tampered_one(
    built_repo: Path, mlflow_export: Path, tmp_path: Path
) -> None:
    run_dir = latest_run_dir(built_repo)
    hf = export_hf(run_dir, built_repo, tmp_path / "hf")
    for export in (hf, mlflow_export):
        done = solomon(built_repo, "lineage", "--export", str(export))
        assert done.returncode == 0, done.stdout + done.stderr
        lines = done.stdout.splitlines()
        assert links(done.stdout) == ["export", *RUN_LINKS], done.stdout
        assert lines[0][13:].startswith(f"{export}: ") and "verified" in lines[0]
        assert run_dir.name in done.stdout and lines[-1] == "lineage holds: every link verified"
    gguf = export_gguf(run_dir, built_repo, tmp_path / "gguf").parent
    assert [link for link, _ in export_chain(gguf, built_repo)] == ["export", *RUN_LINKS]

    flip_last_byte(hf / "model.safetensors")
    done = solomon(built_repo, "lineage", "--export", str(hf))
    assert done.returncode == 1 and len(done.stdout.splitlines()) == 1, done.stdout + done.stderr
    assert done.stdout.startswith(f"lineage broken at export: {hf / 'model.safetensors'}: SHA256 mismatch")
    both = solomon(built_repo, "lineage", "--url", "http://127.0.0.1:9", "--export", str(mlflow_export))
    assert both.returncode == 2 and "not allowed with argument --url" in both.stderr, both.stderr


def test_the_chain_loads_the_weights_its_manifest_link_verified_and_nothing_that_did_not_verify(
    built_repo: Path,
) -> None:
    # server_chain verifies the whole run once and challenges with what that verification hashed (load_from): the
    # same model as serving's own load_verified, and no load at all from a verification with a problem
    run_dir = latest_run_dir(built_repo)
    whole = verify(run_dir, built_repo)
    assert not whole.problems
    chained, served = load_from(whole), load_verified(run_dir, built_repo)
    assert chained.files == served.files and chained.manifest_sha256 == served.manifest_sha256
    assert all(torch.equal(a, b) for a, b in zip_longest(chained.model.parameters(), served.model.parameters()))
    with pytest.raises(ValueError, match="without problems"):
        load_from(replace(whole, problems=["weights: sha256 differs"]))
    with pytest.raises(ValueError, match="without problems"):
        load_from(verify(run_dir, built_repo, names={records.TOKENIZER}))  # the weights were not hashed
