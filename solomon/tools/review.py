"""``solomon review``: the merge-request note that shows a reviewer how metrics and params moved.

The note is rendered from two git revisions with DVC's own diffs (``dvc metrics diff`` and ``dvc params diff``,
as Markdown), so what the reviewer reads is what ``dvc`` says locally. Posted through the GitLab Notes API, it
starts with a hidden marker: a later push finds that note and edits it instead of adding another.
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from solomon.errors import SolomonError, first_line, last_line
from solomon.tools.scratch import run

MARKER = "<!-- solomon-review -->"
TOKEN_ENV = "SOLOMON_REVIEW_TOKEN"  # a masked CI/CD variable: project access token with the `api` scope


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)
    if done.returncode != 0:
        raise SolomonError(f"git {' '.join(args)}: {last_line(done.stderr)}")
    return done.stdout.strip()


def _dvc_diff(repo: Path, kind: str, base: str, head: str) -> str:
    done = run(["dvc", kind, "diff", base, head, "--md"], repo, check=False)  # this interpreter's dvc
    if done.returncode != 0:
        raise SolomonError(
            f"dvc {kind} diff {base} {head} failed ({last_line(done.stderr)}): both revisions must be "
            "in the clone (in CI: GIT_DEPTH 0 and `git fetch origin <target-branch>`)"
        )
    table = done.stdout.strip()
    return table if len(table.splitlines()) > 2 else ""  # DVC prints a bare header when nothing changed


def render_note(repo: Path, base: str, head: str = "HEAD", footer: str = "") -> str:
    """The note's Markdown: metrics and params of ``head`` against ``base``, changed values only."""
    base_sha = _git(repo, "rev-parse", "--verify", "--short=8", f"{base}^{{commit}}")
    head_sha = _git(repo, "rev-parse", "--verify", "--short=8", f"{head}^{{commit}}")
    metrics = _dvc_diff(repo, "metrics", base, head) or "_No metric changed._"
    params = _dvc_diff(repo, "params", base, head) or "_No param changed._"
    lines = [
        MARKER,
        f"### Solomon review: `{head}` against `{base}`",
        "",
        f"Metrics and params of `{head_sha}` compared with `{base_sha}` (from `dvc metrics diff` and "
        "`dvc params diff`; changed values only).",
        "",
        "#### Metrics",
        "",
        metrics,
        "",
        "#### Params",
        "",
        params,
    ]
    if footer:
        lines += ["", footer]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class NotesApi:
    """The three GitLab Notes API calls the review uses, on one merge request."""

    api_url: str  # e.g. https://gitlab.example.com/api/v4 ($CI_API_V4_URL)
    project: str  # numeric id or full path ($CI_PROJECT_ID)
    merge_request: str  # the MR's iid ($CI_MERGE_REQUEST_IID)
    token: str

    @classmethod
    def from_ci_environment(cls, token_env: str = TOKEN_ENV) -> NotesApi:
        names = {"api_url": "CI_API_V4_URL", "project": "CI_PROJECT_ID", "merge_request": "CI_MERGE_REQUEST_IID"}
        values = {field: os.environ.get(variable) for field, variable in names.items()}
        missing = [names[field] for field, value in values.items() if not value]
        if missing:
            raise SolomonError(f"{', '.join(missing)} not set: --post runs in a GitLab merge-request pipeline")
        token = os.environ.get(token_env)
        if not token:
            raise SolomonError(
                f"${token_env} is not set: add a masked CI/CD variable holding a project access token (api scope)"
            )
        return cls(values["api_url"], values["project"], values["merge_request"], token)

    def _url(self, suffix: str = "") -> str:
        project = quote(self.project, safe="")
        return f"{self.api_url.rstrip('/')}/projects/{project}/merge_requests/{self.merge_request}/notes{suffix}"

    def _call(self, method: str, url: str, body: dict | None = None) -> tuple[object, dict]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("PRIVATE-TOKEN", self.token)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return json.loads(response.read() or b"null"), dict(response.headers)
        except urllib.error.HTTPError as exc:
            hint = f" (check ${TOKEN_ENV}: a token with the api scope)" if exc.code in (401, 403) else ""
            raise SolomonError(f"GitLab answered {exc.code} to {method} {url}{hint}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise SolomonError(f"cannot reach GitLab at {url}: {first_line(exc)}") from None

    def notes(self) -> list[dict]:
        found, page = [], "1"
        while page:
            batch, headers = self._call("GET", self._url(f"?per_page=100&sort=asc&page={page}"))
            found += batch
            page = headers.get("X-Next-Page") or headers.get("x-next-page") or ""
        return found

    def create(self, body: str) -> dict:
        return self._call("POST", self._url(), {"body": body})[0]

    def update(self, note_id: int, body: str) -> dict:
        return self._call("PUT", self._url(f"/{note_id}"), {"body": body})[0]


def post_or_update(api: NotesApi, body: str) -> tuple[str, int]:
    """Edit the review note posted before (the first note that starts with the marker), else post one.

    Returns ("created" | "updated" | "unchanged", note id).
    """
    ours = [n for n in api.notes() if not n.get("system") and str(n.get("body", "")).startswith(MARKER)]
    if not ours:
        return "created", int(api.create(body)["id"])
    note = ours[0]
    if note["body"] == body:
        return "unchanged", int(note["id"])
    api.update(note["id"], body)
    return "updated", int(note["id"])
