"""`solomon review`: the MR note rendered by real DVC from a real git repository with two commits, and posted
to a small local HTTP server that speaks the GitLab API calls used (the token's user, list notes with pages,
create, edit); where the token may go: never across a redirect, never in clear text off loopback."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

from solomon.errors import SolomonError
from solomon.pipeline import pipeline_env
from solomon.report.review import MARKER, NotesApi, render_note

SOLOMON = str(Path(sys.executable).parent / "solomon")
DVC_YAML = {
    "stages": {
        "train": {
            "cmd": "python -c pass",
            "params": ["model", "train.max_steps", "lr.peak"],
            "metrics": [{"metrics.json": {"cache": False}}],
        }
    }
}


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def _commit(repo: Path, params: dict, metrics: dict, message: str) -> None:
    (repo / "params.yaml").write_text(yaml.safe_dump(params))
    (repo / "metrics.json").write_text(json.dumps(metrics))
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", message)


PARAMS = {"model": {"n_layer": 6, "n_embd": 384}, "train": {"max_steps": 3400}, "lr": {"peak": 0.001}}
METRICS = {"test": {"bits_per_byte": 1.41, "perplexity": 62.0}, "val": {"bits_per_byte": 1.43}}


@pytest.fixture
def review_repo(tmp_path: Path) -> Path:
    """main: the baseline; feature: two params and two metrics moved, one metric unchanged."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.email", "ci@example.com")
    _git(repo, "config", "user.name", "CI")
    subprocess.run([str(Path(sys.executable).parent / "dvc"), "init", "-q"], cwd=repo, check=True, env=pipeline_env())
    (repo / "dvc.yaml").write_text(yaml.safe_dump(DVC_YAML))
    _commit(repo, PARAMS, METRICS, "baseline")
    _git(repo, "checkout", "-q", "-b", "feature")
    params = {**PARAMS, "model": {"n_layer": 8, "n_embd": 384}, "lr": {"peak": 0.0006}}
    metrics = {"test": {"bits_per_byte": 1.38, "perplexity": 57.5}, "val": {"bits_per_byte": 1.43}}
    _commit(repo, params, metrics, "deeper model, lower lr")
    return repo


def _rows(note: str) -> list[list[str]]:
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in note.splitlines() if line.startswith("|")]


def test_note_shows_what_moved_between_two_revisions(review_repo: Path) -> None:
    note = render_note(review_repo, "main", "feature")
    assert note.startswith(MARKER + "\n")
    base = subprocess.run(["git", "rev-parse", "--short=8", "main"], cwd=review_repo, capture_output=True, text=True)
    assert f"`{base.stdout.strip()}`" in note
    rows = _rows(note)
    metric_rows = {(r[1], r[2], r[3]) for r in rows if r[0] == "metrics.json"}
    assert ("test.bits_per_byte", "1.41", "1.38") in metric_rows
    assert ("test.perplexity", "62.0", "57.5") in metric_rows
    assert not any(r[0] == "val.bits_per_byte" for r in metric_rows)  # unchanged: not listed
    param_rows = {(r[1], r[2], r[3]) for r in rows if r[0] == "params.yaml"}
    assert ("model.n_layer", "6", "8") in param_rows and ("lr.peak", "0.001", "0.0006") in param_rows
    assert not any(r[0] == "train.max_steps" for r in param_rows)


def test_same_revisions_say_nothing_changed(review_repo: Path) -> None:
    note = render_note(review_repo, "feature", "feature")
    assert "_No metric changed._" in note and "_No param changed._" in note


def test_a_revision_missing_from_the_clone_is_one_clear_error(review_repo: Path) -> None:
    with pytest.raises(SolomonError, match=r"git rev-parse .*origin/main"):
        render_note(review_repo, "origin/main")


class FakeGitLab:
    """Notes of one merge request, behind the calls `solomon review --post` makes, two notes per page. TOKEN is
    the review bot's (user BOT); READ_ONLY is a token without the api scope: it reads, and is refused a write."""

    TOKEN = "glpat-test-token"
    READ_ONLY = "glpat-read-only"
    BOT, HUMAN = 42, 7
    PAGE = 2

    def __init__(self) -> None:
        human = {"id": self.HUMAN, "username": "reviewer"}
        self.notes: list[dict] = [
            {"id": 1, "body": "Looks good, but why 8 layers?", "system": False, "author": human},
            {"id": 2, "body": "added 1 commit", "system": True, "author": human},
            {"id": 3, "body": f"> {MARKER} quoted by a human", "system": False, "author": human},
        ]
        self.calls: list[str] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/api/v4"

    def _handler(self):
        gitlab = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def _reply(self, status: int, payload: object, headers: dict | None = None) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def _route(self) -> re.Match | None:
                gitlab.calls.append(f"{self.command} {self.path}")
                token = self.headers.get("PRIVATE-TOKEN")
                if token not in (gitlab.TOKEN, gitlab.READ_ONLY):
                    self._reply(401, {"message": "401 Unauthorized"})
                    return None
                if token == gitlab.READ_ONLY and self.command != "GET":
                    self._reply(403, {"message": "403 Forbidden"})
                    return None
                if self.path == "/api/v4/user":
                    self._reply(200, {"id": gitlab.BOT, "username": "project_9_bot"})
                    return None
                match = re.fullmatch(r"/api/v4/projects/group%2Fsolomon/merge_requests/7/notes(?:/(\d+))?", self.path)
                if match is None:
                    self._reply(404, {"message": "404 Not found"})
                return match

            def _body(self) -> dict:
                return json.loads(self.rfile.read(int(self.headers["Content-Length"])))

            def do_GET(self) -> None:
                url = urlsplit(self.path)
                self.path = url.path
                if self._route() is None:
                    return
                page = int(parse_qs(url.query).get("page", ["1"])[0])
                start = (page - 1) * gitlab.PAGE
                more = start + gitlab.PAGE < len(gitlab.notes)
                headers = {"X-Next-Page": str(page + 1) if more else ""}
                self._reply(200, gitlab.notes[start : start + gitlab.PAGE], headers)

            def do_POST(self) -> None:
                if self._route() is not None:
                    note = {
                        "id": max(n["id"] for n in gitlab.notes) + 1,
                        "body": self._body()["body"],
                        "system": False,
                        "author": {"id": gitlab.BOT, "username": "project_9_bot"},
                    }
                    gitlab.notes.append(note)
                    self._reply(201, note)

            def do_PUT(self) -> None:
                match = self._route()
                if match is not None:
                    note = next(n for n in gitlab.notes if n["id"] == int(match.group(1)))
                    note["body"] = self._body()["body"]
                    self._reply(200, note)

        return Handler


@pytest.fixture
def gitlab() -> Iterator[FakeGitLab]:
    fake = FakeGitLab()
    thread = threading.Thread(target=fake.server.serve_forever, daemon=True)
    thread.start()
    yield fake
    fake.server.shutdown()
    fake.server.server_close()


def _post(
    repo: Path, gitlab: FakeGitLab, token: str = FakeGitLab.TOKEN, api_url: str | None = None
) -> subprocess.CompletedProcess:
    env = pipeline_env() | {
        "CI_API_V4_URL": api_url or gitlab.api_url,
        "CI_PROJECT_ID": "group/solomon",
        "CI_MERGE_REQUEST_IID": "7",
        "CI_PIPELINE_URL": "https://gitlab.example.com/group/solomon/-/pipelines/42",
        "SOLOMON_REVIEW_TOKEN": token,
    }
    return subprocess.run(
        [SOLOMON, "review", "--base", "main", "--post"], cwd=repo, env=env, capture_output=True, text=True
    )


def test_a_second_post_edits_the_first_note_instead_of_adding_one(review_repo: Path, gitlab: FakeGitLab) -> None:
    first = _post(review_repo, gitlab)
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == "review note 4 created"
    assert len(gitlab.notes) == 4 and gitlab.notes[3]["body"].startswith(MARKER)
    assert "| metrics.json | test.bits_per_byte | 1.41" in gitlab.notes[3]["body"]
    assert "pipelines/42" in gitlab.notes[3]["body"]

    # Another push to the MR: the metrics move again; the same note is edited, no second note appears.
    metrics = {"test": {"bits_per_byte": 1.36, "perplexity": 55.0}, "val": {"bits_per_byte": 1.43}}
    _commit(review_repo, yaml.safe_load((review_repo / "params.yaml").read_text()), metrics, "longer run")
    second = _post(review_repo, gitlab)
    assert second.returncode == 0, second.stderr
    assert second.stdout.strip() == "review note 4 updated"
    assert len(gitlab.notes) == 4
    assert "1.36" in gitlab.notes[3]["body"] and "1.38" not in gitlab.notes[3]["body"]
    assert gitlab.notes[2]["body"].startswith("> ")  # the human's quote of the marker was left alone
    assert [c.split()[0] for c in gitlab.calls].count("PUT") == 1

    third = _post(review_repo, gitlab)  # nothing new pushed: nothing written
    assert third.stdout.strip() == "review note 4 unchanged" and len(gitlab.notes) == 4
    assert [c.split()[0] for c in gitlab.calls].count("PUT") == 1


def test_a_rejected_token_is_one_line_and_a_failed_job(review_repo: Path, gitlab: FakeGitLab) -> None:
    done = _post(review_repo, gitlab, token="wrong")
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0
    assert "GitLab answered 401" in done.stderr and "SOLOMON_REVIEW_TOKEN" in done.stderr
    assert len(gitlab.notes) == 3


def test_post_outside_a_merge_request_pipeline_names_the_missing_variables(review_repo: Path) -> None:
    env = {k: v for k, v in pipeline_env().items() if not k.startswith("CI_")}
    done = subprocess.run(
        [SOLOMON, "review", "--base", "main", "--post"], cwd=review_repo, env=env, capture_output=True, text=True
    )
    assert done.returncode == 2
    assert "CI_API_V4_URL, CI_PROJECT_ID, CI_MERGE_REQUEST_IID not set" in done.stderr


def test_a_marked_note_by_another_user_is_left_alone(review_repo: Path, gitlab: FakeGitLab) -> None:
    """Anyone can paste the marker: only a note the token's own user wrote (GET /user) is edited."""
    theirs = {"id": 4, "body": f"{MARKER}\nnot the bot's", "system": False, "author": {"id": FakeGitLab.HUMAN}}
    gitlab.notes.append(dict(theirs))
    first = _post(review_repo, gitlab)
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == "review note 5 created"
    assert gitlab.notes[3] == theirs and gitlab.notes[4]["author"]["id"] == FakeGitLab.BOT
    assert "GET /api/v4/user" in gitlab.calls

    metrics = {"test": {"bits_per_byte": 1.36, "perplexity": 55.0}, "val": {"bits_per_byte": 1.43}}
    _commit(review_repo, yaml.safe_load((review_repo / "params.yaml").read_text()), metrics, "longer run")
    second = _post(review_repo, gitlab)
    assert second.stdout.strip() == "review note 5 updated", second.stderr
    assert gitlab.notes[3] == theirs and len(gitlab.notes) == 5
    assert [c for c in gitlab.calls if c.startswith("PUT")] == [
        "PUT /api/v4/projects/group%2Fsolomon/merge_requests/7/notes/5"
    ]


def test_a_token_without_write_access_gets_a_403_that_names_the_likely_cause(
    review_repo: Path, gitlab: FakeGitLab
) -> None:
    done = _post(review_repo, gitlab, token=FakeGitLab.READ_ONLY)
    assert done.returncode == 2 and done.stderr.strip().count("\n") == 0, done.stderr
    assert "GitLab answered 403 to POST" in done.stderr
    assert "lacks the api scope" in done.stderr and "lacks permission on merge request !7" in done.stderr
    assert len(gitlab.notes) == 3


class HeaderRecorder:
    """A loopback server that answers 200 to anything and keeps every request's headers."""

    def __init__(self) -> None:
        self.requests: list[dict[str, str]] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def _record(self) -> None:
                recorder.requests.append({"line": self.requestline, **dict(self.headers)})
                body = json.dumps({"id": FakeGitLab.BOT}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = _record

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"


class Redirector:
    """A loopback server that answers every request with a 307 to the same path on ``target``."""

    def __init__(self, target: str) -> None:
        self.calls: list[str] = []
        redirector = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def _redirect(self) -> None:
                redirector.calls.append(f"{self.command} {self.path}")
                self.send_response(307)
                self.send_header("Location", f"{target}{self.path}")
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_POST = do_PUT = _redirect

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/api/v4"


@pytest.fixture
def servers() -> Iterator[list]:
    started: list = []

    def serve(server) -> None:
        threading.Thread(target=server.server.serve_forever, daemon=True).start()
        started.append(server)

    yield serve
    for running in started:
        running.server.shutdown()
        running.server.server_close()


def test_a_redirect_is_refused_and_the_token_never_reaches_its_target(review_repo: Path, servers) -> None:
    recorder = HeaderRecorder()
    redirector = Redirector(recorder.url)
    servers(recorder)
    servers(redirector)
    done = _post(review_repo, FakeGitLab(), api_url=redirector.api_url)
    assert done.returncode == 2 and done.stderr.strip().count("\n") == 0, done.stderr
    assert "GitLab answered 307 to GET" in done.stderr and f"a redirect to {recorder.url}/api/v4/user" in done.stderr
    assert "not followed" in done.stderr
    assert redirector.calls == ["GET /api/v4/user"]  # the first request, then nothing more
    assert not [r for r in recorder.requests if FakeGitLab.TOKEN in json.dumps(r)]
    assert recorder.requests == []


def test_an_api_url_without_tls_off_loopback_is_refused_before_any_request(review_repo: Path) -> None:
    done = _post(review_repo, FakeGitLab(), api_url="http://gitlab.example.com/api/v4")
    assert done.returncode == 2 and done.stderr.strip().count("\n") == 0, done.stderr
    assert "refusing to send the token to 'http://gitlab.example.com/api/v4'" in done.stderr
    assert "must be https://" in done.stderr


@pytest.mark.parametrize(
    "api_url",
    ["https://gitlab.example.com/api/v4", "http://127.0.0.1:8080/api/v4", "http://127.8.9.10/api/v4",
     "http://[::1]:8080/api/v4", "http://localhost/api/v4"],
)  # fmt: skip
def test_https_and_loopback_api_urls_are_accepted(api_url: str) -> None:
    assert NotesApi(api_url, "group/solomon", "7", "token").api_url == api_url


@pytest.mark.parametrize(
    "api_url",
    ["http://gitlab.example.com/api/v4", "http://10.0.0.8/api/v4", "http://127.0.0.1.example.com/api/v4",
     "ftp://gitlab.example.com/api/v4", "gitlab.example.com/api/v4", "https:///api/v4"],
)  # fmt: skip
def test_any_other_api_url_is_refused_when_the_api_is_made_before_a_request_can_be(api_url: str) -> None:
    with pytest.raises(SolomonError, match="must be https://"):
        NotesApi(api_url, "group/solomon", "7", "token")
