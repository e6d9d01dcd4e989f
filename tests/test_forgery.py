"""Each forgery a careful forger would try on a real run of the tiny pipeline, and the one-line answer of
`solomon verify` or `solomon promote` (real files hashed, the real CLI in a subprocess for its exit status).
docs/threat-model.md lists the same classes and what each check proves."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import yaml
from conftest import flip_last_byte, latest_run_dir

from lab.scratch import write_params
from solomon.audit import manifest
from solomon.hashing import sha256_file
from solomon.pipeline import pipeline_env
from solomon.records import RunFiles

SOLOMON = str(Path(sys.executable).parent / "solomon")


def solomon(repo: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([SOLOMON, *args], cwd=repo, env=pipeline_env() | (env or {}), capture_output=True, text=True)


def failures(done: subprocess.CompletedProcess) -> list[str]:
    return [line.removeprefix("FAIL ") for line in done.stdout.splitlines() if line.startswith("FAIL ")]


def rewrite_manifest(run_dir: Path, change: Callable[[dict], None]) -> None:
    """What a careful forger does: change the statement, write it canonically, re-point both pages to it."""
    path = run_dir / RunFiles.MANIFEST
    old = sha256_file(path)
    statement = json.loads(path.read_text())
    change(statement)
    data = manifest.encode(statement)
    path.write_bytes(data)
    for page in RunFiles.PAGES:
        (run_dir / page).write_text((run_dir / page).read_text().replace(old, manifest.digest_of(data)))


def key_pair(folder: Path) -> tuple[Path, Path]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    private, public = folder / "signing.pem", folder / "signing.pub"
    private.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    public.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return private, public


def test_an_added_file_is_named(repo_copy: Path) -> None:
    run_dir = latest_run_dir(repo_copy)
    (run_dir / "notes.txt").write_text("unsigned claims\n")
    (run_dir / "extra").mkdir()
    (run_dir / "extra/model.safetensors").write_bytes(b"weights")
    done = solomon(repo_copy, "verify", str(run_dir))
    assert done.returncode == 1, done.stdout
    assert failures(done) == [
        "extra/model.safetensors: in the run directory but not in the manifest (an added file)",
        "notes.txt: in the run directory but not in the manifest (an added file)",
    ]


def test_a_dropped_subject_is_named_down_to_none(repo_copy: Path) -> None:
    run_dir = latest_run_dir(repo_copy)
    backup = {name: (run_dir / name).read_bytes() for name in (RunFiles.MANIFEST, *RunFiles.PAGES)}

    def drop(name: str) -> Callable[[dict], None]:
        return lambda s: s.update(subject=[x for x in s["subject"] if x["name"] != name])

    rewrite_manifest(run_dir, drop("models/model.safetensors"))
    done = solomon(repo_copy, "verify", str(run_dir))
    assert done.returncode == 1
    assert failures(done) == ["manifest.json: lists no models/model.safetensors (weights); every run has one"]

    for name, data in backup.items():
        (run_dir / name).write_bytes(data)
    rewrite_manifest(run_dir, drop("loss.png"))  # a chart: no role of its own, but a file of the run directory
    done = solomon(repo_copy, "verify", str(run_dir))
    assert failures(done) == ["loss.png: in the run directory but not in the manifest (an added file)"]

    for name, data in backup.items():
        (run_dir / name).write_bytes(data)
    rewrite_manifest(run_dir, lambda s: s.update(subject=[]))  # "verified 0 artifacts" no more
    done = solomon(repo_copy, "verify", str(run_dir))
    assert done.returncode == 1 and "verified 0" not in done.stdout
    assert "manifest.json: lists no provenance" not in done.stdout  # roles are named by their files
    assert any(f.startswith("manifest.json: lists no run.json (provenance)") for f in failures(done))
    assert any(f.startswith("manifest.json: lists no raw-corpus subject") for f in failures(done))


def test_escaping_names_and_symlinks_out_are_refused(repo_copy: Path, tmp_path: Path) -> None:
    run_dir = latest_run_dir(repo_copy)
    outside = repo_copy.parent / "outside.bin"  # where `../outside.bin` points from the repository: it would match
    outside.write_bytes(b"anything the forger likes")
    escaping = {
        str(outside): "subject name is an absolute path",
        f"../{outside.name}": "subject name is not a normalised path",
        "data/./tokenizer.json": "subject name is not a normalised path",
        "data\\tokenizer.json": "subject name holds a backslash",
    }
    for name, answer in escaping.items():
        backup = {n: (run_dir / n).read_bytes() for n in (RunFiles.MANIFEST, *RunFiles.PAGES)}
        extra = {
            "name": name,
            "digest": {"sha256": sha256_file(outside)},
            "annotations": {"role": "weights", "location": "workspace", "size": outside.stat().st_size},
        }
        rewrite_manifest(run_dir, lambda s, extra=extra: s["subject"].append(extra))
        done = solomon(repo_copy, "verify", str(run_dir))
        for n, data in backup.items():
            (run_dir / n).write_bytes(data)
        assert done.returncode == 1 and len(failures(done)) == 1, done.stdout
        assert failures(done)[0].startswith(f"{name}: {answer}"), done.stdout

    # Symlinks whose bytes match but which lead out of the run directory or the repository.
    for link, target_dir, where in (
        (run_dir / "metrics.json", tmp_path / "run-copy", "run directory"),
        (repo_copy / "models/model.safetensors", tmp_path / "models-copy", "repository"),
    ):
        target_dir.mkdir()
        target = target_dir / link.name
        shutil.copyfile(link, target)
        link.unlink()
        link.symlink_to(target)
        done = solomon(repo_copy, "verify", str(run_dir))
        link.unlink()
        shutil.copyfile(target, link)
        name = link.relative_to(run_dir if where == "run directory" else repo_copy).as_posix()
        assert done.returncode == 1 and failures(done) == [f"{name}: a symlink out of the {where} (to {target})"]
    assert solomon(repo_copy, "verify", str(run_dir)).returncode == 0


def test_a_renamed_or_copied_run_directory_is_not_the_run(repo_copy: Path) -> None:
    run_dir = latest_run_dir(repo_copy)
    run_id = run_dir.name
    copy = run_dir.parent / "20990101T000000Z-00000000"
    shutil.copytree(run_dir, copy)
    done = solomon(repo_copy, "verify", str(copy))
    assert done.returncode == 1
    assert failures(done) == [f"run directory {copy.name}: its name is not the manifest's run id {run_id}"]
    assert solomon(repo_copy, "verify", str(run_dir)).returncode == 0  # the original is still itself
    shutil.rmtree(copy)
    renamed = run_dir.parent / "champion"
    run_dir.rename(renamed)
    done = solomon(repo_copy, "verify", str(renamed))
    assert done.returncode == 1 and failures(done) == [
        f"run directory champion: its name is not the manifest's run id {run_id}"
    ]


def test_an_edited_dvc_lock_is_reported_never_silently_redirected(repo_copy: Path) -> None:
    """The forger swaps the workspace's weights and edits dvc.lock so that verify would look in the DVC cache,
    where the run's genuine weights still are: the run verifies there, and verify says so, with exit 3."""
    run_dir = latest_run_dir(repo_copy)
    flip_last_byte(repo_copy / "models/model.safetensors")
    lock_path = repo_copy / "dvc.lock"
    lock = yaml.safe_load(lock_path.read_text())
    models = next(o for o in lock["stages"]["train"]["outs"] if o["path"] == "models")
    models["md5"] = "0" * 32 + ".dir"
    lock_path.write_text(yaml.safe_dump(lock, sort_keys=False))
    done = solomon(repo_copy, "verify", str(run_dir))
    assert done.returncode == 3, done.stdout + done.stderr
    assert [line for line in done.stdout.splitlines() if line.startswith("DIFF")] == [
        "DIFF dvc.lock: stage train differs from the run's record (outs)"
    ]
    assert "2 in the DVC cache" in done.stdout.splitlines()[-1]
    assert done.stdout.splitlines()[-1].endswith(
        f"dvc.lock is not this run's; manifest sha256 {sha256_file(run_dir / 'manifest.json')}"
    )

    # A dvc.lock edited where no output changes (a dependency's hash) is a difference all the same.
    lock = yaml.safe_load(lock_path.read_text())
    models = next(o for o in lock["stages"]["train"]["outs"] if o["path"] == "models")
    recorded = json.loads((run_dir / "manifest.json").read_text())["predicate"]["dvc"]["stages"]["train"]["outs"]
    models["md5"] = next(o["md5"] for o in recorded if o["path"] == "models")
    lock["stages"]["prepare"]["deps"][0]["md5"] = "f" * 32
    lock_path.write_text(yaml.safe_dump(lock, sort_keys=False))
    flip_last_byte(repo_copy / "models/model.safetensors")  # the genuine weights back
    done = solomon(repo_copy, "verify", str(run_dir))
    assert done.returncode == 3 and "DIFF dvc.lock: stage prepare differs from the run's record (deps)" in done.stdout


def forge_consistently(repo: Path, run_dir: Path) -> None:
    """Weights, manifest and both pages rewritten together: plain verify cannot tell."""
    flip_last_byte(repo / "models/model.safetensors")
    forged = sha256_file(repo / "models/model.safetensors")

    def point_at_forged_weights(statement: dict) -> None:
        for subject in statement["subject"]:
            if subject["name"] == "models/model.safetensors":
                subject["digest"]["sha256"] = forged

    rewrite_manifest(run_dir, point_at_forged_weights)


def test_a_consistent_unsigned_forgery_is_refused_by_a_promotion_that_requires_a_signature(
    repo_copy: Path, tmp_path: Path
) -> None:
    run_dir = latest_run_dir(repo_copy)
    keys = tmp_path / "keys"
    keys.mkdir()
    _, public = key_pair(keys)
    write_params(repo_copy, {"promote": {"max": {"test.bits_per_byte": 8.0}, "require": {"signature": str(public)}}})
    forge_consistently(repo_copy, run_dir)
    assert solomon(repo_copy, "verify", str(run_dir)).returncode == 0  # the documented limit of plain verify
    done = solomon(repo_copy, "promote", str(run_dir))
    assert done.returncode == 1 and done.stdout.splitlines() == [
        f"promote refused: verify failed: manifest.sig: missing (sign the run with `solomon sign`); "
        f"run `solomon verify {run_dir}`"
    ]
    # Signed by someone else's key, the forgery is refused by name too; and a key inside the run is no key at all.
    stranger = tmp_path / "stranger"
    stranger.mkdir()
    stranger_private, _ = key_pair(stranger)
    assert solomon(repo_copy, "sign", str(run_dir), "--private-key", str(stranger_private)).returncode == 0
    done = solomon(repo_copy, "promote", str(run_dir))
    assert done.returncode == 1 and done.stdout.startswith(
        f"promote refused: verify failed: manifest.sig: does not verify with {public}"
    )
    shutil.copyfile(public, run_dir / "signing.pub")
    done = solomon(repo_copy, "promote", str(run_dir), "--public-key", str(run_dir / "signing.pub"))
    assert done.returncode == 2 and "is inside the run directory: a run cannot vouch for itself" in done.stderr
    # An expected digest from outside the run directory (here the variable promote.require.digest_env names)
    # refuses it as well.
    (run_dir / "signing.pub").unlink()
    write_params(repo_copy, {"promote": {"require": {"signature": None, "digest_env": "RELEASED_DIGEST"}}})
    done = solomon(repo_copy, "promote", str(run_dir), env={"RELEASED_DIGEST": "0" * 64})
    assert done.returncode == 1 and done.stdout.startswith("promote refused: verify failed: manifest.json: SHA256 ")
    assert "is not the expected 000000000000" in done.stdout


def test_a_signed_promotion_is_bound_to_the_run_and_the_registry(repo_copy: Path, tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    run_dir = latest_run_dir(repo_copy)
    private, public = key_pair(tmp_path)
    write_params(repo_copy, {"promote": {"max": {"test.bits_per_byte": 8.0}, "require": {"signature": str(public)}}})
    assert solomon(repo_copy, "sign", str(run_dir), "--private-key", str(private)).returncode == 0
    done = solomon(repo_copy, "promote", str(run_dir))
    assert done.returncode == 0, done.stdout + done.stderr
    record = json.loads((run_dir / "promotion.json").read_text())
    assert record["required"] == {"signed_by_public_key_sha256": sha256_file(public), "expected_digest": False}
    version = MlflowClient(f"sqlite:///{repo_copy / 'mlflow.db'}").get_model_version_by_alias("solomon", "champion")
    assert version.tags["promotion.sha256"] == sha256_file(run_dir / "promotion.json")
    done = solomon(repo_copy, "verify", str(run_dir), "--public-key", str(public))
    assert done.returncode == 0 and "NOTE promotion.json: not signed" in done.stdout
    signed = solomon(repo_copy, "sign", str(run_dir), "--private-key", str(private))
    assert signed.returncode == 0 and "promotion.json.sig" in signed.stdout
    assert solomon(repo_copy, "verify", str(run_dir), "--public-key", str(public)).stdout.count("NOTE") == 0
    # The record edited after the fact: its signature no longer verifies.
    (run_dir / "promotion.json").write_text((run_dir / "promotion.json").read_text().replace('"1"', '"7"'))
    done = solomon(repo_copy, "verify", str(run_dir), "--public-key", str(public))
    assert done.returncode == 1 and failures(done)[0].startswith(
        f"promotion.json.sig: does not verify promotion.json with {public}"
    )
    # A promotion record moved in from another run names that run.
    record["run_id"] = "20990101T000000Z-00000000"
    (run_dir / "promotion.json").write_text(json.dumps(record))
    (run_dir / "promotion.json.sig").unlink()
    done = solomon(repo_copy, "verify", str(run_dir))
    assert failures(done) == [
        f"promotion.json: records the promotion of run 20990101T000000Z-00000000, not of this run {run_dir.name}"
    ]
