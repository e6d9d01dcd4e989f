"""The HTTP API of ``solomon serve`` (FastAPI): health, readiness, provenance and OpenAI-style completions.

The model is verified and loaded on a thread of its own after the server is listening, so ``/healthz`` answers
at once and ``/readyz`` says 503 until verification and loading are done (a failure stops the server: see
``solomon.serving.server``). Generation runs on the engine's thread (``solomon.serving.engine``: ``slots``
sequences at once); sequences wait in a bounded queue for a slot and are refused with 429 and ``Retry-After``
beyond it, and a request still unfinished at its deadline gets 503. Every refusal is a JSON error shaped like
OpenAI's, naming the field. ``/openapi.json`` describes the completions request as ``CompletionRequest`` checks it,
with this server's bounds; ``/metrics`` is Prometheus's text format (``solomon.serving.metrics``).
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
from collections.abc import Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException

from solomon.errors import first_line
from solomon.serving.completions import RequestError, parse, prepare, read_body, request_schema
from solomon.serving.engine import Engine
from solomon.serving.limits import Limits
from solomon.serving.loader import Served
from solomon.serving.metrics import CONTENT_TYPE, CountRequests, Metrics
from solomon.serving.running import Handoff, Running


@dataclass
class State:
    """What the server knows of its model: None until loaded; ``error`` when loading failed."""

    served: Served | None = None
    engine: Engine | None = None
    handoff: Handoff | None = None  # the engine's thread onto the event loop (made once the loop runs)
    error: str | None = None
    image_digest: str | None = None
    pending: int = 0  # sequences waiting or in a slot (touched on the event loop only)
    mean_s: float = 1.0  # a running mean of a sequence's time in the engine, for Retry-After


def error(status: int, message: str, param: str | None = None, headers: dict | None = None) -> JSONResponse:
    kind = "invalid_request_error" if status < 500 else "server_error"
    body = {"error": {"message": message, "type": kind, "param": param, "code": status}}
    return JSONResponse(body, status_code=status, headers=headers)


def refusal(reason: str, limits: Limits) -> tuple[int, str, str | None, dict | None]:
    """Status, message, param and headers for a sequence that ended neither by "stop" nor by "length"."""
    if reason == "timeout":
        message = f"timed out: not done within this server's {limits.timeout_s:g} s; ask fewer max_tokens"
        return 503, message, "max_tokens", {"Retry-After": str(math.ceil(limits.timeout_s))}
    return 500, f"internal error: {reason.removeprefix('error: ')}", None, None


def create_app(
    load: Callable[[], Served],
    limits: Limits,
    on_failure: Callable[[str], None],
    image_digest: str | None = None,
) -> FastAPI:
    """The app; ``load`` (verify, then load) runs on a thread at start-up, ``on_failure`` gets its one-line
    refusal; ``image_digest`` is the serving image's, when the deployment passes it."""
    state = State(image_digest=image_digest)
    metrics = Metrics(
        limits.slots,
        waiting=lambda: 0 if state.engine is None else len(state.engine.waiting),
        busy=lambda: 0 if state.engine is None else state.engine.slots_busy(),
    )
    engine_thread: list[threading.Thread] = []

    def load_in_background() -> None:
        try:
            served = load()
            state.engine = Engine(served.model, limits.slots)
            engine_thread.append(threading.Thread(target=state.engine.run, name="solomon-engine", daemon=True))
            engine_thread[0].start()
            state.served = served
        except Exception as exc:  # any failure refuses to serve: one line, the server stops
            state.error = first_line(exc, limit=400)
            on_failure(state.error)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        state.handoff = Handoff(asyncio.get_running_loop())
        threading.Thread(target=load_in_background, name="solomon-verify", daemon=True).start()
        yield
        if state.engine is not None:  # every request has been answered: the engine finishes what is left
            state.engine.close()
            engine_thread[0].join()

    app = FastAPI(title="solomon", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.solomon = state

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
        return error(exc.status_code, str(exc.detail))

    @app.exception_handler(Exception)
    async def _server_error(request: Request, exc: Exception) -> JSONResponse:
        return error(500, f"internal error: {first_line(exc)}")

    def not_ready() -> JSONResponse:
        if state.error:
            return error(503, f"not serving: {state.error}")
        return error(503, "not ready: verifying and loading the model", headers={"Retry-After": "1"})

    @app.get("/healthz")
    async def healthz() -> dict:
        return {"status": "alive"}

    @app.get("/readyz")
    async def readyz():
        if state.served is None:
            return not_ready()
        served = state.served
        # in_flight: sequences waiting or in a slot; above slots + queue, 429
        load = {"in_flight": state.pending, "slots": limits.slots, "queue": limits.queue}
        return {"status": "ready", "run_id": served.run_id, "manifest_sha256": served.manifest_sha256} | load

    @app.get("/v1/provenance")
    async def provenance():
        if state.served is None:
            return not_ready()
        engine = {"decode_batch_sizes": state.engine.batch_sizes}  # those the start-up check kept (engine.py)
        return state.served.provenance() | engine | {"image_digest": state.image_digest}

    @app.get("/v1/models")
    async def models():
        if state.served is None:
            return not_ready()
        entry = {"id": state.served.run_id, "object": "model", "owned_by": "solomon"}
        return {"object": "list", "data": [entry]}

    # In the schema as plain text: a scraper (or a fuzzer) reads it like any other GET.
    @app.get("/metrics", response_class=PlainTextResponse)
    async def metrics_text():
        return Response(metrics.text(), media_type=CONTENT_TYPE)

    schema = {"required": True, "content": {"application/json": {"schema": request_schema(limits)}}}

    @app.post("/v1/completions", openapi_extra={"requestBody": schema})
    async def completions(request: Request):
        served = state.served
        if served is None:
            return not_ready()
        arrived = time.monotonic()
        try:
            job = prepare(served, parse(await read_body(request, limits.max_body_bytes)), limits)
        except RequestError as exc:
            return error(exc.status, exc.message, exc.param)
        if state.pending + job.n > limits.slots + limits.queue:
            retry = str(max(1, math.ceil(state.mean_s * (state.pending + job.n) / limits.slots)))
            ahead = max(0, state.pending - limits.slots)
            return error(
                429, f"busy: {ahead} sequences waiting for a slot; retry later", headers={"Retry-After": retry}
            )
        state.pending += job.n
        metrics.prompt_tokens.inc(len(job.prompt_ids))

        def finished() -> None:
            state.pending -= 1
            state.mean_s = 0.8 * state.mean_s + 0.2 * (time.monotonic() - arrived)

        running = Running(
            state.engine, state.handoff, served, job, arrived, limits.timeout_s, finished, metrics.generated
        )
        if job.stream:
            failure = lambda reason: json.loads(error(*refusal(reason, limits)).body)  # noqa: E731
            return StreamingResponse(running.stream(failure), media_type="text/event-stream")
        try:
            outcome = await running.outcome()
        finally:
            running.cancel()  # nothing when all are done; else (the handler cancelled) the slots go back
        if outcome != "ok":
            return error(*refusal(outcome, limits))
        return running.body()

    app.add_middleware(CountRequests, metrics=metrics, paths=frozenset(route.path for route in app.routes))
    return app
