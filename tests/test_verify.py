"""`solomon verify` against real run directories of the tiny pipeline: tampering of every kind is caught and
named; a run still verifies from the DVC cache after the workspace has moved on, and says so (exit 3). The
forgeries a careful forger would try are in test_forgery.py."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import dvc, flip_last_byte, latest_run_dir

from lab.scratch import write_params
from solomon.audit import manifest
from solomon.pipeline import pipeline_env
from solomon.records import LATEST, RunFiles

SOLOMON = str(Path(sys.executable).parent / "solomon")


def verify(repo: Path, run_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [SOLOMON, "verify", str(run_dir), *extra], cwd=repo, env=pipeline_env(), capture_output=True, text=True
    )


def edit_a_digest_canonically(path: Path) -> None:
    """An edit a careful forger would make: a subject's digest changed, the file rewritten canonically."""
    statement = json.loads(path.read_text())
    statement["subject"][0]["digest"]["sha256"] = "0" * 64
    path.write_bytes(manifest.encode(statement))


def test_untouched_run_verifies_and_each_kind_of_tampering_is_named(repo_copy: Path) -> None:
    run_dir = latest_run_dir(repo_copy)
    done = verify(repo_copy, run_dir)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"verified {len(json.loads((run_dir / 'manifest.json').read_text())['subject'])} artifacts" in done.stdout
    assert "in the workspace" in done.stdout and "DVC cache" not in done.stdout and "DIFF" not in done.stdout

    cases = {
        "models/model.safetensors": (repo_copy / "models/model.safetensors", flip_last_byte),
        "data/tokenizer.json": (repo_copy / "data/tokenizer.json", flip_last_byte),
        "data/tokens/train.bin": (repo_copy / "data/tokens/train.bin", flip_last_byte),
        "metrics.json": (run_dir / "metrics.json", flip_last_byte),
        "hyperparameters.yaml": (
            run_dir / "hyperparameters.yaml",
            lambda p: p.write_text(p.read_text().replace("warmup: 20", "warmup: 21")),
        ),
        "data/tokens/val.bin: missing": (repo_copy / "data/tokens/val.bin", Path.unlink),
        "manifest.json: edited": (
            run_dir / "manifest.json",
            lambda p: p.write_text(json.dumps(json.loads(p.read_text()) | {"note": "edited by hand"})),
        ),
        "manifest.json: its SHA256": (run_dir / "manifest.json", edit_a_digest_canonically),
        "manifest.json: its SHA256 ": (
            run_dir / "manifest.json",
            lambda p: p.write_text(p.read_text().replace('"run_id": "', '"run_id": "x')),
        ),
    }
    for expected, (path, tamper) in cases.items():
        backup = path.read_bytes()
        tamper(path)
        done = verify(repo_copy, run_dir)
        path.write_bytes(backup)
        assert done.returncode == 1, (expected, done.stdout, done.stderr)
        failures = [line for line in done.stdout.splitlines() if line.startswith("FAIL ")]
        if not expected.startswith("manifest.json"):  # one artifact tampered with: only it is named
            assert all(line.startswith(f"FAIL {expected.split(':')[0]}:") for line in failures), (expected, failures)
        assert any(expected in line for line in failures), (expected, failures)
    assert verify(repo_copy, run_dir).returncode == 0  # everything restored


def test_a_subset_and_bad_input(repo_copy: Path) -> None:
    run_dir = latest_run_dir(repo_copy)
    flip_last_byte(repo_copy / "data/tokens/train.bin")
    done = verify(repo_copy, run_dir, "--artifact", "models/model.safetensors", "--artifact", "data/tokenizer.json")
    assert done.returncode == 0 and "verified 2 artifacts" in done.stdout, done.stdout + done.stderr
    done = verify(repo_copy, run_dir, "--artifact", "models/nothing.bin")
    assert done.returncode == 1 and "FAIL models/nothing.bin: not in the manifest" in done.stdout
    done = verify(repo_copy, repo_copy / "reports")
    assert done.returncode == 2 and done.stderr.startswith("error: ") and len(done.stderr.splitlines()) == 1
    # No run named: the latest run (reports/latest.json); without one, a one-line error.
    done = subprocess.run(
        [SOLOMON, "verify", "--artifact", "models/model.safetensors"],
        cwd=repo_copy,
        env=pipeline_env(),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0 and done.stdout.startswith(f"{run_dir.name}: verified 1 artifacts"), done.stderr
    # A run id names the run under report.root of the repository --root, from any directory.
    done = subprocess.run(
        [SOLOMON, "verify", run_dir.name, "--root", str(repo_copy), "--artifact", "models/model.safetensors"],
        cwd=repo_copy.parent,
        env=pipeline_env(),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0 and done.stdout.startswith(f"{run_dir.name}: verified 1 artifacts"), done.stderr
    (repo_copy / LATEST).unlink()
    done = subprocess.run([SOLOMON, "verify"], cwd=repo_copy, env=pipeline_env(), capture_output=True, text=True)
    assert done.returncode == 2 and f"{LATEST} not found" in done.stderr


@pytest.mark.long
def test_an_older_run_verifies_from_the_dvc_cache_after_the_workspace_moved_on(repo_copy: Path) -> None:
    old_run = latest_run_dir(repo_copy)
    write_params(repo_copy, {"lr": {"warmup": 10}})
    shutil.rmtree(repo_copy / "checkpoints")
    dvc(repo_copy, "repro")
    assert latest_run_dir(repo_copy) != old_run
    done = verify(repo_copy, old_run)
    # Every file of the old run verifies, its models from the DVC cache — said, with its own exit status, because
    # the workspace's dvc.lock is no longer the run's.
    assert done.returncode == 3, done.stdout + done.stderr
    assert "DIFF dvc.lock: stage train differs from the run's record" in done.stdout
    assert "in the DVC cache" in done.stdout.splitlines()[-1] and "dvc.lock is not this run's" in done.stdout
    assert verify(repo_copy, latest_run_dir(repo_copy)).returncode == 0  # the new run is the workspace's
    # Without the cached object, the old weights are gone: verify says where it looked.
    old_model = json.loads((old_run / "manifest.json").read_text())["predicate"]["dvc"]["stages"]["train"]["outs"]
    listing = next(o["md5"] for o in old_model if o["path"] == "models")
    cache = repo_copy / ".dvc/cache/files/md5"
    entries = json.loads((cache / listing[:2] / listing[2:]).read_text())
    weights = next(e["md5"] for e in entries if e["relpath"] == "model.safetensors")
    (cache / weights[:2] / weights[2:]).unlink()
    done = verify(repo_copy, old_run)
    assert done.returncode == 1
    assert [line.split(" (")[0] for line in done.stdout.splitlines() if line.startswith("FAIL")] == [
        "FAIL models/model.safetensors: missing"
    ]
    assert "DVC cache" in done.stdout


def test_a_workspace_without_its_dvc_lock_is_not_the_runs_unless_declared(repo_copy: Path) -> None:
    """The run recorded a dvc.lock; a workspace without one no longer says how its files were made: that is the
    workspace's claim differing (exit 3, one DIFF line saying what to restore), not a pass. Where no dvc.lock
    belongs (the serving image: the run directory, weights and tokenizer only), `--no-dvc-lock` declares it."""
    run_dir = latest_run_dir(repo_copy)
    (repo_copy / "dvc.lock").unlink()
    done = verify(repo_copy, run_dir)
    assert done.returncode == 3, done.stdout + done.stderr
    diff = [line for line in done.stdout.splitlines() if line.startswith("DIFF")]
    assert len(diff) == 1 and diff[0].startswith("DIFF dvc.lock: missing from the workspace"), done.stdout
    assert f"-- {run_dir}) -- dvc.lock" in diff[0] and "FAIL" not in done.stdout  # what to restore, named
    assert "in the workspace" in done.stdout.splitlines()[-1]  # its files were hashed where they are, and verify
    declared = verify(repo_copy, run_dir, "--no-dvc-lock")
    assert declared.returncode == 0 and "DIFF" not in declared.stdout, declared.stdout + declared.stderr
    assert "NOTE dvc.lock: none under the root; workspace files were hashed where they are" in declared.stdout


def test_generate_samples_repeatably_and_refuses_weights_that_do_not_verify(repo_copy: Path) -> None:
    run_dir = latest_run_dir(repo_copy)
    command = [SOLOMON, "generate", "--run", str(run_dir), "--prompt", "In the beginning", "--seed", "7"]
    first, second = (
        subprocess.run(command, cwd=repo_copy, env=pipeline_env(), capture_output=True, text=True) for _ in range(2)
    )
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout and first.stdout.startswith("In the beginning")
    hyperparameters = run_dir / "hyperparameters.yaml"  # read for the sampling defaults: verified first too
    original = hyperparameters.read_bytes()
    hyperparameters.write_bytes(original.replace(b"temperature: 0.8", b"temperature: 1.8"))
    refused = subprocess.run(command, cwd=repo_copy, env=pipeline_env(), capture_output=True, text=True)
    hyperparameters.write_bytes(original)
    assert refused.returncode == 2 and "hyperparameters.yaml: SHA256 mismatch" in refused.stderr
    env = {k: v for k, v in pipeline_env().items() if k != "SOLOMON_RUN"}
    no_run = [SOLOMON, "generate", "--prompt", "In the beginning", "--seed", "7"]
    latest = subprocess.run(no_run, cwd=repo_copy, env=env, capture_output=True, text=True)
    assert latest.stdout == first.stdout, latest.stderr  # no --run: the latest run
    flip_last_byte(repo_copy / "models/model.safetensors")
    refused = subprocess.run(command, cwd=repo_copy, env=pipeline_env(), capture_output=True, text=True)
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.startswith("error: refusing to load") and "models/model.safetensors: SHA256" in refused.stderr


def test_a_signed_run_catches_the_forgery_an_unsigned_one_cannot(repo_copy: Path, tmp_path: Path) -> None:
    """A consistent rewrite of the manifest and both pages passes plain verify (the documented limit); with the
    run signed, `verify --public-key` names the signature. A wrong key and a missing signature fail too."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    def key_pair(name: str) -> tuple[Path, Path]:
        key = ec.generate_private_key(ec.SECP256R1())
        private, public = tmp_path / f"{name}.pem", tmp_path / f"{name}.pub"
        private.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
        public.write_bytes(
            key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        )
        return private, public

    run_dir = latest_run_dir(repo_copy)
    private, public = key_pair("signer")
    _, stranger = key_pair("stranger")
    done = verify(repo_copy, run_dir, "--public-key", str(public))
    assert done.returncode == 1 and "FAIL manifest.sig: missing" in done.stdout
    signed = subprocess.run(
        [SOLOMON, "sign", str(run_dir), "--private-key", str(private)],
        env=pipeline_env(),
        capture_output=True,
        text=True,
    )
    assert signed.returncode == 0 and (run_dir / "manifest.sig").is_file(), signed.stderr
    assert verify(repo_copy, run_dir, "--public-key", str(public)).returncode == 0
    done = verify(repo_copy, run_dir, "--public-key", str(stranger))
    assert done.returncode == 1 and "FAIL manifest.sig: does not verify" in done.stdout

    # The forger changes the recorded git commit and rewrites manifest and pages consistently.
    old_digest = manifest.digest_of((run_dir / "manifest.json").read_bytes())
    statement = json.loads((run_dir / "manifest.json").read_text())
    statement["predicate"]["git"]["commit"] = "f" * 40
    forged = manifest.encode(statement)
    (run_dir / "manifest.json").write_bytes(forged)
    for page in RunFiles.PAGES:
        path = run_dir / page
        path.write_text(path.read_text().replace(old_digest, manifest.digest_of(forged)))
    assert verify(repo_copy, run_dir).returncode == 0  # unsigned verify cannot tell
    done = verify(repo_copy, run_dir, "--public-key", str(public))
    assert done.returncode == 1
    assert [line.split(" (")[0] for line in done.stdout.splitlines() if line.startswith("FAIL")] == [
        f"FAIL manifest.sig: does not verify with {public}"
    ]
