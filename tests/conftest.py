"""Shared fixtures and helpers: a tiny pipeline built once with real DVC in a temporary git repository, and the
train stage run as its own process on that pipeline's tokens.

Two tiers: `make test-fast` runs the tests not marked `slow`, `make test` runs them all. A test is slow when it runs
a pipeline, a training process, a server, a browser or an external tool; every test on the built pipeline is, and
is marked here rather than in its module.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from lab.families import FAMILIES
from lab.scratch import make_scratch_repo, merge, write_params
from solomon.params import read_yaml
from solomon.pipeline import dvc_executable, pipeline_env, run, stage_command
from solomon.records import PARAMS_FILE, STEP_LOG, TOKENIZER, TOKENS_DIR
from solomon.tiny import TINY_OVERRIDES
from solomon.train import hooks

ROOT = Path(__file__).resolve().parents[1]
DVC = dvc_executable()
LAB = [sys.executable, "-m", "lab"]  # the development tooling's command (lab/cli.py), run anywhere under lab_env()


# One thread per process: torch with two threads beside another busy process slows down badly.
os.environ.setdefault("OMP_NUM_THREADS", "1")


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tree_digest(root: Path) -> dict[str, str]:
    """SHA256 of every file below ``root``, by relative path: equal digests mean an untouched tree."""
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def latest_run_dir(repo: Path) -> Path:
    """The run directory reports/latest.json names."""
    return repo / json.loads((repo / "reports/latest.json").read_text())["path"]


def flip_last_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))


def one_line_refusal(call, *args) -> str:
    """The one-line SolomonError message ``call(*args)`` raises."""
    from solomon.errors import SolomonError

    with pytest.raises(SolomonError) as caught:
        call(*args)
    message = str(caught.value)
    assert "\n" not in message, message
    return message


def rehash_export(export_dir: Path) -> None:
    """What a careful forger does after editing an export's file: provenance.json's hashes made to match again."""
    from solomon.atomic import write_json
    from solomon.export import record

    provenance = json.loads((export_dir / record.PROVENANCE).read_text())
    write_json(export_dir / record.PROVENANCE, provenance | {"files": record.exported_files(export_dir)})


def dvc(repo: Path, *args: str, check: bool = True):
    return run([DVC, *args], repo, check=check)


# The train stage as its own process, on the built pipeline's tokens, in a directory of its own.


def workdir(built_repo: Path, path: Path, overrides: dict | None = None) -> Path:
    """params.yaml for a training run in ``path``; tracking off unless ``overrides`` turn it on (test_tracking)."""
    path.mkdir(parents=True, exist_ok=True)
    params = merge(read_yaml(built_repo / PARAMS_FILE), {"tracking": {"enabled": False}})
    params = merge(params, overrides or {})
    (path / "params.yaml").write_text(yaml.safe_dump(params))
    if path.resolve() != built_repo.resolve():  # the task files eval.tasks names
        shutil.copytree(built_repo / "tasks", path / "tasks", dirs_exist_ok=True)
    return path


def train_args(built_repo: Path, cwd: Path, tokens_dir: Path | None = None) -> list[str]:
    """The train stage's own command (dvc.yaml's, through solomon.pipeline) to run in ``cwd``: its inputs are the
    built pipeline's (``cwd/data`` links to them, ``tokens_dir`` in place of its tokens); its outputs land in
    ``cwd`` where the stage writes them (models/, checkpoints/, reports/…). A ``cwd`` with data of its own (a
    repository copy) keeps it."""
    data = cwd / "data"
    if not (data / "tokens").exists() or (data / "tokens").is_symlink():
        data.mkdir(parents=True, exist_ok=True)
        inputs = {"tokens": tokens_dir or built_repo / TOKENS_DIR, "tokenizer.json": built_repo / TOKENIZER}
        for name, target in inputs.items():
            (data / name).unlink(missing_ok=True)
            (data / name).symlink_to(target)
    return stage_command(ROOT, "train")


def run_train(
    built_repo: Path,
    cwd: Path,
    crash_at: str | None = None,
    tokens_dir: Path | None = None,
    extra: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    """``crash_at``: ``<point>:<step>``, a crash point of ``solomon.train.hooks`` where the process kills itself."""
    env = dict(env or pipeline_env())
    env.pop(hooks.CRASH_AT, None)
    if crash_at:
        point, step = crash_at.rsplit(":", 1)
        env |= hooks.crash_environment(point, int(step))
    return subprocess.run(
        [*train_args(built_repo, cwd, tokens_dir), *extra], cwd=cwd, env=env, capture_output=True, text=True
    )


def start_train(built_repo: Path, cwd: Path, stderr: int = subprocess.PIPE) -> subprocess.Popen:
    """The train stage started in ``cwd`` (see ``train_args``); ``stderr=subprocess.STDOUT`` merges its output."""
    command = train_args(built_repo, cwd)
    return subprocess.Popen(command, cwd=cwd, env=pipeline_env(), stdout=subprocess.PIPE, stderr=stderr, text=True)


def logged_steps(directory: Path) -> int:
    path = directory / STEP_LOG
    return max(0, len(path.read_text().splitlines()) - 1) if path.exists() else 0


def wait_for_steps(process: subprocess.Popen, cwd: Path, steps: int, timeout: float = 120) -> None:
    wait_until(lambda: logged_steps(cwd) >= steps, f"step {steps} in {cwd / STEP_LOG}", process=process,
               timeout=timeout, interval=0.01)  # fmt: skip


def wait_until(
    condition: Callable[[], object],
    what: str,
    *,
    process: subprocess.Popen | None = None,
    timeout: float = 120,
    interval: float = 0.1,
) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` after ``timeout`` seconds, or as soon as ``process``
    (the one expected to bring it about) has exited, with the end of its output."""
    deadline = time.monotonic() + timeout
    while not condition():
        if process is not None and process.poll() is not None:
            output = "".join(part for part in process.communicate() if part)
            raise AssertionError(f"waiting for {what}: the process exited with {process.returncode}\n{output[-3000:]}")
        assert time.monotonic() < deadline, f"waiting for {what}: not within {timeout:g} s"
        time.sleep(interval)


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects: the marker must be there when it looks
def pytest_configure(config: pytest.Config) -> None:
    """The tests signal their children and expect the default dispositions, whatever started pytest: a shell's
    background job (`cmd &`) has SIGINT ignored and `nohup` SIGHUP, an ignored signal stays ignored across exec, and
    a Python started with SIGINT ignored never raises KeyboardInterrupt. Runs in each xdist worker too."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark `slow` every test on the built pipeline, whether it asks for it directly or through another fixture
    (repo_copy, tiny_run, a module's own): the first pays for the build, each one for a copy or a run on it."""
    for item in items:
        if "built_repo" in item.fixturenames:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def built_repo(tmp_path_factory) -> Path:
    """The tiny pipeline after one full `dvc repro`; copy it (see `repo_copy`) before changing it."""
    repo = make_scratch_repo(ROOT, tmp_path_factory.mktemp("built") / "repo", TINY_OVERRIDES)
    done = dvc(repo, "repro", check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return repo


# The layouts of the llama family (lab.families): the Llama and Qwen3 exports are tested on each.
LLAMA_FAMILIES = {name: model for name, model in FAMILIES.items() if model["family"] == "llama"}


@pytest.fixture(scope="session")
def retrained(built_repo: Path, tmp_path_factory) -> Callable[[dict], Path]:
    """A copy of the built pipeline retrained (through the report stage) with params ``overrides`` (tracking off),
    made once per session for each overrides."""
    made: dict[str, Path] = {}

    def make(overrides: dict) -> Path:
        key = json.dumps(overrides, sort_keys=True)
        if key not in made:
            repo = tmp_path_factory.mktemp("retrained") / "repo"
            shutil.copytree(built_repo, repo, symlinks=True, ignore=shutil.ignore_patterns("mlflow.db", "mlartifacts"))
            write_params(repo, merge(overrides, {"tracking": {"enabled": False}}))
            done = dvc(repo, "repro", "report", check=False)
            assert done.returncode == 0, done.stdout + done.stderr
            made[key] = repo
        return made[key]

    return make


@pytest.fixture(scope="session")
def family_repo(built_repo: Path, retrained) -> Callable[[str], Path]:
    """The tiny pipeline trained as the block family ``name`` of ``FAMILIES``: the built pipeline itself when
    params.yaml's default is that family, else a retrained copy. Tests of one family's layout ask for it by name,
    so that they hold whichever family is the default."""
    default = read_yaml(built_repo / PARAMS_FILE)["model"]

    def get(name: str) -> Path:
        model = FAMILIES[name]
        if all(default.get(key) == value for key, value in model.items()):
            return built_repo
        return retrained({"model": model})

    return get


@pytest.fixture
def repo_copy(built_repo: Path, tmp_path: Path) -> Path:
    """A private copy of the built pipeline (git history, DVC cache and outputs included), without its MLflow
    store: the embedded store records absolute artifact paths, so a copy of it would write into the built repo."""
    copy = tmp_path / "repo"
    shutil.copytree(built_repo, copy, symlinks=True, ignore=shutil.ignore_patterns("mlflow.db", "mlartifacts"))
    return copy


@pytest.fixture
def tiny_run(built_repo: Path, tmp_path: Path):
    """Build (params, TrainPaths) for an in-process training run on the tiny pipeline's tokens."""

    from lab.scratch import merge
    from solomon.params import Params
    from solomon.train.loop import TrainPaths

    def make(overrides: dict | None = None, out: Path | None = None):
        base = read_yaml(built_repo / PARAMS_FILE)
        params = Params.model_validate(merge(base, overrides or {}))
        out = out or tmp_path
        paths = TrainPaths(
            tokens_dir=built_repo / "data/tokens",
            tokenizer=built_repo / "data/tokenizer.json",
            model_dir=out / "models",
            checkpoints=out / "checkpoints",
            steps_log=out / "train_log.tsv",
            evals_log=out / "train_evals.jsonl",
            metrics=out / "train_metrics.json",
        )
        return params, paths

    return make


@pytest.fixture(scope="session")
def mlflow_export(built_repo: Path, tmp_path_factory) -> Path:
    """`solomon export --format mlflow` of the built pipeline's run, written once; copy it before changing it."""
    from solomon.export.mlflow_model import export_mlflow

    return export_mlflow(latest_run_dir(built_repo), built_repo, tmp_path_factory.mktemp("mlflow") / "export")
