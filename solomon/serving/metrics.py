"""What ``GET /metrics`` says, in Prometheus's text format: requests by endpoint and status, prompt and completion
tokens, the queue and the slots, time to first token and time per output token.

Each app has a registry of its own (several apps may live in one process: the tests), never the global default.
A request is counted once, by the status its response starts with: a stream is a 200 however it ends, a client
that hangs up mid-stream included; a request whose handler raised before answering is a 500. The endpoint label is
the route's path, or ``unmatched`` for a path the app has no route for (no label per unknown path). Tokens are
counted as the engine draws them: completion tokens are every generated token of every choice (so a stream's
client that hung up is counted for the tokens drawn before its slot went back); prompt tokens are a request's
``usage.prompt_tokens``, counted once it is admitted (not for a 4xx or a 429).
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4  # the text format every Prometheus scrapes
UNMATCHED = "unmatched"  # the endpoint label of a path with no route
FIRST_TOKEN_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
TOKEN_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)


class Metrics:
    def __init__(self, slots: int, waiting: Callable[[], int], busy: Callable[[], int]) -> None:
        """``waiting`` and ``busy`` are read at each scrape: sequences waiting for a slot, and slots in use."""
        self.registry = CollectorRegistry(auto_describe=True)
        into = {"registry": self.registry}
        self.requests = Counter(
            "solomon_requests", "HTTP requests answered, by endpoint and status", ["endpoint", "status"], **into
        )
        self.prompt_tokens = Counter("solomon_prompt_tokens", "prompt tokens of the admitted completions", **into)
        self.completion_tokens = Counter("solomon_completion_tokens", "tokens generated, every choice's", **into)
        Gauge("solomon_queue_depth_sequences", "sequences waiting for a free slot", **into).set_function(waiting)
        Gauge("solomon_slots_busy", "slots generating a sequence", **into).set_function(busy)
        Gauge("solomon_slots_total", "slots of the engine (--slots)", **into).set(slots)
        self.first_token = Histogram(
            "solomon_time_to_first_token_seconds",
            "from a request's arrival to a choice's first generated token",
            buckets=FIRST_TOKEN_BUCKETS,
            **into,
        )
        self.per_token = Histogram(
            "solomon_time_per_output_token_seconds",
            "between a choice's consecutive generated tokens (after the first)",
            buckets=TOKEN_BUCKETS,
            **into,
        )

    def answered(self, endpoint: str, status: int) -> None:
        self.requests.labels(endpoint=endpoint, status=str(status)).inc()

    def generated(self, seconds: float, first: bool) -> None:
        """A token drawn ``seconds`` after the choice's previous one (after the request's arrival: ``first``)."""
        (self.first_token if first else self.per_token).observe(seconds)
        self.completion_tokens.inc()

    def text(self) -> bytes:
        return generate_latest(self.registry)


class CountRequests:
    """ASGI middleware: each HTTP request counted by its route's path and the status its response starts with."""

    def __init__(self, app, metrics: Metrics, paths: frozenset[str]) -> None:
        self.app, self.metrics, self.paths = app, metrics, paths

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        endpoint = scope["path"] if scope["path"] in self.paths else UNMATCHED
        started = False

        async def counted(message) -> None:
            nonlocal started
            if message["type"] == "http.response.start" and not started:
                started = True
                self.metrics.answered(endpoint, message["status"])
            await send(message)

        try:
            await self.app(scope, receive, counted)
        except Exception:
            if not started:  # Starlette's outermost middleware answers it with a 500, outside this one
                self.metrics.answered(endpoint, 500)
            raise
