"""Serving: concurrent clients against ``solomon serve``'s stack on loopback, a model of the default size with
random weights (``make bench`` part 4; ``make soak`` serves the same: ``solomon.tools.soak``)."""

import contextlib
import http.client
import json
import math
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from solomon.errors import SolomonError, last_line
from solomon.model.gpt import GPT, GPTConfig
from solomon.records import PARAMS_FILE
from solomon.runtime import configure_torch
from solomon.tools.scratch import pipeline_env


# --- serving: concurrent clients against `solomon serve`'s stack on loopback -----------------------------------
def serve_random_model(port: int, tokenizer_path: str, threads: int) -> None:
    """The serving stack (FastAPI app, queue, worker, uvicorn) around a model of the default size with random
    weights: a load figure needs the default model's speed, not a trained run. Nothing here is verified."""
    from datetime import UTC, datetime

    from solomon.data.tokenizer import load_tokenizer
    from solomon.params import load_params
    from solomon.records import WEIGHTS
    from solomon.serving.limits import Limits
    from solomon.serving.loader import Served
    from solomon.serving.server import serve

    def load() -> Served:
        configure_torch(threads)
        tokenizer = load_tokenizer(Path(tokenizer_path))
        torch.manual_seed(0)
        model = GPT(GPTConfig.from_params(load_params(PARAMS_FILE).model, tokenizer.get_vocab_size())).eval()
        return Served(
            model=model,
            tokenizer=tokenizer,
            stop_id=None,  # every request generates its max_tokens
            samples={"max_new_tokens": 32, "temperature": 0.8, "top_k": 40},
            run_id="bench-random-weights",
            manifest_sha256="0" * 64,
            files={WEIGHTS: {"sha256": "random weights", "verified_in": "not verified"}},
            git={},
            verified="not verified: random weights for the load figure",
            verified_utc=datetime.now(UTC).isoformat(timespec="seconds"),
            threads=threads,
        )

    serve(load, "127.0.0.1", port, Limits(queue=64, timeout_s=600))


def _bench_tokenizer(work: Path) -> Path:
    """The workspace's tokenizer when there is one (the default vocabulary); else one trained on a little text."""
    from solomon.data.tokenizer import train_tokenizer
    from solomon.params import TokenizerParams
    from solomon.records import TOKENIZER

    if Path(TOKENIZER).is_file():
        return Path(TOKENIZER).resolve()
    texts = [f"In the beginning {i} the words were counted and weighed, verse {i * 7}." for i in range(2000)]
    path = work / "tokenizer.json"
    train_tokenizer(texts, TokenizerParams()).save(str(path))
    return path


def ask(port: int, path: str, body: dict | None = None, timeout: float = 600) -> tuple[int, dict]:
    """(status, JSON body) of a GET (no ``body``) or a POST to the server on 127.0.0.1:``port``."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("POST" if body else "GET", path, json.dumps(body) if body else None)
        answer = connection.getresponse()
        return answer.status, json.loads(answer.read())
    finally:
        connection.close()


@contextmanager
def random_model_server(threads: int) -> Iterator[subprocess.Popen]:
    """A ``serve_random_model`` process on a free loopback port (``process.port``), ready (/readyz 200) within
    120 s; stopped (SIGTERM, drained) on the way out."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with tempfile.TemporaryDirectory(prefix="solomon-bench-serve-") as work:
        code = (
            f"from solomon.tools.bench.serving import serve_random_model; serve_random_model({port}, {{!r}}, {threads})"
        )
        server = subprocess.Popen(
            [sys.executable, "-c", code.format(str(_bench_tokenizer(Path(work))))],
            env=pipeline_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        server.port = port
        try:
            deadline = time.monotonic() + 120
            while True:
                if server.poll() is not None:
                    raise SolomonError(f"the bench server exited: {last_line(server.stderr.read())}")
                with contextlib.suppress(OSError):  # not listening yet
                    if ask(port, "/readyz")[0] == 200:
                        break
                if time.monotonic() > deadline:
                    raise SolomonError("the bench server was not ready within 120 s")
                time.sleep(0.1)
            yield server
        finally:
            server.terminate()
            server.wait(timeout=60)


def percentile(ordered: list[float], share: float) -> float:
    """The nearest-rank percentile of sorted values (``share`` 0.95: p95)."""
    return ordered[min(len(ordered) - 1, max(0, math.ceil(share * len(ordered)) - 1))]


def serving_load(clients: int = 4, requests_per_client: int = 4, max_tokens: int = 32, threads: int = 1) -> dict:
    """Requests/s, latency percentiles and generated tokens/s of ``clients`` concurrent clients, each sending
    ``requests_per_client`` completions one after another, against a server process on 127.0.0.1."""
    with random_model_server(threads) as server:
        latencies, tokens, errors = [], [], []

        def client(index: int) -> None:
            for n in range(requests_per_client):
                body = {"prompt": "In the beginning", "max_tokens": max_tokens, "seed": index * 1000 + n}
                started = time.perf_counter()
                try:
                    status, payload = ask(server.port, "/v1/completions", body)
                except OSError as exc:
                    status, payload = 0, {"error": str(exc)}
                latencies.append(time.perf_counter() - started)
                if status == 200:
                    tokens.append(payload["usage"]["completion_tokens"])
                else:
                    errors.append(status)

        workers = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
        started = time.perf_counter()
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        wall = time.perf_counter() - started
    ordered = sorted(latencies)
    return {
        "model": "default size, random weights",
        "clients": clients,
        "requests": len(latencies),
        "max_tokens": max_tokens,
        "threads": threads,
        "wall_s": round(wall, 2),
        "requests_per_s": round(len(latencies) / wall, 2),
        "p50_latency_s": round(ordered[len(ordered) // 2], 3),
        "p95_latency_s": round(percentile(ordered, 0.95), 3),
        "generated_tokens_per_s": round(sum(tokens) / wall, 1),
        "errors": len(errors),
    }
