"""An S3-compatible server on loopback for the remote and artifact-store tests: moto's server mode (``moto_server``,
as DVC's own S3 plugin tests itself), started on a free port, spoken to with real boto3 / aiobotocore traffic, and
stopped by PID."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.metadata import version
from pathlib import Path

from conftest import wait_until
from serve_helpers import free_port

MOTO_SERVER = str(Path(sys.executable).parent / "moto_server")
REGION = "us-east-1"
AUTHENTICATED = {"INITIAL_NO_AUTH_ACTION_COUNT": "3"}  # moto's IAM checks on, after the three of user_with_a_key


class S3Server:
    def __init__(self, port: int, process: subprocess.Popen) -> None:
        self.port, self.process = port, process
        self.endpoint = f"http://127.0.0.1:{port}"
        self.name = f"moto_server {version('moto')} on {self.endpoint}"
        self.key: dict[str, str] = {}

    def credentials(self, key_id: str = "solomon-test-key", secret: str = "solomon-test-secret") -> dict[str, str]:
        """AWS-style credentials from the environment, as a CI job or a developer's shell gives them."""
        return {"AWS_ACCESS_KEY_ID": key_id, "AWS_SECRET_ACCESS_KEY": secret, "AWS_DEFAULT_REGION": REGION}

    def client(self, **credentials: str):
        import boto3

        keys = credentials or self.key or {"key_id": "solomon-test-key", "secret": "solomon-test-secret"}
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=keys["key_id"],
            aws_secret_access_key=keys["secret"],
        )

    def user_with_a_key(self) -> dict[str, str]:
        """An IAM user allowed every S3 action, and its access key, as the environment gives it: for a server
        started with ``AUTHENTICATED`` (moto checks every request's signature from then on, so a wrong secret is
        refused with 403 as AWS refuses it). Call it first: its three requests are the unchecked ones."""
        import json

        import boto3

        iam = boto3.client("iam", endpoint_url=self.endpoint, region_name=REGION, aws_access_key_id="bootstrap",
                           aws_secret_access_key="bootstrap")  # fmt: skip
        iam.create_user(UserName="ci")
        policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}
        iam.put_user_policy(UserName="ci", PolicyName="s3", PolicyDocument=json.dumps(policy))
        key = iam.create_access_key(UserName="ci")["AccessKey"]
        self.key = {"key_id": key["AccessKeyId"], "secret": key["SecretAccessKey"]}
        return self.credentials(key["AccessKeyId"], key["SecretAccessKey"])

    def make_bucket(self, name: str) -> str:
        self.client().create_bucket(Bucket=name)
        return name

    def keys(self, bucket: str) -> list[str]:
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket)
        return [item["Key"] for page in pages for item in page.get("Contents", [])]


@contextmanager
def s3_server(log_path: Path, env: dict[str, str] | None = None) -> Iterator[S3Server]:
    """A fresh, empty server for the block; ``env`` adds moto settings (its IAM checks, for one)."""
    import urllib.request

    port = free_port()
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            [MOTO_SERVER, "-H", "127.0.0.1", "-p", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(os.environ, **(env or {})),
            start_new_session=True,
        )

    def up() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/moto-api/", timeout=2):
                return True
        except OSError:
            return False

    try:
        wait_until(up, "moto_server", process=process, timeout=60, interval=0.2)
        yield S3Server(port, process)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)
