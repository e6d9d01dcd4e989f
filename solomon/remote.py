"""`make push` / `make pull`: DVC's push and pull of a run's files, with what goes wrong said in one line.

DVC reports a wrong secret as "unexpected error - Forbidden", an endpoint that is down as a traceback-like line
naming one object, and files the remote lacks as a checkout failure of the workspace. Before it runs, an S3
remote is asked for its bucket (``head_bucket``, with the remote's own endpoint, region and credentials, from
`.dvc/config.local` or the AWS environment as DVC takes them), so those faults are named as what they are; after a
failed pull, the files of `dvc.lock` that neither the cache nor the remote has are named by path.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse

from solomon.errors import SolomonError, last_line

CREDENTIALS_HINT = (
    "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE), or `dvc remote modify --local {name} "
    "access_key_id …` and `… secret_access_key …` (never in the committed .dvc/config)"
)


def remote_config(root: Path, name: str | None) -> tuple[str, dict]:
    """The remote ``name`` (default: the repository's default remote) as DVC sees it, .dvc/config.local merged."""
    from dvc.config import Config

    config = Config(dvc_dir=str(root / ".dvc"), validate=False)
    name = name or config["core"].get("remote")
    if not name:
        raise SolomonError(
            "no DVC remote is set: add one with `dvc remote add -d storage s3://<bucket>/<prefix>` (docs/remote.md)"
        )
    remotes = config.get("remote", {})
    if name not in remotes:
        known = ", ".join(sorted(remotes)) or "none"
        raise SolomonError(f"no DVC remote named '{name}' (this repository has: {known}): `dvc remote list` shows them")
    return name, dict(remotes[name])


def s3_problem(url: str, endpoint_url: str | None, hint: str, **credentials: str | None) -> str | None:
    """What is wrong with the S3 location ``url`` as these settings reach it (its bucket asked for with
    ``head_bucket``), in words ending with ``hint`` where credentials are at fault; None when it answers."""
    import boto3
    from botocore.config import Config
    from botocore.exceptions import (
        BotoCoreError,
        ClientError,
        EndpointConnectionError,
        NoCredentialsError,
        PartialCredentialsError,
    )

    bucket = urlparse(url).netloc
    endpoint = endpoint_url or "AWS S3"
    try:
        session = boto3.session.Session(profile_name=credentials.pop("profile", None))
        client = session.client(
            "s3",
            endpoint_url=endpoint_url,
            config=Config(connect_timeout=10, read_timeout=30, retries={"max_attempts": 2}),
            **credentials,
        )
        client.head_bucket(Bucket=bucket)
    except NoCredentialsError:
        return f"no credentials for {url}: {hint}"
    except PartialCredentialsError as exc:  # a key without its secret: an empty or unset CI variable
        return f"incomplete credentials for {url} ({exc}): {hint}"
    except EndpointConnectionError:
        return f"cannot reach {endpoint} for {url}: is the server up, and is the endpoint URL right?"
    except ClientError as exc:
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        code = exc.response.get("Error", {}).get("Code", "")
        if status == 404 or code in ("404", "NoSuchBucket"):
            return f"bucket '{bucket}' does not exist at {endpoint}: create it, or name the right one in {url}"
        if status in (401, 403):
            return (
                f"{endpoint} refused these credentials for {url} ({status}: a wrong key or secret, or no access to "
                f"bucket '{bucket}'): {hint}"
            )
        return f"{endpoint} answered {code or status} for {url}: {exc}"
    except BotoCoreError as exc:  # a malformed endpoint URL, an unknown profile, …
        return f"{url}: {exc}"
    return None


def check_s3(name: str, remote: dict) -> None:
    """Ask an S3 remote for its bucket; raise the one line that says what is wrong with it."""
    problem = s3_problem(
        remote["url"],
        remote.get("endpointurl"),
        CREDENTIALS_HINT.format(name=name),
        profile=remote.get("profile"),
        region_name=remote.get("region"),
        aws_access_key_id=remote.get("access_key_id"),
        aws_secret_access_key=remote.get("secret_access_key"),
        aws_session_token=remote.get("session_token"),
    )
    if problem:
        raise SolomonError(f"the DVC remote '{name}': {problem}")


def check(root: Path, name: str | None) -> str:
    """The remote's name, once it answers (S3: its bucket exists and takes these credentials)."""
    name, remote = remote_config(root, name)
    if urlparse(remote.get("url", "")).scheme == "s3":
        check_s3(name, remote)
    return name


def _dvc(*args: str, root: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(Path(sys.executable).parent / "dvc"), *args], cwd=root, capture_output=True, text=True, check=False
    )


def missing_from_remote(root: Path, name: str) -> list[str]:
    """The outputs of `dvc.lock` that neither the cache nor the remote ``name`` holds."""
    done = _dvc("status", "--cloud", "--json", "--remote", name, root=root)
    try:
        status = json.loads(done.stdout or "{}")
    except json.JSONDecodeError:
        return []
    return sorted(path for path, state in status.items() if state == "missing")


def checkout_failures(output: str) -> list[str]:
    """The outputs a failed `dvc pull` names as not checked out (their files were in neither the cache nor the
    remote; where a directory's listing is what is missing, `dvc status` cannot see it, so only this names it)."""
    lines = output.splitlines()
    marks = [i for i, line in enumerate(lines) if line.rstrip().endswith("Checkout failed for following targets:")]
    if not marks:
        return []
    targets = []
    for line in lines[marks[0] + 1 :]:
        if not line.strip() or line.startswith(("Is your cache", "<https://")):
            break
        targets.append(line.strip())
    return targets


def transfer(root: Path, direction: str, name: str | None) -> str:
    """`dvc push` or `dvc pull` with the remote ``name``; DVC's summary line, or the one line of what went wrong."""
    name = check(root, name)
    done = _dvc(direction, "--remote", name, root=root)
    if done.returncode == 0:
        return last_line(done.stdout)
    if direction == "pull":
        missing = sorted(set(missing_from_remote(root, name)) | set(checkout_failures(done.stderr + done.stdout)))
        if missing:
            shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
            raise SolomonError(
                f"the remote '{name}' lacks {len(missing)} of the files this commit's dvc.lock names ({shown}): push "
                "them from the machine that made the run (`make push`), then pull again"
            )
    errors = [line for line in (done.stderr + done.stdout).splitlines() if line.startswith("ERROR")]
    raise SolomonError(f"dvc {direction} --remote {name} failed: {errors[0] if errors else last_line(done.stderr)}")
