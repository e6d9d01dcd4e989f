"""What a careless or hostile client, a wrong flag or an odd server does to Solomon's serving and export commands:
a 4xx or one line, never a 500, a traceback or a hang. Real processes and real sockets on loopback."""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest
from serve_helpers import SOLOMON, request, start, stop, wait

from solomon.lineage.client import Broken, http_json
from solomon.pipeline import pipeline_env

pytestmark = pytest.mark.slow


def test_abusive_requests_get_a_4xx_and_the_server_keeps_serving(repo_copy: Path) -> None:
    process, port = start(repo_copy, "--timeout", "3")
    try:
        wait(port, process)
        status, body, _ = request(port, "POST", "/v1/completions", raw=b"[" * 5000)
        assert (status, body["error"]["message"]) == (400, "request body is JSON nested too deeply")
        status, body, _ = request(port, "POST", "/v1/completions/", {"prompt": "In"})
        assert status == 404 and body["error"]["type"] == "invalid_request_error"
        status, body, _ = request(port, "POST", "/v1/completions", {"prompt": "In", "stop": "x" * 300})
        assert (status, body["error"]["param"]) == (400, "stop")
        assert "at most 256 characters" in body["error"]["message"]

        # a client that sends half its body and waits: answered 408 within the server's timeout
        stalled = socket.create_connection(("127.0.0.1", port))
        stalled.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n" + b'{"prompt":')
        stalled.settimeout(30)
        started = time.monotonic()
        answer = stalled.recv(4096)
        assert answer.startswith(b"HTTP/1.1 408"), answer
        assert time.monotonic() - started < 20
        # and one that leaves mid-body is no server error
        gone = socket.create_connection(("127.0.0.1", port))
        gone.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n" + b'{"pro')
        gone.close()

        status, body, _ = request(port, "POST", "/v1/completions", {"prompt": "In", "max_tokens": 2, "seed": 1})
        assert status == 200 and body["choices"][0]["finish_reason"] == "length"
    finally:
        stalled_again = socket.create_connection(("127.0.0.1", port))  # a stalled body does not hold the shutdown
        stalled_again.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
        stop(process)
        stalled_again.close()
    assert process.returncode == 0
    assert "Traceback" not in process.stderr.read()


def serve_once(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [SOLOMON, "serve", *args], cwd=repo, env=pipeline_env(), capture_output=True, text=True, timeout=120
    )


def test_a_port_it_cannot_listen_on_is_one_line_before_the_model_loads(repo_copy: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = serve_once(repo_copy, "--port", str(port))
    assert done.returncode == 2 and "serving" not in done.stdout
    assert done.stderr.strip() == (
        f"error: could not listen on 127.0.0.1:{port} (Address already in use): pick another --port or --host"
    )
    done = serve_once(repo_copy, "--port", "70000")
    assert done.returncode == 2 and "argument --port: 70000 is not between 1 and 65535" in done.stderr
    done = serve_once(repo_copy, "--host", "999.1.1.1", "--port", "8000")
    assert done.returncode == 2 and done.stderr.startswith("error: --host 999.1.1.1 is not an address here")
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_prompt_that_is_not_utf8_is_one_line(repo_copy: Path) -> None:
    done = subprocess.run(
        [SOLOMON.encode(), b"generate", b"--prompt", b"caf\xe9", b"--seed", b"1"],
        cwd=repo_copy,
        env=pipeline_env(),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == "error: --prompt is not UTF-8 text (byte 3 of it): give the prompt as UTF-8"


class OddServer:
    """A loopback server that answers every request with ``reply`` (bytes), after ``drip`` seconds a byte when
    given: what lineage --url may meet in front of it."""

    def __init__(self, reply: bytes, drip: float | None = None) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.reply, self.drip = reply, drip
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            client.recv(65536)
            try:
                if self.drip is None:
                    client.sendall(self.reply)
                else:
                    for byte in self.reply:
                        client.sendall(bytes([byte]))
                        time.sleep(self.drip)
            except OSError:
                pass
            client.close()

    def close(self) -> None:
        self.listener.close()


def http_reply(status: str, body: bytes, declared: int | None = None) -> bytes:
    length = len(body) if declared is None else declared
    return f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {length}\r\n\r\n".encode() + body


@pytest.mark.parametrize(
    ("reply", "drip", "expected"),
    [
        (http_reply("200 OK", b"[]"), None, "answered JSON list, not an object"),
        (http_reply("200 OK", b"[" * 5000), None, "no JSON answer"),
        (http_reply("500 Oops", b"<html>\n<body>\nboom\n</body>\n</html>"), None, "answered 500: <html> <body> boom"),
        (http_reply("200 OK", b"{}", declared=1000), 0.5, "no whole answer within 3 s"),
    ],
)
def test_lineage_meets_an_odd_server_with_one_line(reply: bytes, drip: float | None, expected: str) -> None:
    server = OddServer(reply, drip)
    try:
        started = time.monotonic()
        with pytest.raises(Broken) as info:
            http_json(f"{server.url}/v1/provenance", timeout=3)
        assert time.monotonic() - started < 10
    finally:
        server.close()
    assert str(info.value).startswith("traffic: ") and expected in str(info.value), str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("url", ["http://127.0.0.1:abc", "http://[::1"])
def test_lineage_refuses_a_malformed_url_in_one_line(url: str) -> None:
    with pytest.raises(Broken, match="no JSON answer"):
        http_json(f"{url}/v1/provenance", timeout=3)


def test_an_export_it_cannot_write_is_one_line_and_leaves_nothing(repo_copy: Path) -> None:
    (repo_copy / "a-file").write_text("not a directory", encoding="utf-8")
    for out in (repo_copy / "a-file/export", Path("/proc/no-export-here")):
        done = subprocess.run(
            [SOLOMON, "export", "--format", "hf", "--out", str(out)],
            cwd=repo_copy,
            env=pipeline_env(),
            capture_output=True,
            text=True,
        )
        assert done.returncode == 2, done.stderr
        line = done.stderr.strip()
        assert line.startswith(f"error: could not write the export in {out} (") and "\n" not in line, line
    assert (repo_copy / "a-file").read_text(encoding="utf-8") == "not a directory"
