"""Text generation with temperature, top-k and top-p, driven by an explicit ``torch.Generator`` so that sampling
never touches (or is touched by) the training random state. ``next_token`` is the one draw: this reference loop
(the whole window through ``GPT.forward`` per token) and the serving engine both sample with it."""

from __future__ import annotations

import torch

from solomon.model.gpt import GPT


def next_token(
    logits: torch.Tensor, temperature: float, top_k: int | None, generator: torch.Generator, top_p: float = 1.0
) -> int:
    """One token id drawn from ``logits`` (vocab,): scaled by ``temperature``, cut to the ``top_k`` likeliest,
    then to the smallest set whose probability reaches ``top_p`` (nucleus; 1 keeps all)."""
    logits = logits.float() / temperature
    candidates = None  # the token id of each entry of ``probs``; None: the whole vocabulary, in order
    if top_k is not None:
        logits, candidates = torch.topk(logits, min(top_k, logits.numel()))  # likeliest first
    probs = torch.softmax(logits, dim=-1)
    if top_p < 1:
        if candidates is None:
            probs, candidates = torch.sort(probs, descending=True)
        before = torch.cumsum(probs, dim=-1) - probs  # the mass of the tokens likelier than each
        cut = before >= top_p
        cut[0] = False  # the likeliest token is always in the nucleus, even for a top_p float32 rounds to 0
        probs = probs.masked_fill(cut, 0.0)
    drawn = _draw(probs, generator)
    return drawn if candidates is None else int(candidates[drawn])


def _draw(probs: torch.Tensor, generator: torch.Generator) -> int:
    """One index drawn with probability ``probs`` (unnormalised is fine) by inverting the cumulative sum with one
    uniform number from ``generator``: exact, and cheaper than ``torch.multinomial`` over a whole vocabulary (a
    serving step draws one token per slot; docs/serving-performance.md). A token of probability 0 is never drawn:
    the first cumulative sum above the drawn mass is always a token's own rise."""
    cumulative = probs.double().cumsum(0)
    mass = torch.rand(1, generator=generator, dtype=torch.float64) * cumulative[-1]
    index = int(torch.searchsorted(cumulative, mass, right=True))
    if index >= probs.numel():  # the drawn mass rounded up to the total: the last token that can be drawn
        index = int(probs.nonzero()[-1])
    return index


@torch.no_grad()
def generate(
    model: GPT,
    prompt_ids: list[int],
    max_new_tokens: int,
    temperature: float,
    top_k: int | None,
    generator: torch.Generator,
    stop_id: int | None = None,
    top_p: float = 1.0,
) -> list[int]:
    """Token ids after ``prompt_ids`` (the prompt itself not included), ending early at ``stop_id``."""
    was_training = model.training
    model.eval()
    idx = torch.tensor([prompt_ids], dtype=torch.long)
    new: list[int] = []
    for _ in range(max_new_tokens):
        next_id = next_token(model(idx[:, -model.config.block_size :])[0, -1], temperature, top_k, generator, top_p)
        if next_id == stop_id:
            break
        new.append(next_id)
        idx = torch.cat([idx, torch.tensor([[next_id]])], dim=1)
    model.train(was_training)
    return new
