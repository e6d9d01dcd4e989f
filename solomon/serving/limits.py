"""What a server accepts: its limits, each with what `solomon serve --help` says of it, the largest seed, the lowest
temperature, and the names of the variables a deployment sets.

Plain data (no torch), so the ``solomon`` command builds `serve`'s options from these fields, and their defaults
are spelled only here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MAX_SEED = 2**63 - 1  # a request's seed, and `solomon generate --seed`
# The lowest temperature above 0 a request (0 is greedy there) or `solomon generate --temperature` may ask: below
# it, a logit divided by the temperature can overflow float32 and the draw's probabilities become NaN.
MIN_TEMPERATURE = 0.01
# What a served model may compute in (solomon.serving.precision): fp32, as the evaluate stage scored it, or bf16.
PRECISIONS = ("fp32", "bf16")
DEFAULT_PRECISION = PRECISIONS[0]  # every entry point's default: the precision metrics.json was scored in
# How a decode step runs: eager PyTorch (solomon.model.kv_cache.decode), or compiled once per batch size at start-up
# (solomon.serving.compiled_decode). Text for a seed is the route's own: the route is part of the provenance.
DECODES = ("eager", "compiled")
DEFAULT_DECODE = DECODES[0]
# The deployment's variables, read by the entry point (`solomon serve`), never by the serving library:
IMAGE_DIGEST_ENV = "SOLOMON_IMAGE_DIGEST"  # the serving image's digest: an image cannot know its own
EXPECT_DIGEST_ENV = "SOLOMON_EXPECT_DIGEST"  # the manifest digest the server must find


def _limit(default: float, help: str, option: str | None = None, **bounds: float) -> Any:
    """A field of ``Limits`` with its command-line option: ``--<field-name>`` unless ``option`` names another, its
    value checked against ``bounds`` (``at_least`` or ``above``)."""
    return field(default=default, metadata={"help": help, "option": option, "bounds": bounds})


@dataclass(frozen=True)
class Limits:
    max_prompt_tokens: int = _limit(256, "the longest prompt a request may send, in tokens", at_least=1)
    max_request_tokens: int = _limit(
        4096, "the most prompt tokens one request may send, all its prompts together", at_least=1
    )
    max_tokens: int = _limit(256, "the cap on a request's max_tokens", at_least=1)
    max_body_bytes: int = _limit(64 * 1024, "the largest request body, in bytes", at_least=1)
    slots: int = _limit(16, "sequences generated at once, each in its own KV cache: the decode batch", at_least=1)
    queue: int = _limit(8, "sequences waiting for a free slot; beyond them, 429", at_least=0)
    timeout_s: float = _limit(60.0, "seconds per request, from its arrival to its last token", "--timeout", above=0)
