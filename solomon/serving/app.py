"""The HTTP API of ``solomon serve`` (FastAPI): health, readiness, provenance and OpenAI-style completions.

A ``Server`` owns what the routes answer from: the model, the engine and its thread, the metrics and the count of
sequences in flight. ``start`` verifies and loads the model on a thread of its own once the server is listening, so
``/healthz`` answers at once and ``/readyz`` says 503 until verification and loading are done (a failure stops the
server: see ``solomon.serving.server``); ``stop`` lets the engine finish what is left. Generation runs on the
engine's thread (``solomon.serving.engine``: ``slots`` sequences at once); sequences wait in a bounded queue for a
slot and are refused with 429 and ``Retry-After`` beyond it, and a request still unfinished at its deadline gets
503. Every refusal is a JSON error shaped like OpenAI's, naming the field. ``create_app`` routes each path to one of
the server's handlers: ``/openapi.json`` describes the completions request as ``CompletionRequest`` checks it, with
this server's bounds; ``/metrics`` is Prometheus's text format (``solomon.serving.metrics``).
"""

from __future__ import annotations

import asyncio
import json
import math
import sys
import threading
import time
from collections.abc import Callable
from contextlib import asynccontextmanager
from functools import partial

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException

from solomon.errors import first_line
from solomon.serving.completions import RequestError, job_for, parse, read_body, request_schema
from solomon.serving.engine import Engine
from solomon.serving.hooks import NO_HOOKS, Hooks
from solomon.serving.limits import DEFAULT_DECODE, Limits
from solomon.serving.loader import Served
from solomon.serving.metrics import CONTENT_TYPE, CountRequests, Metrics
from solomon.serving.running import Handoff, Running


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


class Server:
    """One model behind the HTTP API. It owns the model (``served``: None until loaded; ``error``: one line, when
    loading failed), the engine and its thread, the metrics and the sequences in flight; its async methods are the
    routes' handlers."""

    def __init__(
        self,
        load: Callable[[], Served],
        limits: Limits,
        on_failure: Callable[[str], None],
        image_digest: str | None = None,
        hooks: Hooks = NO_HOOKS,
        decode: str = DEFAULT_DECODE,
    ) -> None:
        """``load`` (verify, then load) runs on a thread at start-up, ``on_failure`` gets its one-line refusal;
        ``image_digest`` is the serving image's, when the deployment passes it; ``decode``: the engine's route
        (``limits.DECODES``)."""
        self.load, self.limits, self.on_failure, self.hooks = load, limits, on_failure, hooks
        self.image_digest, self.decode = image_digest, decode
        self.served: Served | None = None
        self.engine: Engine | None = None
        self.engine_thread: threading.Thread | None = None
        self.handoff: Handoff | None = None  # the engine's thread onto the event loop (made once the loop runs)
        self.error: str | None = None
        self.pending = 0  # sequences waiting or in a slot (touched on the event loop only)
        self.mean_s = 1.0  # a running mean of a sequence's time in the engine, for Retry-After
        self.metrics = Metrics(
            limits.slots,
            waiting=lambda: 0 if self.engine is None else len(self.engine.waiting),
            busy=lambda: 0 if self.engine is None else self.engine.slots_busy(),
        )

    def start(self) -> None:
        """On the event loop, before the first request: load the model on a thread of its own."""
        self.handoff = Handoff(asyncio.get_running_loop())
        threading.Thread(target=self._load, name="solomon-verify", daemon=True).start()

    def _load(self) -> None:
        try:
            self.hooks.before_loading()
            served = self.load()
            engine = Engine(served.model, self.limits.slots, decode=self.decode)
            if engine.compile_s:
                print(f"engine: {engine.compile_line()}", file=sys.stderr, flush=True)
            thread = threading.Thread(target=engine.run, name="solomon-engine", daemon=True)
            thread.start()
            self.engine, self.engine_thread, self.served = engine, thread, served
        except Exception as exc:  # any failure refuses to serve: one line, the server stops
            self.error = first_line(exc, limit=400)
            self.on_failure(self.error)

    def stop(self) -> None:
        """Once every request has been answered: the engine finishes what is left, and its thread ends."""
        if self.engine_thread is not None:
            self.engine.close()
            self.engine_thread.join()

    def not_ready(self) -> JSONResponse:
        if self.error:
            return error(503, f"not serving: {self.error}")
        return error(503, "not ready: verifying and loading the model", headers={"Retry-After": "1"})

    async def healthz(self) -> dict:
        return {"status": "alive"}

    async def readyz(self):
        if self.served is None:
            return self.not_ready()
        served = self.served
        # in_flight: sequences waiting or in a slot; above slots + queue, 429
        load = {"in_flight": self.pending, "slots": self.limits.slots, "queue": self.limits.queue}
        return {"status": "ready", "run_id": served.run_id, "manifest_sha256": served.manifest_sha256} | load

    async def provenance(self):
        if self.served is None:
            return self.not_ready()
        # the decode route, and the batch sizes the start-up check kept (engine.py)
        engine = {"decode": self.decode, "decode_batch_sizes": self.engine.batch_sizes}
        return self.served.provenance() | engine | {"image_digest": self.image_digest}

    async def models(self):
        if self.served is None:
            return self.not_ready()
        entry = {"id": self.served.run_id, "object": "model", "owned_by": "solomon"}
        return {"object": "list", "data": [entry]}

    async def metrics_text(self):
        return Response(self.metrics.text(), media_type=CONTENT_TYPE)

    async def completions(self, request: Request):
        served, limits = self.served, self.limits
        if served is None:
            return self.not_ready()
        arrived = time.monotonic()
        try:
            job = job_for(served, parse(await read_body(request, limits.max_body_bytes, limits.timeout_s)), limits)
        except RequestError as exc:
            return error(exc.status, exc.message, exc.param)
        if self.pending + job.sequences > limits.slots + limits.queue:
            return self.busy(job.sequences)
        self.pending += job.sequences
        self.metrics.prompt_tokens.inc(sum(len(prompt.ids) for prompt in job.prompts))
        finished = partial(self.finished, arrived)
        running = Running(
            self.engine, self.handoff, served, job, arrived, limits.timeout_s, finished, self.metrics.generated
        )
        if job.stream:
            return StreamingResponse(running.stream(self.failure_body), media_type="text/event-stream")
        try:
            outcome = await running.outcome()
        finally:
            running.cancel()  # nothing when all are done; else (the handler cancelled) the slots go back
        if outcome != "ok":
            return error(*refusal(outcome, limits))
        return running.body()

    def busy(self, n: int) -> JSONResponse:
        """429 for a request of ``n`` sequences that would overflow the slots and the queue, with a Retry-After
        from the running mean time of a sequence."""
        retry = str(max(1, math.ceil(self.mean_s * (self.pending + n) / self.limits.slots)))
        ahead = max(0, self.pending - self.limits.slots)
        return error(429, f"busy: {ahead} sequences waiting for a slot; retry later", headers={"Retry-After": retry})

    def failure_body(self, reason: str) -> dict:
        """The error a stream sends in place of a choice that timed out or failed."""
        return json.loads(error(*refusal(reason, self.limits)).body)

    def finished(self, arrived: float) -> None:
        """A sequence is done (on the event loop): one fewer in flight, and the running mean takes its time."""
        self.pending -= 1
        self.mean_s = 0.8 * self.mean_s + 0.2 * (time.monotonic() - arrived)


async def _no_chat(request: Request) -> JSONResponse:
    """Chat clients find out in one line why there is no chat here, and where to go instead."""
    return error(
        404,
        "this server has a base model, trained on plain text without chat turns: it has no /v1/chat/completions; "
        "POST /v1/completions with a prompt to continue",
    )


async def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
    return error(exc.status_code, str(exc.detail))


async def _server_error(request: Request, exc: Exception) -> JSONResponse:
    return error(500, f"internal error: {first_line(exc)}")


def create_app(server: Server) -> FastAPI:
    """The app: its lifespan starts and stops ``server``, each route is one of its handlers."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        server.start()
        yield
        server.stop()

    # redirect_slashes off: a POST to "/v1/completions/" gets a JSON 404, not a redirect with no body
    app = FastAPI(title="solomon", lifespan=lifespan, docs_url=None, redoc_url=None, redirect_slashes=False)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(Exception, _server_error)
    app.get("/healthz")(server.healthz)
    app.get("/readyz")(server.readyz)
    app.get("/v1/provenance")(server.provenance)
    app.get("/v1/models")(server.models)
    # In the schema as plain text: a scraper (or a fuzzer) reads it like any other GET.
    app.get("/metrics", response_class=PlainTextResponse)(server.metrics_text)
    schema = {"required": True, "content": {"application/json": {"schema": request_schema(server.limits)}}}
    app.post("/v1/completions", openapi_extra={"requestBody": schema})(server.completions)
    app.post("/v1/chat/completions", include_in_schema=False)(_no_chat)
    app.add_middleware(CountRequests, metrics=server.metrics, paths=frozenset(route.path for route in app.routes))
    return app
