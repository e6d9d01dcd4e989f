"""Which weights answer: a challenge a server cannot pass by what it says, only by what it computes.

Fresh prompts, drawn from a random nonce each time (recorded answers cannot be replayed), go to the server as
greedy completions with log-probabilities. The run's verified weights compute the same greedy tokens and their
log-probabilities here, in fp32, and the verdict compares them token by token: how many were compared, how many
are equal, the largest |Δ logprob| against a tolerance set by the precision the server computes in, or the first
token where the answers leave the run's weights. A server that gives no log-probabilities is checked on its tokens
(or its text) alone, and the verdict says what that cannot tell apart.

Two shapes are read: OpenAI's ``/v1/completions`` (Solomon's server, llama.cpp's, vLLM, TGI) with its
``logprobs`` either as ``tokens``/``token_logprobs`` or as a ``content`` list, and MLflow's ``/invocations`` on the
pyfunc export (text only). A greedy choice between two tokens whose log-probabilities are within the tolerance is a
tie either side may break; the comparison of that prompt stops there and the tie is counted, not failed.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from tokenizers import Tokenizer

from solomon.model.gpt import GPT

PROMPTS = 8  # prompts per challenge
PROMPT_PIECES = 6  # vocabulary pieces a prompt is drawn from
ANSWER_TOKENS = 16  # greedy tokens asked of each prompt
# |Δ logprob| a server may show against the run's fp32 weights, by the precision it says it computes in; a wider one
# than the truth only weakens the check (docs/threat-model.md measures what each still tells apart).
TOLERANCES = {
    "fp32": (1e-4, "fp32 on both sides: kernels and batch shapes differ only in the last bits"),
    "bf16": (0.15, "the server computes in bf16 (8 bits of mantissa) and this side in fp32"),
}
_WORD_PIECE = re.compile(r" ?[A-Za-z]{2,}")


@dataclass(frozen=True)
class Challenge:
    nonce: str
    prompts: list[str]
    answer_tokens: int

    def seeds(self) -> list[int]:
        """A sampling seed per prompt, from the nonce (for servers that only answer with text)."""
        rng = np.random.default_rng(int(self.nonce, 16) + 1)
        return [int(seed) for seed in rng.integers(0, 2**31, len(self.prompts))]


@dataclass(frozen=True)
class Expected:
    """One prompt's greedy continuation under the run's weights: token ids, their texts, log-probabilities, and the
    gap from each chosen token to the runner-up (a gap within the tolerance is a tie)."""

    ids: list[int]
    texts: list[str]
    logprobs: list[float]
    gaps: list[float]
    text: str


@dataclass
class Verdict:
    mode: str  # "logprobs", "tokens", "greedy text" or "sampled text": what the server's answers allowed to compare
    tolerance: float
    why: str
    prompts: int = 0
    compared: int = 0  # tokens (or, in text mode, prompts) compared
    equal: int = 0
    ties: int = 0
    max_delta: float = 0.0
    departure: str | None = None  # the first place the answers leave the run's weights
    notes: list[str] = field(default_factory=list)

    @property
    def holds(self) -> bool:
        return self.departure is None and self.compared > 0

    def line(self) -> str:
        what = {"greedy text": "greedy texts", "sampled text": "sampled texts"}.get(self.mode, "tokens")
        figures = f"{self.equal}/{self.compared} {what} equal over {self.prompts} fresh prompts"
        if self.mode == "logprobs":
            bound = "≤" if self.max_delta <= self.tolerance else ">"
            figures += f", max |Δ logprob| {self.max_delta:.2e} {bound} {self.tolerance:g} ({self.why})"
        if self.ties:
            figures += f", {self.ties} near-tie(s) stopped a prompt early"
        head = figures if self.departure is None else f"{self.departure}; {figures}"
        return "; ".join([head, *self.notes])


def draw(tokenizer: Tokenizer, nonce: str | None = None, prompts: int = PROMPTS) -> Challenge:
    """Prompts of word-like vocabulary pieces chosen by ``nonce`` (a fresh random one by default)."""
    nonce = nonce or secrets.token_hex(16)
    vocab = tokenizer.get_vocab()
    pieces = sorted(
        text for text in (tokenizer.decode([i]) for i in sorted(vocab.values())) if _WORD_PIECE.fullmatch(text)
    )
    if len(pieces) < PROMPT_PIECES:
        raise ValueError("the tokenizer has too few word-like pieces to draw a challenge from")
    rng = np.random.default_rng(int(nonce, 16))
    texts = ["".join(pieces[i] for i in rng.choice(len(pieces), PROMPT_PIECES)).strip() for _ in range(prompts)]
    return Challenge(nonce, texts, ANSWER_TOKENS)


@torch.no_grad()
def expected(model: GPT, tokenizer: Tokenizer, prompt: str, tokens: int, stop_id: int | None) -> Expected:
    """The greedy continuation of ``prompt`` by ``model`` (the whole window recomputed at each token, in fp32)."""
    ids = tokenizer.encode(prompt).ids
    new: list[int] = []
    logprobs: list[float] = []
    gaps: list[float] = []
    for _ in range(tokens):
        window = torch.tensor([(ids + new)[-model.config.block_size :]])
        scores = torch.log_softmax(model(window)[0, -1].float(), dim=-1)
        top = torch.topk(scores, 2)
        token = int(top.indices[0])
        if token == stop_id:
            break
        new.append(token)
        logprobs.append(float(top.values[0]))
        gaps.append(float(top.values[0] - top.values[1]))
    texts = [tokenizer.decode([token]) for token in new]
    return Expected(new, texts, logprobs, gaps, prompt + tokenizer.decode(new))


def token_entries(choice: dict) -> list[tuple[str, float | None]] | None:
    """A choice's (token text, logprob) pairs in either OpenAI shape; None when it carries no log-probabilities."""
    found = choice.get("logprobs")
    if not isinstance(found, dict):
        return None
    if isinstance(found.get("tokens"), list):
        return list(zip(found["tokens"], found.get("token_logprobs") or [None] * len(found["tokens"]), strict=True))
    if isinstance(found.get("content"), list):
        return [(entry.get("token"), entry.get("logprob")) for entry in found["content"]]
    return None


def compare_tokens(verdict: Verdict, index: int, want: Expected, got: list[tuple[str, float | None]]) -> None:
    """Add one prompt's tokens to ``verdict``; the first departure is kept."""
    verdict.prompts += 1
    for position in range(max(len(want.ids), len(got))):
        mine = (want.texts[position], want.logprobs[position]) if position < len(want.ids) else ("<end>", None)
        theirs = got[position] if position < len(got) else ("<end>", None)
        verdict.compared += 1
        same_token = mine[0] == theirs[0]
        delta = abs(mine[1] - theirs[1]) if same_token and None not in (mine[1], theirs[1]) else None
        if delta is not None:
            verdict.max_delta = max(verdict.max_delta, delta)
        if same_token and (delta is None or delta <= verdict.tolerance):
            verdict.equal += 1
            continue
        if not same_token and position < len(want.gaps) and want.gaps[position] <= verdict.tolerance:
            verdict.ties += 1  # either token is the greedy one within the tolerance: nothing after it compares
            return
        if verdict.departure is None:
            logprob = "" if theirs[1] is None else f" (logprob {theirs[1]:.6f})"
            verdict.departure = (
                f"prompt {index} token {position}: the server answered {theirs[0]!r}{logprob}, the run's weights "
                f"{mine[0]!r} (logprob {mine[1]:.6f})"
                if mine[1] is not None
                else f"prompt {index} token {position}: the server answered {theirs[0]!r}, the run's weights end there"
            )
        return


def check_completions(
    challenge: Challenge,
    ask: Callable[[dict], dict],
    model: GPT,
    tokenizer: Tokenizer,
    stop_id: int | None,
    precision: str = "fp32",
    tolerance: float | None = None,
) -> Verdict:
    """The challenge through an OpenAI-style ``/v1/completions`` (``ask`` posts a body and returns the answer);
    ``tolerance`` replaces the precision's own (another implementation's kernels, measured)."""
    tolerance, why = (tolerance, "given") if tolerance is not None else TOLERANCES[precision]
    verdict = Verdict("logprobs", tolerance, why)
    for index, prompt in enumerate(challenge.prompts):
        body = {"prompt": prompt, "max_tokens": challenge.answer_tokens, "temperature": 0, "logprobs": 1, "seed": 0}
        choice = ask(body)["choices"][0]
        want = expected(model, tokenizer, prompt, challenge.answer_tokens, stop_id)
        got = token_entries(choice)
        if got is None:  # no log-probabilities: the tokens are the text's, as far as the text tells
            verdict.mode = "greedy text"
            _compare_text(verdict, index, want.text[len(prompt) :], choice.get("text", ""))
            continue
        if all(logprob is None for _, logprob in got):
            verdict.mode = "tokens"
        compare_tokens(verdict, index, want, got)
    _note_mode(verdict)
    return verdict


def check_texts(
    challenge: Challenge, ask: Callable[[list[str], list[int]], list[str]], complete: Callable[[str, int], str]
) -> Verdict:
    """The challenge through a text-only endpoint of Solomon's own sampler (MLflow's ``/invocations`` on the pyfunc
    export): ``ask`` maps prompts and seeds to the texts the server samples, ``complete`` samples one here with the
    run's verified weights. Seeded sampling, not greedy: every draw depends on the whole distribution, so weights
    that agree on the likeliest token still part ways, and "same seed, same text" makes equal texts the rule."""
    verdict = Verdict("sampled text", 0.0, "seeded sampling, compared as text")
    seeds = challenge.seeds()
    for index, (prompt, seed, text) in enumerate(
        zip(challenge.prompts, seeds, ask(challenge.prompts, seeds), strict=True)
    ):
        _compare_text(verdict, index, complete(prompt, seed), text)
    verdict.notes.append(
        "text only (the server gives no log-probabilities): a change too small to move one seeded draw passes"
    )
    return verdict


def _compare_text(verdict: Verdict, index: int, want: str, got: str) -> None:
    verdict.prompts += 1
    verdict.compared += 1
    if want == got:
        verdict.equal += 1
    elif verdict.departure is None:
        at = next((i for i, (a, b) in enumerate(zip(want, got, strict=False)) if a != b), min(len(want), len(got)))
        verdict.departure = f"prompt {index}: the server's text leaves the run's weights at character {at}"


def _note_mode(verdict: Verdict) -> None:
    if verdict.mode != "logprobs":
        verdict.notes.append(
            f"{verdict.mode} only (the server gave no log-probabilities): weights that pick the same greedy tokens "
            "on these prompts, such as a close quantization or a slightly changed tensor, pass"
        )
