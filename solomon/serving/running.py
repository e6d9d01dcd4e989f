"""A completion in the engine, heard on the event loop: its choices submitted as sequences (choice i seeded with
seed + i), each token's text handed over from the engine's thread, and the answer as one JSON body or as
server-sent events in OpenAI's streamed completions format, ending with ``data: [DONE]``."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable

from solomon.serving.choices import Choice, body, chunk
from solomon.serving.completions import Job
from solomon.serving.engine import Engine, Sequence
from solomon.serving.loader import Served


class Running:
    def __init__(
        self,
        engine: Engine,
        served: Served,
        job: Job,
        arrived: float,
        timeout_s: float,
        on_finish: Callable[[], None],
        on_token: Callable[[float, bool], None],
    ):
        """Submit ``job``'s choices to ``engine`` (each due ``timeout_s`` after ``arrived``, time.monotonic());
        ``on_finish`` runs on the event loop as each one finishes, ``on_token`` on the engine's thread as each
        token is drawn, with the seconds since the choice's previous token (since ``arrived``: the first)."""
        self.served, self.job = served, job
        self.id, self.created = f"cmpl-{uuid.uuid4().hex}", int(time.time())
        self.choices = [Choice(served, job, index) for index in range(job.n)]
        self.events: asyncio.Queue = asyncio.Queue()
        loop = asyncio.get_running_loop()

        def send(event: tuple, finished: bool = False) -> None:  # on the engine's thread
            with contextlib.suppress(RuntimeError):  # the loop is gone: nobody is listening
                loop.call_soon_threadsafe(self._hear, event, finished, on_finish)

        due = arrived + timeout_s
        self.sequences = [self._sequence(choice, arrived, due, send, on_token) for choice in self.choices]
        for sequence in self.sequences:
            engine.submit(sequence)

    def _sequence(self, choice: Choice, arrived: float, deadline: float, send: Callable, on_token: Callable):
        job, stream = self.job, self.job.stream
        last = [arrived]

        def token(token: int, logits) -> bool:
            now = time.monotonic()
            on_token(now - last[0], not choice.ids)
            last[0] = now
            going = choice.add(token, logits)
            if stream:
                send((choice.index, *choice.take(final=False), None))
            return going

        def finish(reason: str) -> None:
            choice.finish = reason if reason in ("stop", "length") else None
            send((choice.index, *choice.take(final=True), reason), finished=True)

        return Sequence(
            job.prompt_ids, job.max_tokens, job.temperature, job.top_k, job.seed_of(choice.index), token, finish,
            top_p=job.top_p, stop_id=self.served.stop_id, deadline=deadline,
            on_prompt=(lambda logits: choice.prompt(job, logits)) if job.echo and job.logprobs is not None else None,
        )  # fmt: skip

    def _hear(self, event: tuple, finished: bool, on_finish: Callable[[], None]) -> None:
        self.events.put_nowait(event)
        if finished:
            on_finish()

    def cancel(self) -> None:
        """Free the slots at the engine's next step (the client is gone)."""
        for sequence in self.sequences:
            sequence.cancelled = True

    async def outcome(self) -> str:
        """Wait for every choice: "ok", or the first other way one ended ("timeout", "error: ...")."""
        reasons = []
        while len(reasons) < len(self.choices):
            *_, reason = await self.events.get()
            if reason is not None:
                reasons.append(reason)
        return next((reason for reason in reasons if reason not in ("stop", "length")), "ok")

    def body(self) -> dict:
        return body(self.served, self.job, self.choices, self.id, self.created)

    async def stream(self, failure: Callable[[str], dict]) -> AsyncIterator[str]:
        """Server-sent events: a chunk per piece of text (and its log-probabilities), a last one per choice with
        its finish_reason; a choice that times out or fails sends ``failure(reason)``'s error body instead."""
        try:
            finished = 0
            while finished < len(self.choices):
                index, text, logprobs, reason = await self.events.get()
                finished += reason is not None
                if reason is None or reason in ("stop", "length"):
                    if text or (logprobs and logprobs["tokens"]) or reason:
                        data = chunk(self.served, self.id, self.created, index, text, logprobs, reason)
                        yield f"data: {json.dumps(data)}\n\n"
                else:
                    yield f"data: {json.dumps(failure(reason))}\n\n"
            yield "data: [DONE]\n\n"
        finally:
            self.cancel()  # a client gone mid-stream: its slots go back at the next step
