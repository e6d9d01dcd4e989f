"""The remote story (docs/remote.md), with real DVC remotes: a directory, and an S3 bucket on an S3-compatible
server on loopback (moto's server mode, real boto3 / aiobotocore traffic). A run pushed there, and a fresh
`git clone` that pulls it, verifies, generates and replays without retraining."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import dvc
from s3 import s3_server

from solomon.pipeline import pipeline_env, run

SOLOMON = str(Path(sys.executable).parent / "solomon")
DVC = str(Path(sys.executable).parent / "dvc")
SECRET = "solomon-test-secret"


def sh(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, env=env or pipeline_env(), capture_output=True, text=True, check=False)


def committed(repo: Path, message: str) -> None:
    for args in (["git", "add", "-A"], ["git", "commit", "-q", "-m", message]):
        run(args, repo)


def use_the_pulled_run(clone: Path, env: dict[str, str] | None = None) -> None:
    assert (clone / "anchors/index.json").is_file() and (clone / "models/model.safetensors").is_file()
    for args in (
        ["verify"],
        ["generate", "--prompt", "In the beginning", "--max-new-tokens", "8"],
        ["replay", "--steps", "5"],
    ):
        done = sh([SOLOMON, *args], clone, env)
        assert done.returncode == 0, f"solomon {' '.join(args)}: {done.stdout}{done.stderr}"
        print(f"solomon {' '.join(args)}: {done.stdout.strip().splitlines()[-1]}")
    assert "bit-identical: 5 steps" in done.stdout


def ignore_run_state(repo: Path) -> None:
    with open(repo / ".gitignore", "a", encoding="utf-8") as ignore:  # what the repository's .gitignore holds
        ignore.write("/checkpoints/\n/mlflow.db\n/mlartifacts/\n")


@pytest.mark.long  # the S3 round trip below runs the same chain in make test
def test_a_fresh_clone_pulls_the_run_then_verifies_generates_and_replays(repo_copy: Path, tmp_path: Path) -> None:
    ignore_run_state(repo_copy)
    dvc(repo_copy, "remote", "add", "-d", "storage", str(tmp_path / "remote"))
    dvc(repo_copy, "push")
    committed(repo_copy, "a run, pushed")

    clone = tmp_path / "clone"
    run(["git", "clone", "-q", str(repo_copy), str(clone)], tmp_path)
    assert not (clone / "models").exists() and not (clone / "anchors").exists()
    dvc(clone, "pull")
    use_the_pulled_run(clone)


@pytest.mark.parametrize("credentials", ["environment", pytest.param("config.local", marks=pytest.mark.long)])
def test_an_s3_remote_round_trip_push_clone_pull_verify_replay(
    repo_copy: Path, tmp_path: Path, credentials: str
) -> None:
    """`make push` to s3://…, on an S3-compatible endpoint (`endpointurl`), with AWS-style credentials from the
    environment or from `.dvc/config.local`, never from the committed `.dvc/config`."""
    with s3_server(tmp_path / "moto.log") as server:
        print(f"S3 server: {server.name}")
        bucket = server.make_bucket("solomon-runs")
        keys = server.credentials()
        env = dict(pipeline_env(), **keys) if credentials == "environment" else pipeline_env()
        ignore_run_state(repo_copy)
        dvc(repo_copy, "remote", "add", "-d", "storage", f"s3://{bucket}/dvc")
        dvc(repo_copy, "remote", "modify", "storage", "endpointurl", server.endpoint)

        def local_credentials(repo: Path) -> None:
            dvc(repo, "remote", "modify", "--local", "storage", "access_key_id", keys["AWS_ACCESS_KEY_ID"])
            dvc(repo, "remote", "modify", "--local", "storage", "secret_access_key", keys["AWS_SECRET_ACCESS_KEY"])

        if credentials == "config.local":
            local_credentials(repo_copy)
        pushed = sh([DVC, "push"], repo_copy, env)
        assert pushed.returncode == 0, pushed.stdout + pushed.stderr
        print(f"dvc push: {pushed.stdout.strip().splitlines()[-1]}")
        stored = server.keys(bucket)
        assert stored and all(key.startswith("dvc/files/md5/") for key in stored), stored[:5]
        committed(repo_copy, "a run, pushed to S3")
        assert SECRET not in (repo_copy / ".dvc/config").read_text()
        assert sh(["git", "check-ignore", "-q", ".dvc/config.local"], repo_copy).returncode == 0

        clone = tmp_path / "clone"
        run(["git", "clone", "-q", str(repo_copy), str(clone)], tmp_path)
        assert not (clone / ".dvc/config.local").exists()  # the secret stayed on the machine that pushed
        if credentials == "config.local":
            local_credentials(clone)
        pulled = sh([DVC, "pull"], clone, env)
        assert pulled.returncode == 0, pulled.stdout + pulled.stderr
        print(f"dvc pull: {pulled.stdout.strip().splitlines()[-1]}")
        use_the_pulled_run(clone, env)


@pytest.mark.long  # two pushes, a clone and two pulls: half a minute
def test_a_push_killed_mid_upload_completes_on_rerun_and_a_pull_names_what_the_remote_lacks(
    repo_copy: Path, tmp_path: Path
) -> None:
    import os
    import signal
    import time

    with s3_server(tmp_path / "moto.log") as server:
        bucket = server.make_bucket("solomon-runs")
        env = dict(pipeline_env(), **server.credentials())
        ignore_run_state(repo_copy)
        dvc(repo_copy, "remote", "add", "-d", "storage", f"s3://{bucket}/dvc")
        dvc(repo_copy, "remote", "modify", "storage", "endpointurl", server.endpoint)
        push = subprocess.Popen([DVC, "push", "--jobs", "1"], cwd=repo_copy, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
        while not server.keys(bucket) and push.poll() is None:
            time.sleep(0.005)
        os.killpg(push.pid, signal.SIGKILL)  # as soon as the first object is stored
        push.wait()
        partial = len(server.keys(bucket))
        pushed = sh([SOLOMON, "push"], repo_copy, env)
        assert pushed.returncode == 0, pushed.stdout + pushed.stderr
        complete = server.keys(bucket)
        assert 0 < partial < len(complete), f"the kill came after the push had ended ({partial} objects)"
        print(f"killed with {partial} of {len(complete)} objects stored; the rerun: {pushed.stdout.strip()}")
        committed(repo_copy, "a run, pushed to S3")
        clone = tmp_path / "clone"
        run(["git", "clone", "-q", str(repo_copy), str(clone)], tmp_path)
        weights = [key for key in complete if key.endswith(".dir")]  # the remote loses the models/ listing
        outs = yaml.safe_load((clone / "dvc.lock").read_text())["stages"]["train"]["outs"]
        models_md5 = next(out["md5"] for out in outs if out["path"] == "models")
        lost = f"dvc/files/md5/{models_md5[:2]}/{models_md5[2:]}"
        assert lost in weights, weights
        server.client().delete_object(Bucket=bucket, Key=lost)
        pulled = sh([SOLOMON, "pull"], clone, env)
        assert pulled.returncode == 2 and pulled.stderr.count("\n") == 1, pulled.stdout + pulled.stderr
        assert "lacks 1 of the files this commit's dvc.lock names (models)" in pulled.stderr, pulled.stderr
        print(pulled.stderr.strip())
        server.client().put_object(Bucket=bucket, Key=lost, Body=(repo_copy / ".dvc/cache/files/md5" /
                                   models_md5[:2] / models_md5[2:]).read_bytes())  # fmt: skip
        pulled = sh([SOLOMON, "pull"], clone, env)
        assert pulled.returncode == 0, pulled.stdout + pulled.stderr
        use_the_pulled_run(clone, env)
