"""A completion's choices as they grow, token by token on the engine's thread: the text (cut at the first stop
string), its log-probabilities in OpenAI's completions shape, what a stream may send so far, and the JSON bodies.

Log-probabilities are the model's own (``log_softmax`` of its logits, before temperature, top-k or top-p). A
stream holds back a tail that could still become a stop string, or an incomplete UTF-8 character, so the chunks'
texts add up to the text the same request gets without ``stream``.
"""

from __future__ import annotations

import torch

from solomon.serving.completions import Job
from solomon.serving.loader import Served


class Choice:
    def __init__(self, served: Served, job: Job, index: int) -> None:
        self.tokenizer, self.stops, self.top, self.index = served.tokenizer, job.stops, job.logprobs, index
        self.prompt_ids, self.echo = job.prompt_of(index).ids, job.echo
        self.head = job.prompt_of(index).text if job.echo else ""
        self.ids: list[int] = []
        self.text = ""  # the completion, cut at a stop string
        self.uncut = ""  # every generated token decoded
        self.finish: str | None = None
        self.logprobs = None if job.logprobs is None else {k: [] for k in ENTRIES}
        self.sent_chars = self.sent_entries = 0

    def prompt(self, logits: torch.Tensor) -> None:
        """The echoed prompt's entries: row j of ``logits`` (the prefill window) scores the window's token j + 1."""
        if self.logprobs is None or not self.echo:
            return
        ids = self.prompt_ids
        start = len(ids) - len(logits)
        for p, token in enumerate(ids):
            offset = len(self.tokenizer.decode(ids[:p]))
            self._entry(token, logits[p - 1 - start] if p - 1 >= start else None, offset)

    def add(self, token: int, logits: torch.Tensor) -> bool:
        """Take a new token; False once the text holds a stop string."""
        offset = len(self.head) + len(self.uncut)
        self.ids.append(token)
        self.uncut = self.tokenizer.decode(self.ids)
        if self.logprobs is not None:
            self._entry(token, logits, offset)
        cut = min((self.uncut.find(stop) for stop in self.stops if stop in self.uncut), default=-1)
        self.text = self.uncut if cut < 0 else self.uncut[:cut]
        return cut < 0

    def _entry(self, token: int, logits: torch.Tensor | None, offset: int) -> None:
        self.logprobs["tokens"].append(self.tokenizer.decode([token]))
        self.logprobs["text_offset"].append(offset)
        if logits is None:  # the prompt's first token: nothing scored it
            self.logprobs["token_logprobs"].append(None)
            self.logprobs["top_logprobs"].append(None)
            return
        logprobs = torch.log_softmax(logits.float(), dim=-1)
        self.logprobs["token_logprobs"].append(float(logprobs[token]))
        top = torch.topk(logprobs, self.top) if self.top else None
        best = {} if top is None else dict(zip(top.indices.tolist(), top.values.tolist(), strict=True))
        self.logprobs["top_logprobs"].append({self.tokenizer.decode([i]): v for i, v in best.items()})

    def take(self, final: bool) -> tuple[str, dict | None]:
        """The text and log-probability entries not streamed yet; short of ``final``, minus a tail still open."""
        visible = self.head + self.text
        end = len(visible) if final else len(visible) - self._open_tail(visible)
        text, self.sent_chars = visible[self.sent_chars : max(end, self.sent_chars)], max(end, self.sent_chars)
        if self.logprobs is None:
            return text, None
        entries = {k: v[self.sent_entries :] for k, v in self.logprobs.items()}
        self.sent_entries = len(self.logprobs["tokens"])
        return text, entries

    def _open_tail(self, visible: str) -> int:
        """How many trailing characters may still change: a replacement character (bytes of a character still to
        come) and what could be the start of a stop string."""
        tail = len(visible) - len(visible.rstrip("\ufffd"))
        for stop in self.stops:
            longest = min(len(stop) - 1, len(visible))  # a prefix longer than the text cannot end it
            tail = max(tail, next((k for k in range(longest, 0, -1) if visible.endswith(stop[:k])), 0))
        return tail

    def as_dict(self) -> dict:
        return {
            "text": self.head + self.text,
            "index": self.index,
            "finish_reason": self.finish,
            "logprobs": self.logprobs,
        }


ENTRIES = ("tokens", "token_logprobs", "top_logprobs", "text_offset")


def _envelope(served: Served, completion_id: str, created: int) -> dict:
    """What every answer and every streamed chunk carries: which completion, and which run answers it."""
    return {
        "id": completion_id,
        "object": "text_completion",
        "created": created,
        "model": served.run_id,
        "system_fingerprint": served.manifest_sha256,
    }


def usage(job: Job, choices: list[Choice]) -> dict:
    prompt_tokens = sum(len(prompt.ids) for prompt in job.prompts)
    completion_tokens = sum(len(choice.ids) for choice in choices)
    total = prompt_tokens + completion_tokens
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "total_tokens": total}


def body(served: Served, job: Job, choices: list[Choice], completion_id: str, created: int) -> dict:
    return {
        **_envelope(served, completion_id, created),
        "seed": job.seed,  # not in OpenAI's schema: the seed that makes this text again
        "choices": [choice.as_dict() for choice in choices],
        "usage": usage(job, choices),
    }


def usage_chunk(served: Served, job: Job, choices: list[Choice], completion_id: str, created: int) -> dict:
    """A stream's last chunk when the client asked for ``stream_options.include_usage``: no choices, the usage."""
    return {**_envelope(served, completion_id, created), "choices": [], "usage": usage(job, choices)}


def chunk(served: Served, completion_id: str, created: int, index: int, text: str, logprobs, finish) -> dict:
    """One server-sent event's body, as OpenAI's streamed completions send it."""
    return {
        **_envelope(served, completion_id, created),
        "choices": [{"text": text, "index": index, "finish_reason": finish, "logprobs": logprobs}],
    }
