"""Continuous batching over a static KV cache (``solomon.model.kv_cache``): a fixed number of slots, each holding one
sequence; a new sequence is prefilled into a free slot between decode steps and joins the running batch; every
step advances every active slot by one token.

A sequence's tokens do not depend on what else is running: a decode step runs a batch of one of a few sizes, idle
rows padded, each size kept only if it gives every row bit for bit what the full ``slots`` batch gives it, and
attention runs per row over that row's own positions. A prompt of at most ``slots`` tokens (the window) is
prefilled the same way, each position a row, beside the other prompts admitted in the same step (one pass over the
weights for all of them, not one each); a longer one runs alone, on its own shapes. Which way a prompt goes
depends on its length only.
A matmul's rounding may change with its row count (on some host kinds fp32 GEMMs differ below a number of rows and
bf16 ones do not: docs/serving.md names them), so the engine checks, when it starts, on its own model, cache,
precision and threads: every power of two below ``slots`` runs random decode steps beside the full batch and is kept
only if each row, in any order, with padding or without, comes out bitwise equal (``batch_sizes``; ``"fixed"`` runs
only ``slots``, ``"load"`` exactly the active rows: faster at low load, but a row's rounding then depends on how
many others run, which tests/test_engine.py shows). Each sequence samples with its own ``torch.Generator``, seeded
by its request. Past ``block_size`` the window slides as in ``solomon.model.sampling.generate``: the slot is
recomputed over its last ``block_size`` tokens. ``decode="compiled"``: decode steps (and the prefills made of them)
run ``solomon.serving.compiled_decode``'s compiled step, checked and compiled for every size as the engine starts.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from solomon.errors import first_line
from solomon.model import kv_cache
from solomon.model.gpt import GPT
from solomon.model.kv_cache import KVCache, prefill
from solomon.model.sampling import next_token
from solomon.serving.compiled_decode import CompiledDecode
from solomon.serving.limits import DECODES, DEFAULT_DECODE

# A decode step: (model, cache, rows, ids, positions) -> logits (``solomon.model.kv_cache.decode``'s contract).
DecodeStep = Callable[[GPT, KVCache, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(eq=False)
class Sequence:
    """One sequence to generate (a request's choice), and the callbacks that hear of it on the engine's thread:
    ``on_token`` gets each new token and the logits it was drawn from, and says whether to go on (False: a stop
    string, or nobody listening); ``on_finish`` gets "stop", "length", "timeout", "cancelled" or "error: ...";
    ``on_prompt``, when set, gets the prefill window's logits (window, vocab) before the first token."""

    prompt_ids: list[int]
    max_tokens: int
    temperature: float
    top_k: int | None
    seed: int
    on_token: Callable[[int, torch.Tensor], bool]
    on_finish: Callable[[str], None]
    top_p: float = 1.0
    stop_id: int | None = None
    deadline: float = math.inf  # time.monotonic()
    on_prompt: Callable[[torch.Tensor], None] | None = None
    cancelled: bool = False  # set from any thread: the slot is freed at the next step
    ids: list[int] = field(default_factory=list)
    generated: int = 0
    generator: torch.Generator | None = None


SHAPES = ("checked", "fixed", "load")  # decode batch sizes: checked at start, always ``slots``, the load's own


class Engine:
    def __init__(self, model: GPT, slots: int, shapes: str = "checked", decode: str = DEFAULT_DECODE) -> None:
        if shapes not in SHAPES:
            raise ValueError(f"shapes {shapes!r}: use {', '.join(SHAPES)}")
        if decode not in DECODES:
            raise ValueError(f"decode {decode!r}: use {', '.join(DECODES)}")
        compiled = decode == "compiled"
        self.model = model.eval()
        self.cache = KVCache(model, slots)
        self.decode: DecodeStep = CompiledDecode(self.model, self.cache) if compiled else kv_cache.decode
        started = time.perf_counter()
        # The decode batch sizes a step may run (ascending, ``slots`` last); None: the active rows, whatever they are.
        self.batch_sizes: tuple[int, ...] | None = None
        if shapes == "checked":
            self.batch_sizes = invariant_batch_sizes(self.model, self.cache, step=self.decode)
        elif shapes == "fixed":
            self.batch_sizes = (slots,)
            if compiled:  # compiled now, not at the first request
                self.decode(self.model, self.cache, torch.zeros(slots, dtype=torch.long),
                            torch.zeros(slots, dtype=torch.long), torch.full((slots,), -1))  # fmt: skip
        # seconds the start-up took to compile the decode step and check its batch sizes (0: eager, nothing compiled)
        self.compile_s = time.perf_counter() - started if compiled else 0.0
        self.active: list[Sequence | None] = [None] * slots
        self.waiting: deque[Sequence] = deque()
        self.changed = threading.Condition()
        self.closing = False

    def compile_line(self) -> str:
        """What the start-up compiled, and how long it took: for the log."""
        sizes = ", ".join(map(str, sorted(self.decode.compile_s)))
        return f"decode step compiled for batch sizes {sizes}, {self.compile_s:.1f} s with the batch-size check"

    def submit(self, sequence: Sequence) -> None:
        with self.changed:
            self.waiting.append(sequence)
            self.changed.notify()

    def busy(self) -> bool:
        return bool(self.waiting) or any(self.active)

    def slots_busy(self) -> int:
        return sum(sequence is not None for sequence in self.active)

    def run(self) -> None:
        """The engine's thread: step while there is work, wait while there is none, return once closed and idle."""
        while True:
            with self.changed:
                self.changed.wait_for(lambda: self.busy() or self.closing)
                if not self.busy():
                    return
            try:
                self.step()
            except Exception as exc:  # fail what is running, keep serving: the next request starts clean
                for slot, sequence in enumerate(self.active):
                    if sequence is not None:
                        self._end(slot, f"error: {first_line(exc)}")

    def close(self) -> None:
        """Let ``run`` return once every submitted sequence is finished (the drain on SIGTERM)."""
        with self.changed:
            self.closing = True
            self.changed.notify()

    def step(self) -> None:
        """Admit waiting sequences into free slots and prefill them, then advance every active slot."""
        block = self.cache.block_size
        admitted = []
        for slot in range(len(self.active)):
            while self.active[slot] is None and self.waiting:
                with self.changed:
                    sequence = self.waiting.popleft()
                self.active[slot] = sequence
                if self._still_wanted(slot, sequence):
                    sequence.generator = torch.Generator().manual_seed(sequence.seed)
                    sequence.ids = list(sequence.prompt_ids)
                    admitted.append((slot, sequence))
        short = [(slot, sequence) for slot, sequence in admitted if len(sequence.ids[-block:]) <= self.cache.slots]
        for slot, sequence in admitted:
            if len(sequence.ids[-block:]) > self.cache.slots:  # a long prompt: prefilled alone, on its own shapes
                logits, hidden = prefill(self.model, self.cache, slot, sequence.ids[-block:])
                if sequence.on_prompt is not None:
                    sequence.on_prompt(self.model.logits(hidden))
                self._take(slot, sequence, logits)
        if short:
            self._prefill_together(short)
        running = [(s, q) for s, q in enumerate(self.active) if q is not None and self._still_wanted(s, q)]
        cached = [(slot, sequence) for slot, sequence in running if len(sequence.ids) <= block]
        if cached:
            rows = [(slot, len(sequence.ids) - 1, sequence.ids[-1]) for slot, sequence in cached]
            for (slot, sequence), logits in zip(cached, self._decode_rows(rows), strict=True):
                self._take(slot, sequence, logits)
        for slot, sequence in running:
            if len(sequence.ids) > block and self.active[slot] is sequence:  # the window slides: recompute it
                self._take(slot, sequence, prefill(self.model, self.cache, slot, sequence.ids[-block:])[0])

    def _prefill_together(self, admitted: list[tuple[int, Sequence]]) -> None:
        """Prefill short prompts together: each position of each window is a row (slot, position, token) of decode
        steps of at most ``slots`` rows (a checked size, idle rows padded), so one pass over the weights serves
        many prompts. A row's result is the same in any company, as a decode row's is: its matmul rows at a checked
        size, its attention over its own slot's positions up to its own (written by its chunk or an earlier one)."""
        block = self.cache.block_size
        windows = [sequence.ids[-block:] for _, sequence in admitted]
        rows = [(slot, position, token) for (slot, _), window in zip(admitted, windows, strict=True)
                for position, token in enumerate(window)]  # fmt: skip
        chunks = range(0, len(rows), self.cache.slots)
        logits = [self._decode_rows(rows[start : start + self.cache.slots]) for start in chunks]
        prompt_logits = torch.cat(logits).split([len(window) for window in windows])
        for (slot, sequence), window_logits in zip(admitted, prompt_logits, strict=True):
            if sequence.on_prompt is not None:
                sequence.on_prompt(window_logits)
            self._take(slot, sequence, window_logits[-1])

    def _decode_rows(self, rows: list[tuple[int, int, int]]) -> torch.Tensor:
        """The logits of ``rows`` (slot, position, token), at most ``slots`` of them, run as one decode step of the
        smallest batch size that holds them; the padding rows are computed, never written (position -1)."""
        slots, positions, tokens = (list(column) for column in zip(*rows, strict=True))
        padding = self.decode_batch(len(rows)) - len(rows)
        batch = (torch.tensor(column + [fill] * padding) for column, fill in ((slots, 0), (tokens, 0), (positions, -1)))
        return self.decode(self.model, self.cache, *batch)[: len(rows)]

    def decode_batch(self, active: int) -> int:
        return decode_batch(self.batch_sizes, active)

    def _still_wanted(self, slot: int, sequence: Sequence) -> bool:
        if sequence.cancelled:
            self._end(slot, "cancelled")
        elif time.monotonic() > sequence.deadline:
            self._end(slot, "timeout")
        return self.active[slot] is sequence

    def _take(self, slot: int, sequence: Sequence, logits: torch.Tensor) -> None:
        """Draw the slot's next token from ``logits``, hand it on, and free the slot when the sequence is done."""
        if sequence.max_tokens == 0:  # the prompt scored (``on_prompt``), nothing to generate
            return self._end(slot, "length")
        token = next_token(logits, sequence.temperature, sequence.top_k, sequence.generator, sequence.top_p)
        if token == sequence.stop_id:
            return self._end(slot, "stop")
        sequence.ids.append(token)
        sequence.generated += 1
        if not sequence.on_token(token, logits):
            return self._end(slot, "stop")
        if sequence.generated >= sequence.max_tokens:
            self._end(slot, "length")

    def _end(self, slot: int, reason: str) -> None:
        sequence, self.active[slot] = self.active[slot], None
        sequence.on_finish(reason)


def decode_batch(batch_sizes: tuple[int, ...] | None, active: int) -> int:
    """The rows a decode step runs when ``active`` slots decode: the smallest of ``batch_sizes`` that holds them
    (None: exactly ``active``)."""
    return active if batch_sizes is None else next(size for size in batch_sizes if size >= active)


@torch.no_grad()
def invariant_batch_sizes(
    model: GPT, cache: KVCache, trials: int = 2, step: DecodeStep = kv_cache.decode
) -> tuple[int, ...]:
    """The decode batch sizes (powers of two below ``cache.slots``, then ``cache.slots``) whose rows come out bit
    for bit as in a full batch, on random tokens, positions and cache contents: each size runs with all its rows
    live and with one live row among padding, its rows drawn from the full batch in a random order. The check
    writes into ``cache`` (call it before any sequence is admitted: a slot's positions are always written before
    they are read). ``step``: the decode step checked (the eager one, or a ``CompiledDecode``)."""
    slots, block, vocab = cache.slots, cache.block_size, model.config.vocab_size
    generator = torch.Generator().manual_seed(0)
    candidates = [size for size in (2**i for i in range(slots.bit_length())) if size < slots]
    failed: set[int] = set()
    for _ in range(trials):
        for tensor in (*cache.k, *cache.v):
            tensor.copy_(torch.randn(tensor.shape, generator=generator).to(tensor.dtype))
        ids = torch.randint(vocab, (slots,), generator=generator)
        pos = torch.randint(block, (slots,), generator=generator)
        everyone = torch.arange(slots)
        full = step(model, cache, everyone, ids, pos)
        for size in candidates:
            order = torch.randperm(slots, generator=generator)[:size]
            for live in {size, 1}:
                rows_pos = torch.cat([pos[order[:live]], torch.full((size - live,), -1)])
                logits = step(model, cache, order, ids[order], rows_pos)
                if not torch.equal(logits[:live], full[order[:live]]):
                    failed.add(size)
                step(model, cache, everyone, ids, pos)  # the full batch's own keys and values back in place
    for tensor in (*cache.k, *cache.v):
        tensor.zero_()
    return (*[size for size in candidates if size not in failed], slots)
