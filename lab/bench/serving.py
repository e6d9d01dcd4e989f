"""Serving: closed-loop clients streaming from ``solomon serve``'s stack on loopback, a server process around a
model of the default size with random weights (``make bench`` part 4, ``lab.bench.serving_section``;
``make soak`` serves the same: ``lab.soak``)."""

import contextlib
import hashlib
import http.client
import json
import math
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import torch

from lab.scratch import lab_env
from solomon.errors import SolomonError, last_line
from solomon.model.gpt import GPT, GPTConfig
from solomon.params import ModelParams
from solomon.runtime import configure_torch
from solomon.serving.limits import DEFAULT_PRECISION, Limits

PROMPT = "In the beginning"
MAX_TOKENS = 32  # new tokens per request of every row
SAMPLES = {"temperature": 0.8, "top_k": 40}  # every row samples alike: the server's, the reference's, the peers'
READY_S = 120


def random_model(vocab_size: int, model: dict | None = None) -> GPT:
    """``model`` (ModelParams fields; None: solomon/params.py's defaults) with random weights of seed 0: every row
    of the serving section, and the server process, build the same weights (``weights_digest`` checks it)."""
    torch.manual_seed(0)
    return GPT(GPTConfig.from_params(ModelParams(**(model or {})), vocab_size)).eval()


def weights_digest(model: GPT) -> str:
    """SHA256 over the model's tensors by name: the same digest is the same weights."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode() + tensor.contiguous().numpy().tobytes())
    return digest.hexdigest()


def serve_random_model(
    port: int,
    tokenizer_path: str,
    threads: int,
    model: dict | None = None,
    slots: int = Limits.slots,
    precision: str = DEFAULT_PRECISION,
) -> None:
    """The serving stack (FastAPI app, queue, worker, uvicorn) around ``random_model`` (the default size unless
    ``model`` says otherwise) computing in ``precision``: a load figure needs the default model's speed, not a
    trained run. Nothing here is verified; /v1/provenance's weights_sha256 is ``weights_digest`` (of the fp32
    weights)."""
    from datetime import UTC, datetime

    from solomon.data.tokens import load_tokenizer
    from solomon.records import WEIGHTS
    from solomon.serving.loader import Served
    from solomon.serving.precision import in_precision
    from solomon.serving.server import serve

    def load() -> Served:
        configure_torch(threads)
        tokenizer = load_tokenizer(Path(tokenizer_path))
        served_model = random_model(tokenizer.get_vocab_size(), model)
        digest = weights_digest(served_model)
        return Served(
            model=in_precision(served_model, precision),
            tokenizer=tokenizer,
            stop_id=None,  # every request generates its max_tokens
            samples={"max_new_tokens": MAX_TOKENS, **SAMPLES},
            run_id="bench-random-weights",
            manifest_sha256="0" * 64,
            files={WEIGHTS: {"sha256": digest, "verified_in": "not verified"}},
            git={},
            verified="not verified: random weights for the load figure",
            verified_utc=datetime.now(UTC).isoformat(timespec="seconds"),
            threads=threads,
            precision=precision,
        )

    serve(load, "127.0.0.1", port, Limits(slots=slots, queue=64, timeout_s=600))


def bench_tokenizer(work: Path) -> Path:
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


@contextlib.contextmanager
def random_model_server(
    tokenizer: Path,
    threads: int,
    model: dict | None = None,
    slots: int = Limits.slots,
    precision: str = DEFAULT_PRECISION,
) -> Iterator[subprocess.Popen]:
    """A ``serve_random_model`` process on a free loopback port (``process.port``), ready (/readyz 200) within
    ``READY_S``; stopped (SIGTERM, drained) on the way out."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code = "from lab.bench.serving import serve_random_model as s; s({}, {!r}, {}, {!r}, {}, {!r})"
    server = subprocess.Popen(
        [sys.executable, "-c", code.format(port, str(tokenizer), threads, model, slots, precision)],
        env=lab_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    server.port = port
    try:
        deadline = time.monotonic() + READY_S
        while True:
            if server.poll() is not None:
                raise SolomonError(f"the bench server exited: {last_line(server.stderr.read())}")
            with contextlib.suppress(OSError):
                if ask(port, "/readyz")[0] == 200:
                    break
            if time.monotonic() > deadline:
                raise SolomonError(f"the bench server was not ready within {READY_S} s")
            time.sleep(0.1)
        yield server
    finally:
        server.terminate()
        server.wait(timeout=60)


def served_weights(port: int) -> str:
    return ask(port, "/v1/provenance")[1]["weights_sha256"]


def decode_batch_sizes(port: int) -> list[int]:
    """The decode batch sizes the server's engine kept at its start-up check."""
    return ask(port, "/v1/provenance")[1]["decode_batch_sizes"]


def stream_completion(connection: http.client.HTTPConnection, max_tokens: int, seed: int) -> tuple[float, float, int]:
    """One streamed completion over ``connection`` (kept open for the next one, as OpenAI's client keeps its
    connections): (seconds to the first chunk carrying text, seconds to ``data: [DONE]``, new tokens);
    SolomonError when it fails. A choice that ends by ``length`` generated ``max_tokens`` (the bench model has no
    stop token)."""
    body = {"prompt": PROMPT, "max_tokens": max_tokens, "seed": seed, "stream": True, **SAMPLES}
    started = time.perf_counter()
    connection.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    answer = connection.getresponse()
    if answer.status != 200:
        raise SolomonError(f"HTTP {answer.status}: {answer.read()[:200]!r}")
    first, finish = None, None
    while line := answer.readline():
        if not line.startswith(b"data: "):
            continue
        if line.strip() == b"data: [DONE]":
            done = time.perf_counter() - started
            answer.read()  # the body's end, so that the connection can carry the next request
            break
        choice = json.loads(line[6:]).get("choices", [{}])[0]
        if choice.get("text") and first is None:
            first = time.perf_counter() - started
        finish = choice.get("finish_reason") or finish
    else:
        raise SolomonError("the stream ended before data: [DONE]")
    if finish != "length" or first is None:
        raise SolomonError(f"the completion ended by {finish!r}, not by length, or carried no text")
    return first, done, max_tokens


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(share * len(ordered)) - 1))]


def engine_load(port: int, clients: int, requests_per_client: int, max_tokens: int) -> dict:
    """``clients`` closed-loop clients, each streaming ``requests_per_client`` completions one after another over
    one kept-open connection."""
    first_chunks, latencies, tokens, errors = [], [], [], []

    def client(index: int) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        try:
            for n in range(requests_per_client):
                try:
                    first, latency, new = stream_completion(connection, max_tokens, seed=index * 1000 + n)
                except (OSError, http.client.HTTPException, ValueError, SolomonError) as exc:
                    errors.append(str(exc))
                    connection.close()  # a fresh connection for the next request
                    continue
                first_chunks.append(first)
                latencies.append(latency)
                tokens.append(new)
        finally:
            connection.close()

    workers = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    started = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    wall = time.perf_counter() - started
    done = latencies or [0.0]
    return {
        "batch": clients,
        "requests": len(latencies) + len(errors),
        "wall_s": round(wall, 3),
        "requests_per_s": round(len(latencies) / wall, 3),
        "tokens_per_s": round(sum(tokens) / wall, 1),
        "p50_latency_s": round(percentile(done, 0.5), 4),
        "p95_latency_s": round(percentile(done, 0.95), 4),
        "ttft_p50_s": round(percentile(first_chunks or [0.0], 0.5), 4),
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
    }
