"""MLflow tracking against a real `mlflow server` on a free loopback port, and against embedded SQLite."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import DVC, digest, latest_run_dir, wait_until
from mlflow.tracking import MlflowClient

from solomon.pipeline import pipeline_env
from solomon.records import RunFiles, read_system
from solomon.tracking import mlflow_server
from solomon.tracking.store import RUN_ID_TAG, STEP_METRICS, model_artifact_path
from solomon.tracking.sync import sync_run


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

    def kill(self) -> None:
        """SIGKILL the server and its workers: no goodbye to clients."""
        os.killpg(self.process.pid, signal.SIGKILL)
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
def idle_server(tmp_path: Path):
    """A server of this test's own, not yet started."""
    own = Server(tmp_path / "mlflow")
    yield own
    own.stop()


def the_run(client: MlflowClient, run_id: str):
    experiment = client.get_experiment_by_name("solomon")
    runs = client.search_runs([experiment.experiment_id], filter_string=f"tags.`{RUN_ID_TAG}` = '{run_id}'")
    assert len(runs) == 1
    return runs[0]


def steps_of(client: MlflowClient, mlflow_run: str, key: str) -> list[int]:
    """Every logged step of ``key``, sorted: a duplicate shows up as a repeated step."""
    return sorted(m.step for m in client.get_metric_history(mlflow_run, key))


def check_everything_readable(client: MlflowClient, run_dir: Path, tmp_path: Path, model: bool = True) -> None:
    run_info = json.loads((run_dir / "run.json").read_text())
    run = the_run(client, run_info["run_id"])
    mlflow_run = run.info.run_id
    hyper = yaml.safe_load((run_dir / "hyperparameters.yaml").read_text())
    assert run.data.params["lr.warmup"] == str(hyper["lr"]["warmup"])
    assert run.data.params["train.samples.prompts"] == json.dumps(hyper["train"]["samples"]["prompts"])
    local_steps = (run_dir / "train_log.tsv").read_text().splitlines()[1:]
    for key in STEP_METRICS.values():
        assert steps_of(client, mlflow_run, key) == list(range(1, 31)), key
    logged_loss = {m.step: m.value for m in client.get_metric_history(mlflow_run, "train/loss")}
    assert [f"{logged_loss[i + 1]:.9g}" for i in range(30)] == [line.split("\t")[2] for line in local_steps]
    assert steps_of(client, mlflow_run, "eval/val_loss") == [10, 20, 30]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert run.data.metrics["val/bits_per_byte"] == metrics["val"]["bits_per_byte"]
    assert run.data.metrics["test/ece"] == metrics["test"]["ece"] and "val/mce" in run.data.metrics
    assert run.data.tags["git.commit"] and "dvc.lock.sha256" in run.data.tags
    assert run.data.tags["solomon.run_id"] == run_dir.name and run.info.status == "FINISHED"
    samples = [a.path for a in client.list_artifacts(mlflow_run, "samples")]
    assert samples == [f"samples/step_{s:07d}.md" for s in (10, 20, 30)]
    local = client.download_artifacts(mlflow_run, "samples/step_0000010.md", str(tmp_path))
    assert "In the beginning" in Path(local).read_text()
    html = client.download_artifacts(mlflow_run, "report/index.html", str(tmp_path))
    assert Path(html).read_bytes() == (run_dir / "index.html").read_bytes()
    if model:
        path = f"{model_artifact_path(run_info['sha256']['model'])}/model.safetensors"
        assert digest(Path(client.download_artifacts(mlflow_run, path, str(tmp_path)))) == run_info["sha256"]["model"]


def test_embedded_sqlite_default_holds_the_pipeline_run(built_repo: Path, tmp_path: Path) -> None:
    """`dvc repro` with no MLFLOW_TRACKING_URI: training logged live, then the report, to mlflow.db."""
    assert (built_repo / "mlflow.db").is_file() and (built_repo / "mlartifacts").is_dir()
    assert not (built_repo / "mlruns").exists()
    client = MlflowClient(f"sqlite:///{built_repo / 'mlflow.db'}")
    run_dir = latest_run_dir(built_repo)
    check_everything_readable(client, run_dir, tmp_path)
    runs = client.search_runs([client.get_experiment_by_name("solomon").experiment_id])
    assert len(runs) == 1
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["predicate"]["mlflow"]["run_id"] == runs[0].info.run_id


def test_sync_rebuilds_a_whole_run_in_an_empty_server(
    built_repo: Path, server: Server, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", server.uri)
    run_dir = latest_run_dir(built_repo)
    first = sync_run(run_dir, built_repo, model_dir=built_repo / "models")
    assert sync_run(run_dir, built_repo, model_dir=built_repo / "models") == first  # the same run, nothing doubled
    assert the_run(MlflowClient(server.uri), run_dir.name).info.run_id == first
    check_everything_readable(MlflowClient(server.uri), run_dir, tmp_path)
    # the system log too, each sample at its step with the time it was taken, once
    system = read_system(run_dir / RunFiles.SYSTEM_LOG)
    history = MlflowClient(server.uri).get_metric_history(first, "system/process_rss_megabytes")
    assert [(m.step, m.value) for m in sorted(history, key=lambda m: m.step)] == [
        (row["step"], row["process_rss_megabytes"]) for row in system
    ]


def logged_steps(uri: str, run_id: str) -> list[int]:
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("solomon")
    runs = (
        []
        if experiment is None
        else client.search_runs([experiment.experiment_id], filter_string=f"tags.`{RUN_ID_TAG}` = '{run_id}'")
    )
    return steps_of(client, runs[0].info.run_id, "train/loss") if runs else []


def start_retraining(repo: Path, env: dict[str, str]) -> subprocess.Popen:
    """`dvc repro` of the train stage alone, from step 0, in its own process group."""
    shutil.rmtree(repo / "checkpoints")
    return subprocess.Popen(
        [DVC, "repro", "--force", "--single-item", "train"],
        cwd=repo,
        env=pipeline_env() | env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def run_id_of(repo: Path) -> str:
    return json.loads((repo / "checkpoints/index.json").read_text())["run_id"]


@pytest.mark.long
def test_live_training_rides_out_a_server_that_is_down_comes_back_and_dies(
    repo_copy: Path, idle_server: Server, tmp_path: Path
) -> None:
    """Down at start, up mid-run (training catches up live), killed again before the end: the run finishes;
    after a restart, `solomon track sync` completes the history with every step exactly once."""
    server, release = idle_server, tmp_path / "go"
    env = {"MLFLOW_TRACKING_URI": server.uri, "SOLOMON_PAUSE_AT": f"15:{release}", "SOLOMON_TRACKING_RETRY_S": "1"}
    training = start_retraining(repo_copy, env)
    wait_until(Path(f"{release}.paused").exists, "training paused at step 15", process=training)
    server.start()
    run_id = run_id_of(repo_copy)
    wait_until(lambda: logged_steps(server.uri, run_id) == list(range(1, 16)), "steps 1-15 caught up live")
    server.kill()  # SIGKILL, mid-run
    release.touch()
    output = training.communicate(timeout=300)[0]
    assert training.returncode == 0, output
    assert output.count("warning: tracking: cannot reach") == 2, output  # once per outage, not once per step
    assert "reachable again; catching up" in output
    assert "did not reach" in output
    done = subprocess.run([DVC, "repro"], cwd=repo_copy, env=pipeline_env() | env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "replay with `solomon track sync" in done.stderr

    server.start()  # same port, same backend store
    run_dir = latest_run_dir(repo_copy)
    sync = [str(Path(sys.executable).parent / "solomon"), "track", "sync", run_dir.name]
    for _ in range(2):  # a second sync adds nothing
        done = subprocess.run(sync, cwd=repo_copy, env=pipeline_env() | env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    check_everything_readable(MlflowClient(server.uri), run_dir, tmp_path)


def test_killed_and_resumed_training_is_one_mlflow_run(repo_copy: Path, server: Server, tmp_path: Path) -> None:
    """SIGKILL after steps past the last checkpoint reached the server: the resume recomputes them and logs
    each only once, into the same MLflow run."""
    release = tmp_path / "go"
    env = {"MLFLOW_TRACKING_URI": server.uri, "SOLOMON_PAUSE_AT": f"25:{release}"}
    training = start_retraining(repo_copy, env)
    wait_until(Path(f"{release}.paused").exists, "training paused at step 25", process=training)
    run_id = run_id_of(repo_copy)
    wait_until(lambda: logged_steps(server.uri, run_id) == list(range(1, 26)), "steps 1-25 logged live")
    os.killpg(training.pid, signal.SIGKILL)  # checkpoint at 20: steps 21-25 are recomputed on resume
    training.communicate(timeout=60)
    env.pop("SOLOMON_PAUSE_AT")
    done = subprocess.run([DVC, "repro"], cwd=repo_copy, env=pipeline_env() | env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "resuming from" in done.stderr and "(step 20)" in done.stderr
    assert run_id_of(repo_copy) == run_id
    client = MlflowClient(server.uri)
    check_everything_readable(client, latest_run_dir(repo_copy), tmp_path)
    # the system metrics go on in the same MLflow run, at the resumed run's steps
    mlflow_run = the_run(client, run_id).info.run_id
    for name in ("system/cpu_utilization_percentage", "system/disk_usage_percentage", "system/process_rss_megabytes"):
        steps = {m.step for m in client.get_metric_history(mlflow_run, name)}
        assert min(steps) <= 25 and max(steps) > 25, (name, sorted(steps))
    # and in the run directory: the samples up to the checkpoint resumed from, then the resumed run's, once a step
    system = [row["step"] for row in read_system(latest_run_dir(repo_copy) / RunFiles.SYSTEM_LOG)]
    assert system == sorted(set(system)) and 20 in system and max(system) > 25, system


def test_report_stage_survives_an_unreachable_server(repo_copy: Path) -> None:
    from conftest import dvc

    from lab.scratch import write_params

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


@pytest.mark.long
def test_temp_and_queued_experiments_log_to_the_workspace_store(repo_copy: Path, monkeypatch) -> None:
    """`dvc exp run --temp` and `--queue` run in a copy under .dvc/tmp/exps/; their runs land in the
    workspace's mlflow.db, each its own MLflow run named <exp-name>-<training run id>."""
    from conftest import dvc

    from solomon.pipeline import run
    from solomon.tracking.store import workspace_root

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert workspace_root(repo_copy / ".dvc/tmp/exps/tmpabc123") == repo_copy.resolve()
    run(["git", "add", "-A"], repo_copy)
    run(["git", "commit", "-q", "-m", "baseline run"], repo_copy)
    dvc(repo_copy, "exp", "run", "--temp", "-S", "lr.warmup=10")
    dvc(repo_copy, "exp", "run", "--queue", "-S", "lr.warmup=15")
    done = dvc(repo_copy, "exp", "run", "--run-all", check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not list((repo_copy / ".dvc/tmp").rglob("mlflow.db"))

    client = MlflowClient(f"sqlite:///{repo_copy / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("solomon").experiment_id])
    experiments = {r.data.params["lr.warmup"]: r for r in runs if "dvc.exp_name" in r.data.tags}
    assert sorted(experiments) == ["10", "15"], [r.data.tags for r in runs]
    head = run(["git", "rev-parse", "HEAD"], repo_copy).stdout.strip()
    shown = dvc(repo_copy, "exp", "show", "--json").stdout
    for experiment in experiments.values():
        tags = experiment.data.tags
        assert tags["dvc.exp_baseline_rev"] == head and tags["dvc.exp_name"] in shown
        assert experiment.info.run_name == f"{tags['dvc.exp_name']}-{tags[RUN_ID_TAG]}"
        assert steps_of(client, experiment.info.run_id, "train/loss") == list(range(1, 31))
        assert experiment.info.status == "FINISHED" and "val/bits_per_byte" in experiment.data.metrics


def test_registry_versions_tags_and_a_moving_alias(built_repo: Path, server: Server, monkeypatch) -> None:
    from solomon.errors import SolomonError
    from solomon.tracking.registry import alias_version, logged_run, register_version, set_alias

    monkeypatch.setenv("MLFLOW_TRACKING_URI", server.uri)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "registry-test")  # the shared server knows this run elsewhere
    run_dir = latest_run_dir(built_repo)
    with pytest.raises(SolomonError, match="is not in"):
        logged_run(run_dir.name)
    mlflow_run = sync_run(run_dir, built_repo)  # no model directory given: nothing to register yet
    assert logged_run(run_dir.name) == mlflow_run
    with pytest.raises(SolomonError, match="has no model artifact"):
        register_version(mlflow_run, "solomon", {})
    assert sync_run(run_dir, built_repo, model_dir=built_repo / "models") == mlflow_run
    first = register_version(mlflow_run, "solomon", {"gate": "passed"})
    set_alias("solomon", "production", first)
    second = register_version(mlflow_run, "solomon", {})
    assert (first, second) == ("1", "2")
    assert alias_version("solomon", "production") == "1"
    set_alias("solomon", "production", second)
    assert alias_version("solomon", "production") == "2"
    version = MlflowClient(server.uri).get_model_version("solomon", first)
    model_sha = json.loads((run_dir / "run.json").read_text())["sha256"]["model"]
    assert version.tags == {"solomon.run_id": run_dir.name, "model.sha256": model_sha, "gate": "passed"}
    assert version.source.endswith(f"/{model_artifact_path(model_sha)}")
    runs = MlflowClient(server.uri).search_runs(
        [MlflowClient(server.uri).get_experiment_by_name("registry-test").experiment_id]
    )
    assert [version.run_id] == [r.info.run_id for r in runs] == [mlflow_run]


def schema_tables(directory: Path) -> int:
    """The most tables any SQLite file in ``directory`` holds so far (0 while none, or while its writer locks it)."""
    most = 0
    for path in directory.iterdir():
        try:
            with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=0.1)) as db:
                most = max(most, db.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table'").fetchone()[0])
        except sqlite3.DatabaseError:
            pass
    return most


def test_a_kill_while_the_sqlite_store_is_created_never_leaves_a_broken_store(tmp_path: Path) -> None:
    """MLflow builds its schema in ~2 s of steps; a run killed then must not leave a database MLflow rejects."""
    from solomon.tracking.store import ensure_sqlite_store

    db = tmp_path / "mlflow.db"
    uri = f"sqlite:///{db}"
    script = f"from solomon.tracking.store import ensure_sqlite_store as e; print('ready', flush=True); e({uri!r})"
    creator = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert creator.stdout.readline().strip() == "ready"
    wait_until(lambda: schema_tables(tmp_path) > 0, "the schema's first tables", process=creator, timeout=60)
    creator.send_signal(signal.SIGSTOP)  # frozen part-way through the schema: the state the kill leaves
    still_building = creator.poll() is None
    creator.kill()
    creator.wait(timeout=30)
    assert still_building, "the store was finished before the kill: the kill tested nothing"
    assert not db.exists(), "a half-built store in place of mlflow.db: MLflow can never open it"
    ensure_sqlite_store(uri)
    assert MlflowClient(uri).get_experiment_by_name("Default") is not None


def test_a_server_without_a_backend_is_given_the_workspace_store(tmp_path: Path, monkeypatch) -> None:
    """`solomon track server`'s command line, as its defaults build it: the store and artifact root the stages
    and `solomon promote` write when MLFLOW_TRACKING_URI is unset (one owner: solomon.tracking.store)."""
    from solomon.cli import build_parser
    from solomon.tracking.store import tracking_uri, workspace_artifacts

    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_BACKEND_STORE_URI"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    args = build_parser().parse_args(["track", "server"])
    command = mlflow_server.server_command(args.port, *mlflow_server.served_store(args.backend, args.artifacts))
    assert command[command.index("--backend-store-uri") + 1] == tracking_uri(tmp_path)
    assert command[command.index("--artifacts-destination") + 1] == workspace_artifacts(tmp_path).as_uri()
    named = build_parser().parse_args(["track", "server", "--backend", "postgresql://db/mlflow"])
    assert mlflow_server.served_store(named.backend, named.artifacts) == (
        "postgresql://db/mlflow",
        Path(mlflow_server.SERVER_ARTIFACTS),
    )


@pytest.mark.slow
def test_track_server_serves_the_runs_the_workspace_logged(tmp_path: Path, monkeypatch) -> None:
    """A run logged to the embedded store (as the stages and `solomon promote` log, MLFLOW_TRACKING_URI unset) is
    there through `solomon track server` started without --backend in that workspace: one store, not a second."""
    from solomon.tracking.store import find_run, open_run

    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_BACKEND_STORE_URI", "MLFLOW_EXPERIMENT_NAME"):
        monkeypatch.delenv(name, raising=False)
    _, logged = open_run("20260101T000000Z-aaaa", {}, {"train.seed": "1"}, root=tmp_path)
    solomon, port = str(Path(sys.executable).parent / "solomon"), free_port()
    done = subprocess.run(
        [solomon, "track", "server", "--port", str(port)], cwd=tmp_path, env=pipeline_env(), capture_output=True,
        text=True, timeout=180,
    )  # fmt: skip
    try:
        assert done.returncode == 0, done.stdout + done.stderr
        monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{port}")
        assert find_run("20260101T000000Z-aaaa", tmp_path) == logged
    finally:
        stopped = subprocess.run([solomon, "track", "stop"], cwd=tmp_path, capture_output=True, text=True)
    assert stopped.returncode == 0, stopped.stderr


def test_importing_the_store_changes_no_environment_and_opening_it_sets_fail_fast_defaults(tmp_path: Path) -> None:
    """MLflow's HTTP defaults are set by the store's openers, never by an import (a user's own values win)."""
    script = (
        "import os, mlflow.tracking; before = dict(os.environ)\n"  # mlflow sets a telemetry session id itself
        "from solomon.tracking import live, registry, store, sync\n"
        "assert dict(os.environ) == before, set(os.environ.items()) ^ set(before.items())\n"
        "store.connect()\n"
        "print(os.environ['MLFLOW_HTTP_REQUEST_MAX_RETRIES'], os.environ['MLFLOW_HTTP_REQUEST_TIMEOUT'])\n"
    )
    env = {k: v for k, v in pipeline_env().items() if not k.startswith("MLFLOW_")}
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "10"]
    mine = env | {"MLFLOW_HTTP_REQUEST_TIMEOUT": "3"}
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=mine, capture_output=True, text=True)
    assert done.stdout.split() == ["1", "3"], done.stderr
