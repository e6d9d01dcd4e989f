"""A completion in the engine, heard on the event loop: its choices submitted as sequences (prompt-major, each prompt's
choice j seeded with seed + j), each token's text handed over from the engine's thread, and the answer as one JSON
body or as server-sent events in OpenAI's streamed completions format, ending with ``data: [DONE]``.

Hand-overs are coalesced twice, since at 16 streams each decode step draws 16 tokens: one wake-up of the event
loop carries every event the engine posted since the last (``Handoff``), and a stream sends the pieces of one
choice that queued up meanwhile as one chunk (their texts and log-probability entries joined). Neither changes
a stream's text: only how it is cut into chunks.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable

from solomon.serving.choices import Choice, body, chunk, usage_chunk
from solomon.serving.completions import Job
from solomon.serving.engine import Engine, Sequence
from solomon.serving.loader import Served

ENDED = ("stop", "length")  # a choice's finish reasons that are not failures


class Handoff:
    """Calls from the engine's thread run on the event loop, many to a wake-up: the first call posted since the
    loop last ran them schedules the run; the others join it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop, self.lock, self.calls = loop, threading.Lock(), []

    def post(self, call: Callable[[], None]) -> None:
        """From any thread: ``call`` runs on the loop soon, in posting order."""
        with self.lock:
            self.calls.append(call)
            if len(self.calls) > 1:
                return
        with contextlib.suppress(RuntimeError):  # the loop is gone: nobody is listening
            self.loop.call_soon_threadsafe(self._run)

    def _run(self) -> None:
        with self.lock:
            calls, self.calls = self.calls, []
        for call in calls:  # each on its own, as the loop runs its callbacks: one that raises loses no other's
            try:
                call()
            except Exception as exc:
                self.loop.call_exception_handler(
                    {"message": "a call handed over by the engine failed", "exception": exc}
                )


class Running:
    def __init__(
        self,
        engine: Engine,
        handoff: Handoff,
        served: Served,
        job: Job,
        arrived: float,
        timeout_s: float,
        on_finish: Callable[[], None],
        on_token: Callable[[float, bool], None],
    ):
        """Submit ``job``'s choices to ``engine`` (each due ``timeout_s`` after ``arrived``, time.monotonic());
        ``on_finish`` runs on the event loop (through ``handoff``) as each one finishes, ``on_token`` on the
        engine's thread as each token is drawn, with the seconds since the choice's previous token (since
        ``arrived``: the first)."""
        self.served, self.job = served, job
        self.id, self.created = f"cmpl-{uuid.uuid4().hex}", int(time.time())
        self.choices = [Choice(served, job, index) for index in range(job.sequences)]
        self.events: asyncio.Queue = asyncio.Queue()

        def send(event: tuple, finished: bool = False) -> None:  # on the engine's thread
            handoff.post(lambda: self._hear(event, finished, on_finish))

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
            choice.finish = reason if reason in ENDED else None
            send((choice.index, *choice.take(final=True), reason), finished=True)

        return Sequence(
            choice.prompt_ids, job.max_tokens, job.temperature, job.top_k, job.seed_of(choice.index), token, finish,
            top_p=job.top_p, stop_id=self.served.stop_id, deadline=deadline,
            on_prompt=choice.prompt if job.echo and job.logprobs is not None else None,
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
        return next((reason for reason in reasons if reason not in ENDED), "ok")

    def body(self) -> dict:
        return body(self.served, self.job, self.choices, self.id, self.created)

    async def stream(self, failure: Callable[[str], dict]) -> AsyncIterator[str]:
        """Server-sent events: a chunk per piece of text (and its log-probabilities), a last one per choice with
        its finish_reason; a choice that times out or fails sends ``failure(reason)``'s error body instead. The
        pieces that queued up while the last chunk was sent go out joined (``joined``)."""
        try:
            finished = 0
            while finished < len(self.choices):
                ready = [await self.events.get()]
                while not self.events.empty():
                    ready.append(self.events.get_nowait())
                for index, text, logprobs, reason in joined(ready):
                    finished += reason is not None
                    if reason is None or reason in ENDED:
                        if text or (logprobs and logprobs["tokens"]) or reason:
                            data = chunk(self.served, self.id, self.created, index, text, logprobs, reason)
                            yield f"data: {json.dumps(data)}\n\n"
                    else:
                        yield f"data: {json.dumps(failure(reason))}\n\n"
            if self.job.include_usage:
                data = usage_chunk(self.served, self.job, self.choices, self.id, self.created)
                yield f"data: {json.dumps(data)}\n\n"
            yield "data: [DONE]\n\n"
        finally:
            self.cancel()  # a client gone mid-stream: its slots go back at the next step


def joined(events: list[tuple]) -> list[tuple]:
    """``events`` (choice index, text, log-probability entries or None, finish reason or None) with each run of
    one choice's consecutive pieces joined into one, up to the piece that ends the choice; a failure stays a
    piece of its own (its error body replaces no text)."""
    pieces: list[tuple] = []
    for index, text, logprobs, reason in events:
        if pieces and pieces[-1][0] == index and pieces[-1][3] is None and reason in (None, *ENDED):
            _, before, before_logprobs, _ = pieces[-1]
            if before_logprobs is not None:
                logprobs = {key: before_logprobs[key] + logprobs[key] for key in before_logprobs}
            pieces[-1] = (index, before + text, logprobs, reason)
        else:
            pieces.append((index, text, logprobs, reason))
    return pieces
