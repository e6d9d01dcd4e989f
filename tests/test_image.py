"""The Dockerfile: hadolint-clean, and what the image runs — its verify step and its entrypoint, `solomon serve` —
run here outside a container on the image's file layout, rebuilt from the Dockerfile's COPY lines."""

from __future__ import annotations

import ast
import hashlib
import json
import re
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, flip_last_byte, latest_run_dir
from packaging.utils import canonicalize_name
from serve_helpers import free_port, request, wait

from solomon.pipeline import pipeline_env

BIN = Path(sys.executable).parent
DOCKERFILE = (ROOT / "Dockerfile").read_text()


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n\s*", " ", "\n".join(line for line in DOCKERFILE.splitlines() if not line.startswith("#")))
    return [(line.split()[0], line.split(None, 1)[1]) for line in text.splitlines() if line.strip()]


def test_hadolint_passes() -> None:
    done = subprocess.run([str(BIN / "hadolint"), "Dockerfile"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_base_pinned_hashes_required_non_root_and_labelled() -> None:
    steps = instructions()
    base = steps[0][1] if steps[0][0] == "ARG" else ""  # the base is a build argument, the public default
    assert re.fullmatch(r"BASE_IMAGE=python:3\.11-slim-\w+@sha256:[0-9a-f]{64}", base) and steps[1][0] == "FROM"
    assert dict(steps)["FROM"] == "${BASE_IMAGE}"
    runs = [args for kind, args in steps if kind == "RUN"]
    assert any("--require-hashes" in r and "-r requirements-serve.lock" in r for r in runs)
    assert any(r.startswith("solomon verify") and "--expect-digest" in r for r in runs)
    assert re.fullmatch(r"\d+", dict(steps)["USER"])  # numeric: no name lookup in the host's passwd
    labels = " ".join(args for kind, args in steps if kind == "LABEL")
    assert 'dev.solomon.manifest-sha256="${MANIFEST_SHA256}"' in labels and 'dev.solomon.run-id="${RUN_ID}"' in labels
    assert json.loads(dict(steps)["ENTRYPOINT"])[:2] == ["solomon", "serve"]
    assert dict(steps)["EXPOSE"] == "8000" and "/readyz" in dict(steps)["HEALTHCHECK"]


def image_layout(repo: Path, app: Path, run_id: str) -> None:
    """Copy what the Dockerfile's COPY lines after ARG RUN_ID copy, from ``repo`` into ``app``."""
    steps = instructions()
    start = steps.index(("ARG", "RUN_ID"))
    for kind, args in steps[start:]:
        if kind != "COPY":
            continue
        *sources, dest = shlex.split(args.replace("${RUN_ID}", run_id))
        target = app / dest.removeprefix("./")
        for source in sources:
            if (repo / source).is_dir():
                shutil.copytree(repo / source, target, dirs_exist_ok=True)
            else:
                target.mkdir(parents=True, exist_ok=True)
                shutil.copy2(repo / source, target / Path(source).name)


def test_what_the_image_runs_works_on_its_layout(built_repo: Path, tmp_path: Path) -> None:
    run_id = latest_run_dir(built_repo).name
    app = tmp_path / "app"
    image_layout(built_repo, app, run_id)
    assert not (app / "data/tokens").exists() and not (app / "dvc.lock").exists()  # only what the image holds
    digest = hashlib.sha256((app / f"reports/training/{run_id}/manifest.json").read_bytes()).hexdigest()
    verify_step = next(args for kind, args in instructions() if kind == "RUN" and args.startswith("solomon verify"))
    command = shlex.split(
        verify_step.replace("${RUN_ID}", run_id).replace("${MANIFEST_SHA256}", digest).replace("/app", str(app))
    )
    env = pipeline_env()
    done = subprocess.run([str(BIN / command[0]), *command[1:]], cwd=app, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    wrong = [str(BIN / command[0]), *command[1:]]
    wrong[wrong.index("--expect-digest") + 1] = "0" * 64
    assert subprocess.run(wrong, cwd=app, env=env, capture_output=True).returncode == 1  # the build would fail

    entrypoint = json.loads(dict(instructions())["ENTRYPOINT"])
    entrypoint = [str(BIN / entrypoint[0]), *[str(app) if a == "/app" else a for a in entrypoint[1:]]]
    port = free_port()
    cmd = [
        a.replace("0.0.0.0", "127.0.0.1").replace("8000", str(port)) for a in json.loads(dict(instructions())["CMD"])
    ]
    env = env | {"SOLOMON_RUN": str(app / f"reports/training/{run_id}"), "SOLOMON_EXPECT_DIGEST": digest}
    server = subprocess.Popen(entrypoint + cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait(port, server)
    status, answer, _ = request(port, "POST", "/v1/completions", {"prompt": "In the beginning", "seed": 0})
    assert status == 200 and answer["system_fingerprint"] == digest
    _, provenance, _ = request(port, "GET", "/v1/provenance")
    assert provenance["workspace_dvc_lock_differs"] == []  # no dvc.lock in an image, declared: not a difference
    server.send_signal(signal.SIGTERM)
    assert server.wait(timeout=60) == 0
    flip_last_byte(app / "models/model.safetensors")
    done = subprocess.run(entrypoint + cmd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "refusing to load" in done.stderr


def pins(name: str) -> dict[str, str]:
    """A lock's pins: each distribution's name to its whole block (version and hashes)."""
    text = (ROOT / name).read_text(encoding="utf-8")
    return {m[1]: m[0] for m in re.finditer(r"^([a-z0-9._-]+)==\S+(?: \\\n(?:    --hash=\S+(?: \\)?\n)+)", text, re.M)}


def test_the_serving_lock_is_requirements_locks_pins_without_the_pipeline_or_test_tools() -> None:
    """The image installs requirements-serve.lock: each of its pins (version and hashes) is requirements.lock's,
    and none of DVC, the full MLflow server, the report's plotting, the export checkers or the test tools."""
    serve, full = pins("requirements-serve.lock"), pins("requirements.lock")
    runtime = {"torch", "tokenizers", "safetensors", "fastapi", "uvicorn", "mlflow-skinny", "prometheus-client"}
    assert runtime <= set(serve)
    assert {name: block for name, block in serve.items() if full.get(name) != block} == {}
    left_out = {"dvc", "mlflow", "matplotlib", "pytest", "transformers", "ruff", "gguf", "model-signing"}
    left_out |= {"schemathesis", "hypothesis"}  # the fuzz's: check-only
    assert not left_out & set(serve)


# What the image runs: `solomon verify` at build time, `solomon serve` as its entry point.
IMAGE_MODULES = ("solomon.cli", "solomon.audit.verify", "solomon.serving.server", "solomon.serving.app")


def test_every_package_the_images_commands_import_is_in_the_serving_lock() -> None:
    """Each third-party module that a module of `solomon verify` / `solomon serve` imports at its top level comes from
    a distribution pinned in requirements-serve.lock: the image installs that lock alone, so a missing one breaks the
    image's build and nothing else."""
    from importlib.metadata import packages_distributions

    listing = "import json, sys\n" + "".join(f"import {m}\n" for m in IMAGE_MODULES)
    listing += "print(json.dumps([m.__file__ for n, m in sys.modules.items() if n.split('.')[0] == 'solomon']))"
    done = subprocess.run([sys.executable, "-c", listing], capture_output=True, text=True, check=True)
    files = json.loads(done.stdout)
    imported: dict[str, set[str]] = {}
    for file in files:
        for node in ast.parse(Path(file).read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                imported.setdefault(name.split(".")[0], set()).add(Path(file).name)

    pinned = {canonicalize_name(name) for name in pins("requirements-serve.lock")}
    providers = packages_distributions()
    own = sys.stdlib_module_names | {"__future__", "solomon"}
    third_party = {m: who for m, who in imported.items() if m not in own}
    assert len(third_party) >= 5  # torch, numpy, fastapi, ... : the walk saw the serving modules
    provided = {m: {canonicalize_name(d) for d in providers.get(m, [])} for m in third_party}
    missing = {m: sorted(who) for m, who in third_party.items() if not provided[m] & pinned}
    assert missing == {}, f"add these to requirements-serve.in and run `make lock`: {missing}"
