"""``solomon review``: the merge-request note that shows a reviewer how metrics and params moved.

The note is rendered from two git revisions with DVC's own diffs (``dvc metrics diff`` and ``dvc params diff``,
as Markdown), so what the reviewer reads is what ``dvc`` says locally. Posted through the GitLab Notes API, it
starts with a hidden marker: a later push finds that note and edits it instead of adding another, but only a note
the token's own user wrote (anyone can paste the marker into a comment).

The token travels only where it is meant to: the API URL must be https (plain http only on loopback, for tests),
and a redirect is refused rather than followed (urllib would send the token's header on to the new address).
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlsplit

from solomon.errors import SolomonError, first_line, last_line
from solomon.pipeline import dvc_executable, run

MARKER = "<!-- solomon-review -->"
TOKEN_ENV = "SOLOMON_REVIEW_TOKEN"  # a masked CI/CD variable: project access token with the `api` scope


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)
    if done.returncode != 0:
        raise SolomonError(f"git {' '.join(args)}: {last_line(done.stderr)}")
    return done.stdout.strip()


def _dvc_diff(repo: Path, kind: str, base: str, head: str) -> str:
    done = run([dvc_executable(), kind, "diff", base, head, "--md"], repo, check=False)
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


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback  # 127.0.0.0/8 and ::1
    except ValueError:
        return False


def check_api_url(api_url: str) -> None:
    """Refuse, before any request, an API URL the token must not travel to in clear text."""
    url = urlsplit(api_url)
    if url.scheme == "https" and url.hostname:
        return
    if url.scheme == "http" and url.hostname and _is_loopback(url.hostname):
        return
    raise SolomonError(
        f"refusing to send the token to {api_url!r}: the GitLab API URL must be https:// (http:// only on loopback)"
    )


class _RefuseRedirects(urllib.request.HTTPRedirectHandler):
    """No redirect is followed: urllib would send the PRIVATE-TOKEN header to wherever it points."""

    def redirect_request(self, *args: object) -> None:
        return None  # urllib then raises the 3xx as an HTTPError, which names the Location


_OPENER = urllib.request.build_opener(_RefuseRedirects)


@dataclass(frozen=True)
class NotesApi:
    """The GitLab API calls the review uses, on one merge request: who the token is, and list, create, edit notes."""

    api_url: str  # e.g. https://gitlab.example.com/api/v4 ($CI_API_V4_URL)
    project: str  # numeric id or full path ($CI_PROJECT_ID)
    merge_request: str  # the MR's iid ($CI_MERGE_REQUEST_IID)
    token: str

    def __post_init__(self) -> None:
        check_api_url(self.api_url)

    @classmethod
    def from_ci_environment(cls, environ: Mapping[str, str], token_env: str = TOKEN_ENV) -> NotesApi:
        """The note's API from GitLab's CI variables in ``environ`` (the entry point's environment)."""
        names = {"api_url": "CI_API_V4_URL", "project": "CI_PROJECT_ID", "merge_request": "CI_MERGE_REQUEST_IID"}
        values = {field: environ.get(variable) for field, variable in names.items()}
        missing = [names[field] for field, value in values.items() if not value]
        if missing:
            raise SolomonError(f"{', '.join(missing)} not set: --post runs in a GitLab merge-request pipeline")
        token = environ.get(token_env)
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
            with _OPENER.open(request, timeout=30) as response:
                return json.loads(response.read() or b"null"), dict(response.headers)
        except urllib.error.HTTPError as exc:
            raise SolomonError(f"GitLab answered {exc.code} to {method} {url}{self._hint(exc)}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise SolomonError(f"cannot reach GitLab at {url}: {first_line(exc)}") from None

    def _hint(self, exc: urllib.error.HTTPError) -> str:
        if 300 <= exc.code < 400:
            where = exc.headers.get("Location", "another address")
            return (
                f", a redirect to {where}: not followed, the token is never sent on (is CI_API_V4_URL the API's own?)"
            )
        if exc.code == 401:
            return f" (check ${TOKEN_ENV}: a token with the api scope)"
        if exc.code == 403:
            return (
                f" (the token in ${TOKEN_ENV} lacks the api scope, or its user lacks permission on merge request "
                f"!{self.merge_request}: it needs at least the Reporter role in the project)"
            )
        return ""

    def user_id(self) -> int:
        """The id of the token's own user: the author of the notes this review may edit."""
        return int(self._call("GET", f"{self.api_url.rstrip('/')}/user")[0]["id"])

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


def _is_ours(note: dict, user_id: int) -> bool:
    author = note.get("author") or {}
    return not note.get("system") and author.get("id") == user_id and str(note.get("body", "")).startswith(MARKER)


def post_or_update(api: NotesApi, body: str) -> tuple[str, int]:
    """Edit the review note posted before (the first note that starts with the marker and was written by the
    token's own user; a marked note by anyone else is left alone), else post one.

    Returns ("created" | "updated" | "unchanged", note id).
    """
    me = api.user_id()
    ours = [note for note in api.notes() if _is_ours(note, me)]
    if not ours:
        return "created", int(api.create(body)["id"])
    note = ours[0]
    if note["body"] == body:
        return "unchanged", int(note["id"])
    api.update(note["id"], body)
    return "updated", int(note["id"])
