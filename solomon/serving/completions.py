"""One completion, shaped like OpenAI's completions API: the request's schema, its check against the server's
limits (``solomon.serving.limits``), and the generation itself (one token at a time through
``solomon.model.sampling.generate``, so a seed gives the same text here as in ``solomon generate``, and stop
strings and the deadline are checked between tokens).

Supported: ``prompt`` (one string), ``max_tokens``, ``temperature`` (0 means greedy), ``top_k``, ``seed``,
``stop`` (a string or up to 4), ``n`` = 1, ``top_p`` = 1 only (nucleus sampling is not implemented: any other
value is refused), ``stream`` = false, ``model`` and ``user`` (accepted, not used). Any other field is refused.
"""

from __future__ import annotations

import secrets
import time
import uuid
from dataclasses import dataclass

import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from solomon.model.sampling import generate
from solomon.serving.limits import MAX_SEED, Limits
from solomon.serving.loader import Served

MAX_STOPS = 4


class RequestError(Exception):
    """A request the server will not run: ``param`` names the field (None for the body as a whole)."""

    def __init__(self, param: str | None, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.param, self.message, self.status = param, message, status


class TimedOut(Exception):
    """The request's deadline passed before its completion was done."""


class CompletionRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    prompt: str
    model: str | None = None
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_k: int | None = Field(None, ge=1)
    top_p: float | None = Field(None, gt=0, le=1)
    n: int = Field(1, ge=1, le=1)
    seed: int | None = Field(None, ge=0, le=MAX_SEED)
    stop: str | list[str] | None = None
    stream: bool = False
    user: str | None = None

    @field_validator("top_p")
    @classmethod
    def _no_nucleus(cls, value: float | None) -> float | None:
        if value is not None and value != 1:
            raise ValueError("nucleus sampling is not implemented: send 1 or leave it out (use top_k)")
        return value

    @field_validator("stop")
    @classmethod
    def _stops(cls, value: str | list[str] | None) -> str | list[str] | None:
        stops = [value] if isinstance(value, str) else value or []
        if len(stops) > MAX_STOPS or not all(stops):
            raise ValueError(f"at most {MAX_STOPS} stop strings, none empty")
        return value

    @field_validator("stream")
    @classmethod
    def _no_stream(cls, value: bool) -> bool:
        if value:
            raise ValueError("streaming is not implemented: send false or leave it out")
        return value


def parse(body: object) -> CompletionRequest:
    """The request, or RequestError naming the first field that is wrong."""
    if not isinstance(body, dict):
        raise RequestError(None, "the request body must be a JSON object")
    try:
        return CompletionRequest.model_validate(body)
    except ValidationError as exc:
        error = exc.errors()[0]
        param = str(error["loc"][0]) if error["loc"] else None
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            message = "unknown field (supported: " + ", ".join(CompletionRequest.model_fields) + ")"
        raise RequestError(param, f"{param}: {message}" if param else message) from None


@dataclass(frozen=True)
class Job:
    """A request checked against the model and the limits, ready for the worker."""

    prompt_ids: list[int]
    max_tokens: int
    temperature: float
    top_k: int | None
    seed: int
    stops: list[str]


def prepare(served: Served, request: CompletionRequest, limits: Limits) -> Job:
    prompt_ids = served.tokenizer.encode(request.prompt).ids
    if not prompt_ids:
        raise RequestError("prompt", "prompt: empty; give some text to continue")
    if len(prompt_ids) > limits.max_prompt_tokens:
        raise RequestError(
            "prompt", f"prompt: {len(prompt_ids)} tokens, more than this server's {limits.max_prompt_tokens}"
        )
    max_tokens = request.max_tokens or min(served.samples["max_new_tokens"], limits.max_tokens)
    if max_tokens > limits.max_tokens:
        raise RequestError("max_tokens", f"max_tokens: {max_tokens} is above this server's cap {limits.max_tokens}")
    temperature = served.samples["temperature"] if request.temperature is None else request.temperature
    top_k = served.samples["top_k"] if request.top_k is None else request.top_k
    if temperature == 0:  # greedy: only the most likely token survives top-k
        temperature, top_k = 1.0, 1
    stops = [request.stop] if isinstance(request.stop, str) else list(request.stop or [])
    seed = secrets.randbelow(MAX_SEED + 1) if request.seed is None else request.seed
    return Job(prompt_ids, max_tokens, temperature, top_k, seed, stops)


def complete(served: Served, job: Job, deadline: float) -> tuple[str, str, int]:
    """(text, finish_reason, completion tokens); raises TimedOut once ``deadline`` (time.monotonic) passes."""
    generator = torch.Generator().manual_seed(job.seed)
    ids, new = list(job.prompt_ids), []
    text, finish = "", "length"
    for _ in range(job.max_tokens):
        if time.monotonic() > deadline:
            raise TimedOut
        step = generate(served.model, ids, 1, job.temperature, job.top_k, generator, stop_id=served.stop_id)
        if not step:
            finish = "stop"
            break
        ids += step
        new += step
        text = served.tokenizer.decode(new)
        cut = min((text.find(stop) for stop in job.stops if stop in text), default=-1)
        if cut >= 0:
            text, finish = text[:cut], "stop"
            break
    return text, finish, len(new)


def response(served: Served, job: Job, text: str, finish: str, completion_tokens: int) -> dict:
    prompt_tokens = len(job.prompt_ids)
    return {
        "id": f"cmpl-{uuid.uuid4().hex}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": served.run_id,
        "system_fingerprint": served.manifest_sha256,
        "seed": job.seed,  # not in OpenAI's schema: the seed that makes this text again
        "choices": [{"text": text, "index": 0, "finish_reason": finish, "logprobs": None}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }
