"""A completion request, shaped like OpenAI's completions API: its schema and its check against the server's limits
(``solomon.serving.limits``), turned into the engine's sequences (``solomon.serving.engine``) and answered through
``solomon.serving.choices``. Sampling is ``solomon.model.sampling.next_token`` with a generator seeded by the
request, so a seed gives the same text here as in ``solomon generate`` with the same settings and ``--slots``.

Supported: ``prompt`` as OpenAI defines it (a string, a list of strings, a list of token ids or a list of token-id
lists; the choices prompt-major, prompt p's choice j at index p·n + j), ``max_tokens`` (0 with ``echo``: the prompt
scored, nothing generated, as OpenAI's legacy completions allowed), ``temperature`` (0 means greedy), ``top_k``,
``top_p`` (nucleus), ``seed``, ``stop`` (a string or up to 4), ``n`` (up to ``MAX_N``; each prompt's choice j uses
seed + j, so a prompt gets the text it gets alone), ``logprobs`` (the top ``MAX_LOGPROBS`` at most), ``echo`` (with
``logprobs``: every prompt token's log-probability, the first's null), ``stream`` (server-sent events),
``stream_options`` (``include_usage``: a last chunk with the usage, as OpenAI sends it), ``model`` and ``user``
(accepted, not used). Any other field is refused.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from solomon.errors import first_line
from solomon.serving.limits import MAX_SEED, MIN_TEMPERATURE, Limits
from solomon.serving.loader import Served

if TYPE_CHECKING:
    from starlette.requests import Request

MAX_STOPS = 4
MAX_STOP_CHARS = 256  # a stop string's length: each new token is checked against every prefix of each stop
MAX_N = 4  # choices per request: each takes a slot
MAX_LOGPROBS = 5  # OpenAI's cap on the top-N log-probabilities per token


class RequestError(Exception):
    """A request the server will not run: ``param`` names the field (None for the body as a whole)."""

    def __init__(self, param: str | None, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.param, self.message, self.status = param, message, status


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    include_usage: bool = False


PROMPT_SHAPES = "a string, a list of strings, a list of token ids or a list of token-id lists"


class CompletionRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    prompt: str | list[str] | list[int] | list[list[int]]
    model: str | None = None
    max_tokens: int | None = Field(None, ge=0)
    temperature: float | None = Field(None, ge=0, le=2)
    top_k: int | None = Field(None, ge=1)
    top_p: float | None = Field(None, gt=0, le=1)
    n: int = Field(1, ge=1, le=MAX_N)
    seed: int | None = Field(None, ge=0, le=MAX_SEED)
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)
    echo: bool = False
    user: str | None = None

    @field_validator("prompt", mode="before")
    @classmethod
    def _prompt_shape(cls, value: object) -> object:
        """One line naming what is wrong with the prompt's shape (pydantic's union errors name every branch)."""
        if isinstance(value, str):
            return value
        if not isinstance(value, list):
            raise ValueError(f"give {PROMPT_SHAPES}")
        if not value:
            raise ValueError("an empty list; give at least one prompt")
        kinds = [_kind(item) for item in value]
        if "other" in kinds:
            bad = kinds.index("other")
            raise ValueError(f"item {bad} is {_json_type(value[bad])}; give {PROMPT_SHAPES}")
        if len(set(kinds)) > 1:
            raise ValueError(f"a list mixes {' and '.join(sorted(set(kinds)))}; give {PROMPT_SHAPES}")
        kind = kinds[0]
        for index, item in enumerate(value if kind == "token-id lists" else []):
            if not item:
                raise ValueError(f"prompt {index} is an empty list of token ids")
            if not all(_is_int(token) for token in item):
                raise ValueError(f"prompt {index} holds something other than token ids (integers)")
        return value

    @field_validator("temperature")
    @classmethod
    def _temperature(cls, value: float | None) -> float | None:
        if value is not None and 0 < value < MIN_TEMPERATURE:
            raise ValueError(f"{value:g} is above 0 but below {MIN_TEMPERATURE:g}; 0 means greedy")
        return value

    @field_validator("stop")
    @classmethod
    def _stops(cls, value: str | list[str] | None) -> str | list[str] | None:
        stops = [value] if isinstance(value, str) else value or []
        if len(stops) > MAX_STOPS or not all(stops):
            raise ValueError(f"at most {MAX_STOPS} stop strings, none empty")
        if any(len(stop) > MAX_STOP_CHARS for stop in stops):
            raise ValueError(f"a stop string may have at most {MAX_STOP_CHARS} characters")
        return value


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _kind(item: object) -> str:
    if isinstance(item, str):
        return "strings"
    if _is_int(item):
        return "token ids"
    return "token-id lists" if isinstance(item, list) else "other"


def _json_type(value: object) -> str:
    names = {bool: "a boolean", float: "a number", dict: "an object", type(None): "null"}
    return names.get(type(value), "not a string")


def request_schema(limits: Limits) -> dict:
    """The request's JSON schema with this server's own bounds on ``max_tokens`` and ``n`` (``prepare`` refuses
    above them), so a client, or a fuzzer, reading /openapi.json knows what this server runs."""
    schema = CompletionRequest.model_json_schema()
    fields = schema["properties"]
    integer = next(kind for kind in fields["max_tokens"]["anyOf"] if kind.get("type") == "integer")
    integer["maximum"] = limits.max_tokens
    fields["n"]["maximum"] = min(MAX_N, limits.slots + limits.queue)
    return schema


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")


async def read_body(request: Request, limit: int, timeout_s: float) -> object:
    """The body as JSON: at most ``limit`` bytes, whole within ``timeout_s``, UTF-8, valid JSON; RequestError
    otherwise."""
    from starlette.requests import ClientDisconnect

    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise RequestError(None, f"request body of {declared} bytes is above this server's {limit}", 413)
    body = bytearray()

    async def receive() -> None:
        async for chunk in request.stream():
            body.extend(chunk)
            if len(body) > limit:
                raise RequestError(None, f"request body is above this server's {limit} bytes", 413)

    try:
        # a client that stops sending mid-body would hold its connection, and a shutdown, for ever
        await asyncio.wait_for(receive(), timeout_s)
    except TimeoutError:
        raise RequestError(None, f"request body not whole within this server's {timeout_s:g} s", 408) from None
    except ClientDisconnect:
        raise RequestError(None, "the client left before its request body was whole") from None
    try:
        text = bytes(body).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RequestError(None, f"request body is not UTF-8 (byte {exc.start})") from None
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except ValueError as exc:
        raise RequestError(None, f"request body is not valid JSON: {first_line(exc)}") from None
    except RecursionError:
        raise RequestError(None, "request body is JSON nested too deeply") from None


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
class Prompt:
    """One prompt of a request: its text (as given, or its token ids decoded) and its token ids."""

    text: str
    ids: list[int]


@dataclass(frozen=True)
class Job:
    """A request checked against the model and the limits, ready for the engine: ``n`` choices per prompt."""

    prompts: list[Prompt]
    max_tokens: int
    temperature: float
    top_k: int | None
    top_p: float
    seed: int
    stops: list[str]
    n: int
    logprobs: int | None
    echo: bool
    stream: bool
    include_usage: bool = False  # a stream ends with a chunk carrying the usage

    @property
    def sequences(self) -> int:
        return len(self.prompts) * self.n

    def prompt_of(self, index: int) -> Prompt:
        """Choice ``index``'s prompt: the choices are prompt-major."""
        return self.prompts[index // self.n]

    def seed_of(self, index: int) -> int:
        """Choice ``index``'s seed: the text a request with this prompt, this seed and n = 1 gets."""
        return (self.seed + index % self.n) % (MAX_SEED + 1)


def prompts_of(served: Served, prompt: str | list) -> list[Prompt]:
    """The request's prompts, each encoded (text) or checked against the vocabulary (token ids)."""
    many = isinstance(prompt, list) and not (prompt and isinstance(prompt[0], int))
    items = prompt if many else [prompt]
    vocab = served.model.config.vocab_size
    prompts = []
    for index, item in enumerate(items):
        which = f"prompt {index}: " if many else ""  # the one prompt of a request is just "prompt"
        if isinstance(item, str):
            try:  # JSON may carry a lone surrogate ("\ud800"): no text, no tokens
                item.encode("utf-8")
            except UnicodeEncodeError as exc:
                message = f"prompt: {which}not Unicode text (a lone surrogate at character {exc.start})"
                raise RequestError("prompt", message) from None
            ids = served.tokenizer.encode(item).ids
            if not ids:
                raise RequestError("prompt", f"prompt: {which}empty; give some text to continue")
            prompts.append(Prompt(item, ids))
            continue
        outside = next((token for token in item if not 0 <= token < vocab), None)
        if outside is not None:
            message = f"prompt: {which}token id {outside} is outside this model's vocabulary (0 to {vocab - 1})"
            raise RequestError("prompt", message)
        prompts.append(Prompt(served.tokenizer.decode(item, skip_special_tokens=False), list(item)))
    return prompts


def job_for(served: Served, request: CompletionRequest, limits: Limits) -> Job:
    prompts = prompts_of(served, request.prompt)
    holds = limits.slots + limits.queue
    if len(prompts) * request.n > holds:
        what = f"{len(prompts)} prompts × n {request.n}" if len(prompts) > 1 else f"n {request.n}"
        param = "prompt" if len(prompts) > 1 else "n"
        raise RequestError(param, f"{param}: {what} = {len(prompts) * request.n} sequences, more than this server "
                                  f"holds ({holds}); send fewer at once")  # fmt: skip
    block = served.model.config.block_size
    for index, prompt in enumerate(prompts):
        which = f"prompt {index} has " if len(prompts) > 1 else ""
        if len(prompt.ids) > limits.max_prompt_tokens:
            raise RequestError(
                "prompt", f"prompt: {which}{len(prompt.ids)} tokens, more than this server's {limits.max_prompt_tokens}"
            )
        if request.echo and request.logprobs is not None and len(prompt.ids) > block:
            raise RequestError(
                "prompt", f"prompt: {which}{len(prompt.ids)} tokens; echo with logprobs scores at most the "
                f"model's context ({block} tokens) at once: send it in windows"
            )  # fmt: skip
    total = sum(len(prompt.ids) for prompt in prompts)
    if total > limits.max_request_tokens:
        raise RequestError(
            "prompt", f"prompt: {total} tokens in all, more than this server's {limits.max_request_tokens} a request"
        )
    max_tokens = (
        min(served.samples["max_new_tokens"], limits.max_tokens) if request.max_tokens is None else request.max_tokens
    )
    if max_tokens > limits.max_tokens:
        raise RequestError("max_tokens", f"max_tokens: {max_tokens} is above this server's cap {limits.max_tokens}")
    if max_tokens == 0 and not request.echo:
        raise RequestError("max_tokens", "max_tokens: 0 generates nothing; with echo: true it returns the prompt "
                                         "(and, with logprobs, its log-probabilities) alone")  # fmt: skip
    temperature = served.samples["temperature"] if request.temperature is None else request.temperature
    top_k = served.samples["top_k"] if request.top_k is None else request.top_k
    if temperature == 0:  # greedy: only the most likely token survives top-k
        temperature, top_k = 1.0, 1
    if request.stream_options is not None and not request.stream:
        raise RequestError("stream_options", "stream_options: only with stream: true")
    stops = [request.stop] if isinstance(request.stop, str) else list(request.stop or [])
    seed = secrets.randbelow(MAX_SEED + 1) if request.seed is None else request.seed
    top_p = 1.0 if request.top_p is None else request.top_p
    return Job(
        prompts, max_tokens, temperature, top_k, top_p, seed, stops, request.n, request.logprobs, request.echo,
        request.stream, request.stream_options is not None and request.stream_options.include_usage,
    )  # fmt: skip
