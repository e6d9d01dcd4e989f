"""``solomon generate``: sample text from a run's model, only after its files verify against the run's manifest.

Every file it reads — the weights, model config and tokenizer (found as ``solomon verify`` finds them: workspace,
or DVC cache) and the run's ``hyperparameters.yaml`` — is checked against the manifest's SHA256 first and then
read from the very path verify hashed (``solomon.serving.loader``). Sampling settings default to the run's own
``train.samples``. Each call without a seed draws a fresh one, and the command prints the seed it used: the same
seed gives the same text again. It samples through the serving engine, one sequence among ``slots``, so a seed
gives the text `solomon serve` gives it with the same ``--slots``, ``--threads`` and ``--precision``.
"""

from __future__ import annotations

import secrets
import threading
from pathlib import Path

from solomon.errors import SolomonError
from solomon.serving.engine import Engine, Sequence
from solomon.serving.limits import DEFAULT_DECODE, DEFAULT_PRECISION, MAX_SEED, Limits
from solomon.serving.loader import Served, load_verified


def draw_seed() -> int:
    """A fresh seed from the operating system's entropy, in the server's range: a seed from either reproduces
    the same text in the other."""
    return secrets.randbelow(MAX_SEED + 1)


def generate_text(
    run_dir: Path,
    prompt: str,
    root: Path = Path("."),
    max_new_tokens: int | None = None,
    temperature: float | None = None,
    top_k: int | None = None,
    seed: int = 0,
    threads: int = 1,
    slots: int = Limits.slots,
    precision: str = DEFAULT_PRECISION,
    decode: str = DEFAULT_DECODE,
) -> str:
    served = load_verified(run_dir, root, threads=threads, precision=precision)
    if not served.tokenizer.encode(prompt).ids:
        raise SolomonError("--prompt is empty: give some text to continue")
    return Completer(served, slots, decode).complete(prompt, max_new_tokens, temperature, top_k, seed)


class Completer:
    """Text sampled through one serving engine, one call at a time, as `solomon generate` and `solomon serve` sample
    (settings left None: the run's own ``train.samples``): every path that answers with text (the MLflow pyfunc
    model too) answers through here, so one seed gives one text. The engine — its KV cache and its start-up check
    of batch sizes — is built once, for every call."""

    def __init__(self, served: Served, slots: int = Limits.slots, decode: str = DEFAULT_DECODE) -> None:
        self.served = served
        self.engine = Engine(served.model, slots, decode=decode)
        self.lock = threading.Lock()  # the engine steps one caller's sequence at a time

    def complete(
        self,
        prompt: str,
        max_new_tokens: int | None = None,
        temperature: float | None = None,
        top_k: int | None = None,
        seed: int = 0,
    ) -> str:
        served, samples = self.served, self.served.samples
        prompt_ids = served.tokenizer.encode(prompt).ids
        if not prompt_ids:
            raise SolomonError("the prompt is empty: give some text to continue")
        new_ids: list[int] = []
        sequence = Sequence(
            prompt_ids,
            max_new_tokens or samples["max_new_tokens"],
            temperature or samples["temperature"],
            top_k if top_k is not None else samples["top_k"],
            seed,
            on_token=lambda token, logits: new_ids.append(token) is None,
            on_finish=lambda reason: None,
            stop_id=served.stop_id,
        )
        with self.lock:
            self.engine.submit(sequence)
            while self.engine.busy():
                self.engine.step()
        return prompt + served.tokenizer.decode(new_ids)
