"""A self-hosted MLflow server on loopback: start it by PID, wait for /health, stop it by PID.

Used by `make mlflow-server` / `make mlflow-stop` and by the tests. The server binds 127.0.0.1 only, proxies
artifact storage (clients never need the store's credentials), keeps the security middleware on with an
explicit allowed-hosts list, and runs with job execution off (otherwise it spawns workers that outlive it).
Without a backend named, it serves the workspace's own store (``served_store``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from solomon.errors import SolomonError


def health_url(port: int) -> str:
    return f"http://127.0.0.1:{port}/health"


def wait_healthy(port: int, timeout: float = 90.0, process: subprocess.Popen | None = None) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(health_url(port), timeout=2) as response:
                if response.status == 200:
                    return True
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.3)
    return False


SERVER_ARTIFACTS = "mlflow-server-artifacts"  # the artifact root beside a backend store named by the user
# An artifact root is a local directory or a bucket: s3://<bucket>/<prefix>, reached with the AWS credentials in the
# server's environment and MLFLOW_S3_ENDPOINT_URL for an S3-compatible store (clients need neither: proxied).
Artifacts = Path | str


def artifacts_destination(artifacts: Artifacts) -> str:
    return artifacts if isinstance(artifacts, str) and "://" in artifacts else Path(artifacts).resolve().as_uri()


def served_store(
    backend_uri: str | None, artifacts_dir: Artifacts | None, root: Path = Path(".")
) -> tuple[str, Artifacts]:
    """The backend store and artifact root a server serves: those given; without a backend, the workspace's own
    store (``mlflow.db`` and its artifacts, where the stages log and `solomon promote` registers, built first when
    new), so the server shows the workspace's runs, models and aliases; beside another backend, ``SERVER_ARTIFACTS``
    unless ``artifacts_dir`` names one."""
    if backend_uri:
        return backend_uri, artifacts_dir or Path(SERVER_ARTIFACTS)
    from solomon.tracking.store import ensure_sqlite_store, workspace_artifacts, workspace_store  # imports mlflow

    uri = workspace_store(root)
    ensure_sqlite_store(uri)  # whole before anyone writes to it: a kill while MLflow builds a schema breaks it
    return uri, artifacts_dir or workspace_artifacts(root)


def server_command(port: int, backend_uri: str, artifacts_dir: Artifacts, app_name: str | None = None) -> list[str]:
    command = [
        str(Path(sys.executable).parent / "mlflow"), "server",
        "--host", "127.0.0.1",
        "--port", str(port),
        "--backend-store-uri", backend_uri,
        "--serve-artifacts",
        "--artifacts-destination", artifacts_destination(artifacts_dir),
        "--allowed-hosts", f"127.0.0.1:{port},localhost:{port}",
        "--workers", "1",
    ]  # fmt: skip
    if app_name:
        command += ["--app-name", app_name]
    return command


def start(
    port: int,
    backend_uri: str,
    artifacts_dir: Artifacts,
    log_path: Path,
    app_name: str | None = None,
    timeout: float = 90.0,
) -> subprocess.Popen:
    """Start the server in its own process group and return once /health answers. A bucket for artifacts is asked
    for first: a server that starts healthy on a missing bucket or a wrong secret fails only at the first upload."""
    env = dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")
    destination = artifacts_destination(artifacts_dir)
    if destination.startswith("s3://"):
        from solomon.remote import s3_problem

        problem = s3_problem(destination, os.environ.get("MLFLOW_S3_ENDPOINT_URL"), S3_CREDENTIALS_HINT)
        if problem:
            raise SolomonError(f"the artifact store: {problem}")
    else:  # a directory: the path itself, not its file:// URI (which percent-encodes spaces and the like)
        Path(artifacts_dir).mkdir(parents=True, exist_ok=True)
    log = open(log_path, "ab")  # noqa: SIM115 - handed to the server process
    process = subprocess.Popen(
        server_command(port, backend_uri, artifacts_dir, app_name),
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    log.close()
    if not wait_healthy(port, timeout, process):
        from solomon.tracking.store import redact  # imports mlflow: only on failure

        stop_process(process.pid)
        tail = log_path.read_text(errors="replace").strip().splitlines()[-1:] or ["(no output)"]
        # The last line may quote the backend store's URI, password included.
        raise SolomonError(f"mlflow server on 127.0.0.1:{port} did not become healthy: {redact(tail[0])[:300]}")
    return process


S3_CREDENTIALS_HINT = (
    "give the server AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) in its environment, and "
    "MLFLOW_S3_ENDPOINT_URL for an S3-compatible store"
)


def stop_process(pid: int, timeout: float = 30.0) -> None:
    """SIGTERM the server's process group (the server and its workers), then SIGKILL what is left."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # reap it if it is our child, or its zombie keeps the group alive
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def start_to_pid_file(
    port: int, backend_uri: str, artifacts_dir: Artifacts, pid_file: Path, log_path: Path, app_name: str | None = None
) -> int:
    if pid_file.exists():
        raise SolomonError(f"{pid_file} exists: a server may be running; `make mlflow-stop` first")
    process = start(port, backend_uri, artifacts_dir, log_path, app_name)
    pid_file.write_text(f"{process.pid}\n")
    return process.pid


def stop_from_pid_file(pid_file: Path) -> None:
    try:
        pid = int(pid_file.read_text().strip())
    except FileNotFoundError:
        raise SolomonError(f"{pid_file} not found: no server started by `make mlflow-server`") from None
    stop_process(pid)
    pid_file.unlink()
