"""MLflow tracking against a real `mlflow server` on a free loopback port, and against embedded SQLite."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from solomon import mlflow_server
from solomon.scratch import pipeline_env
from solomon.tracking import RUN_ID_TAG, sync_or_warn, sync_run


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self.process = mlflow_server.start(
            self.port, f"sqlite:///{self.root / 'server.db'}", self.root / "artifacts", self.root / "server.log"
        )

    def stop(self) -> None:
        if self.process is not None:
            mlflow_server.stop_process(self.process.pid)
            self.process.wait(timeout=30)
            self.process = None


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One server for the tests that only read and write; the outage test runs its own."""
    running = Server(tmp_path_factory.mktemp("mlflow"))
    running.start()
    yield running
    running.stop()


@pytest.fixture
def own_server(tmp_path: Path):
    running = Server(tmp_path / "mlflow")
    running.start()
    yield running
    running.stop()


def run_dir_of(repo: Path) -> Path:
    return repo / json.loads((repo / "reports/latest.json").read_text())["path"]


def the_run(client: MlflowClient, run_id: str):
    experiment = client.get_experiment_by_name("solomon")
    runs = client.search_runs([experiment.experiment_id], filter_string=f"tags.`{RUN_ID_TAG}` = '{run_id}'")
    assert len(runs) == 1
    return runs[0]


def check_everything_readable(client: MlflowClient, run_dir: Path, tmp_path: Path) -> None:
    run = the_run(client, run_dir.name)
    hyper = json.loads((run_dir / "hyperparameters.json").read_text())
    assert run.data.params["lr.warmup"] == str(hyper["lr"]["warmup"])
    assert run.data.params["train.samples.prompts"] == json.dumps(hyper["train"]["samples"]["prompts"])
    steps = [m.step for m in client.get_metric_history(run.info.run_id, "train/loss")]
    assert sorted(steps) == list(range(1, 31))
    assert [m.step for m in client.get_metric_history(run.info.run_id, "eval/val_loss")] == [10, 20, 30]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert run.data.metrics["val/bits_per_byte"] == metrics["val"]["bits_per_byte"]
    assert run.data.tags["git.commit"] and "dvc.lock.sha256" in run.data.tags
    local = client.download_artifacts(run.info.run_id, "samples.md", str(tmp_path))
    assert "In the beginning" in Path(local).read_text()
    html = client.download_artifacts(run.info.run_id, "report/report.html", str(tmp_path))
    assert Path(html).read_bytes() == (run_dir / "report.html").read_bytes()


def test_run_logged_to_a_server_reads_back_whole(built_repo: Path, server: Server, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", server.uri)
    run_dir = run_dir_of(built_repo)
    first = sync_run(run_dir, built_repo)
    assert sync_run(run_dir, built_repo) == first  # idempotent: the same MLflow run, nothing duplicated
    check_everything_readable(MlflowClient(server.uri), run_dir, tmp_path)


def test_embedded_sqlite_default(repo_copy: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    (repo_copy / "mlflow.db").unlink(missing_ok=True)
    shutil.rmtree(repo_copy / "mlartifacts", ignore_errors=True)
    run_dir = run_dir_of(repo_copy)
    sync_run(run_dir, repo_copy)
    assert (repo_copy / "mlflow.db").is_file() and (repo_copy / "mlartifacts").is_dir()
    assert not (repo_copy / "mlruns").exists()
    check_everything_readable(MlflowClient(f"sqlite:///{repo_copy / 'mlflow.db'}"), run_dir, tmp_path)


def test_server_down_mid_run_then_sync_completes_without_duplicates(
    built_repo: Path, own_server: Server, tmp_path: Path, monkeypatch
) -> None:
    server = own_server
    monkeypatch.setenv("MLFLOW_TRACKING_URI", server.uri)
    full = run_dir_of(built_repo)
    partial = tmp_path / "partial" / full.name  # what had been logged when the server died: 15 of 30 steps
    shutil.copytree(full, partial)
    lines = (full / "train_log.tsv").read_text().splitlines(keepends=True)
    (partial / "train_log.tsv").write_text("".join(lines[:16]))
    sync_run(partial, built_repo)

    server.stop()
    assert sync_or_warn(full, built_repo) is None  # the pipeline goes on; nothing raised
    server.start()  # same port, same backend store
    done = subprocess.run(
        [str(Path(sys.executable).parent / "solomon"), "track", "sync", full.name, "--root", str(full.parent)],
        cwd=built_repo,
        env=pipeline_env() | {"MLFLOW_TRACKING_URI": server.uri},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    client = MlflowClient(server.uri)
    run = the_run(client, full.name)
    for key in ("train/loss", "train/lr", "train/grad_norm"):
        steps = [m.step for m in client.get_metric_history(run.info.run_id, key)]
        assert sorted(steps) == list(range(1, 31)), key


def test_report_stage_survives_an_unreachable_server(repo_copy: Path) -> None:
    from conftest import dvc

    from solomon.scratch import write_params

    write_params(repo_copy, {"eval": {"max_tokens": 2048}})  # reruns evaluate and report
    port = free_port()  # nothing listens there
    done = subprocess.run(
        [str(Path(sys.executable).parent / "dvc"), "repro"],
        cwd=repo_copy,
        env=pipeline_env() | {"MLFLOW_TRACKING_URI": f"http://127.0.0.1:{port}"},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "warning: tracking: could not log run" in done.stderr
    assert "replay with `solomon track sync" in done.stderr
    assert dvc(repo_copy, "status").stdout.strip().endswith("up to date.")


def test_temp_and_queued_experiments_use_the_workspace_store(tmp_path: Path, monkeypatch) -> None:
    from solomon.tracking import tracking_uri, workspace_root

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    copy = tmp_path / "repo/.dvc/tmp/exps/tmpabc123"
    copy.mkdir(parents=True)
    assert workspace_root(copy) == (tmp_path / "repo").resolve()
    assert tracking_uri(copy) == f"sqlite:///{(tmp_path / 'repo').resolve() / 'mlflow.db'}"
    assert workspace_root(tmp_path / "repo") == (tmp_path / "repo").resolve()


def test_registry_versions_tags_and_a_moving_alias(built_repo: Path, server: Server, monkeypatch) -> None:
    from solomon.errors import SolomonError
    from solomon.tracking import alias_version, register_version, set_alias

    monkeypatch.setenv("MLFLOW_TRACKING_URI", server.uri)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "registry-test")  # the shared server knows this run elsewhere
    run_dir = run_dir_of(built_repo)
    with pytest.raises(SolomonError, match="is not in"):
        register_version(run_dir.name, "solomon", {})
    sync_run(run_dir, built_repo)  # no model directory given: nothing to register yet
    with pytest.raises(SolomonError, match="has no model artifact"):
        register_version(run_dir.name, "solomon", {})
    sync_run(run_dir, built_repo, model_dir=built_repo / "models")
    first = register_version(run_dir.name, "solomon", {"gate": "passed"})
    set_alias("solomon", "production", first)
    second = register_version(run_dir.name, "solomon", {})
    assert (first, second) == ("1", "2")
    assert alias_version("solomon", "production") == "1"
    set_alias("solomon", "production", second)
    assert alias_version("solomon", "production") == "2"
    version = MlflowClient(server.uri).get_model_version("solomon", first)
    assert version.tags == {"solomon.run_id": run_dir.name, "gate": "passed"}
    runs = MlflowClient(server.uri).search_runs(
        [MlflowClient(server.uri).get_experiment_by_name("registry-test").experiment_id]
    )
    assert [version.run_id] == [r.info.run_id for r in runs]
