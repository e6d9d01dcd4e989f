"""Helpers for the serving tests: a `solomon serve` process on a free loopback port, and plain HTTP to it."""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
from pathlib import Path

from conftest import wait_until

from solomon.pipeline import pipeline_env

SOLOMON = str(Path(sys.executable).parent / "solomon")
PROMPT = "In the beginning"
SETTINGS = {"max_tokens": 12, "temperature": 0.9, "top_k": 20, "seed": 7}  # a pyfunc model's params


def generated(repo: Path) -> str:
    """`solomon generate` with SETTINGS: the text an MLflow model of the run must give."""
    done = subprocess.run(
        [SOLOMON, "generate", "--prompt", PROMPT, "--seed", str(SETTINGS["seed"]),
         "--max-new-tokens", str(SETTINGS["max_tokens"]), "--temperature", str(SETTINGS["temperature"]),
         "--top-k", str(SETTINGS["top_k"])],
        cwd=repo, env=pipeline_env(), capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.removesuffix("\n")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start(repo: Path, *args: str, env: dict | None = None) -> tuple[subprocess.Popen, int]:
    port = free_port()
    process = subprocess.Popen(
        [SOLOMON, "serve", "--port", str(port), *args],
        cwd=repo,
        env=pipeline_env() | (env or {}),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return process, port


def request(port: int, method: str, path: str, body: object = None, raw: bytes | None = None):
    """(status, JSON body, headers by lower-case name); ``raw`` is sent as the body byte for byte."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    connection.request(method, path, body=data, headers={"Content-Type": "application/json"})
    answer = connection.getresponse()
    payload = answer.read()
    connection.close()
    return answer.status, json.loads(payload), {k.lower(): v for k, v in answer.getheaders()}


def answers_200(port: int, path: str) -> bool:
    try:
        return request(port, "GET", path)[0] == 200
    except OSError:  # not listening yet
        return False


def wait(port: int, process: subprocess.Popen, path: str = "/readyz", timeout: float = 90) -> None:
    wait_until(lambda: answers_200(port, path), f"{path} to answer 200", process=process, timeout=timeout)


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        process.wait(timeout=30)


class LyingProxy:
    """A real HTTP proxy on loopback in front of a server, that rewrites what the server says about itself (its
    /v1/provenance and every completion's ``system_fingerprint`` and ``model``) to ``claims`` — a deployment that
    says one run's digest while another run's weights compute — and passes everything else through."""

    def __init__(self, backend_port: int, claims: dict) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self._forward(None)

            def do_POST(self) -> None:
                self._forward(self.rfile.read(int(self.headers.get("Content-Length", 0))))

            def _forward(self, body: bytes | None) -> None:
                connection = http.client.HTTPConnection("127.0.0.1", backend_port, timeout=60)
                connection.request(self.command, self.path, body=body, headers={"Content-Type": "application/json"})
                answer = connection.getresponse()
                payload = json.loads(answer.read())
                connection.close()
                if self.path == "/v1/provenance":
                    payload |= {k: v for k, v in proxy.claims.items() if k in payload}
                elif "system_fingerprint" in payload:
                    payload |= {"system_fingerprint": proxy.claims["manifest_sha256"], "model": proxy.claims["run_id"]}
                data = json.dumps(payload).encode()
                self.send_response(answer.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                pass

        self.claims = claims
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
