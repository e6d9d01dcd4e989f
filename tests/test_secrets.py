"""No credential of the tracking URI in any output or file: the redactor, and a real pipeline run whose
MLFLOW_TRACKING_URI carries a user, a password and a token (its server is down, so tracking warns, quoting it)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import DVC, latest_run_dir

from solomon.errors import SolomonError
from solomon.pipeline import pipeline_env
from solomon.tracking.store import error_line, public_uri, redact, redacted_errors, warn

SOLOMON = str(Path(sys.executable).parent / "solomon")
USER, PASSWORD, TOKEN = "u5er-al1ce", "s3cr3t-pw", "t0k3n-9f8e7d"
SECRETS = (USER, PASSWORD, TOKEN)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again on return: nothing listens there


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("https://alice:pw@mlflow.example:8443/base", "https://mlflow.example:8443/base"),
        ("http://alice@127.0.0.1:5000", "http://127.0.0.1:5000"),
        ("https://a:p@ss@host/x", "https://host/x"),  # an unencoded @ in the password: up to the last one
        ("postgresql+psycopg2://u:pw@db/mlflow?sslmode=require", "postgresql+psycopg2://db/mlflow?sslmode=require"),
        ("sqlite:////srv/solomon/mlflow.db", "sqlite:////srv/solomon/mlflow.db"),
        ("http://h/?token=abc&run=7", "http://h/?token=***&run=7"),
        (
            "http://h/p?access_token=a&apiKey=b&api_key=c&Password=d&client_secret=e&page=2",
            "http://h/p?access_token=***&apiKey=***&api_key=***&Password=***&client_secret=***&page=2",
        ),
        (
            "https://b.s3.amazonaws.com/k?X-Amz-Credential=A%2F1&X-Amz-Signature=ff&X-Amz-Security-Token=t",
            "https://b.s3.amazonaws.com/k?X-Amz-Credential=***&X-Amz-Signature=***&X-Amz-Security-Token=***",
        ),
        ("https://a.blob.core.windows.net/c?sv=2024&sig=abc%3D", "https://a.blob.core.windows.net/c?sv=2024&sig=***"),
        ("https://h/cb#access_token=abc&state=1", "https://h/cb#access_token=***&state=1"),
        (  # how requests quotes a URL: the path alone
            "Max retries exceeded with url: /?token=abc/api/2.0/x&experiment_name=solomon (Caused by",
            "Max retries exceeded with url: /?token=***&experiment_name=solomon (Caused by",
        ),
        ("see http://h:5000 and ops@example.com", "see http://h:5000 and ops@example.com"),
    ],
)
def test_redact_drops_user_info_and_every_credential_like_parameter(text: str, shown: str) -> None:
    assert redact(text) == shown


def test_the_store_uri_warnings_and_errors_are_redacted(monkeypatch, capsys) -> None:
    host = "h" * 190 + ".example"  # the credentials sit past first_line's 200 characters once the URL is quoted
    uri = f"https://{USER}:{PASSWORD}@{host}/?token={TOKEN}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    assert public_uri() == f"https://{host}/?token=***"
    error = RuntimeError(f"API request to {uri}/api/2.0/mlflow/runs/get failed")
    assert error_line(error) == redact(str(error))[:200] and not any(s in error_line(error) for s in SECRETS)
    assert error_line(RuntimeError("")) == "RuntimeError"
    warn(f"cannot reach {uri} ({error})")
    with pytest.raises(SolomonError) as refused, redacted_errors("logging run-1"):
        raise error
    assert str(refused.value).startswith(f"logging run-1 at https://{host}/?token=*** failed: API request to https")
    shown = capsys.readouterr().err + str(refused.value)
    assert shown.startswith("warning: tracking: cannot reach https://hhh")
    assert not [s for s in SECRETS if s in shown], shown


def test_a_pipeline_with_credentials_in_its_tracking_uri_shows_them_nowhere(repo_copy: Path) -> None:
    """The whole pipeline again (train from step 0, so live tracking runs too) with the server down: every
    warning names the store, redacted; no output and no file written under the repository holds a secret."""
    port = closed_port()
    env = pipeline_env() | {
        "MLFLOW_TRACKING_URI": f"http://{USER}:{PASSWORD}@127.0.0.1:{port}/?token={TOKEN}",
        "SOLOMON_TRACKING_RETRY_S": "1",
    }
    shutil.rmtree(repo_copy / "checkpoints")
    done = subprocess.run(
        [DVC, "repro", "--force"], cwd=repo_copy, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    output = done.stdout
    assert done.returncode == 0, output
    shown = f"http://127.0.0.1:{port}/?token=***"
    assert f"warning: tracking: cannot reach {shown} (" in output  # live tracking, while training
    assert "warning: tracking: could not log run" in output and f"to {shown} (" in output  # the report stage
    run_dir = latest_run_dir(repo_copy)
    replay = [SOLOMON, "track", "sync", run_dir.name]  # a replay by hand: fails, in one redacted line
    sync = subprocess.run(replay, cwd=repo_copy, env=env, capture_output=True, text=True)
    assert sync.returncode == 2 and sync.stderr.startswith(f"error: logging {run_dir.name} at "), sync.stderr
    assert f"at {shown} failed: " in sync.stderr and sync.stderr.count("\n") == 1, sync.stderr
    output += sync.stdout + sync.stderr
    assert not [s for s in SECRETS if s in output], output

    leaks = [
        path.relative_to(repo_copy).as_posix()
        for path in sorted(repo_copy.rglob("*"))
        if path.is_file() and not path.is_symlink() and any(s.encode() in path.read_bytes() for s in SECRETS)
    ]
    assert not leaks, leaks
    assert (repo_copy / "dvc.lock").is_file() and list((repo_copy / "reports/training").iterdir())  # written, read
