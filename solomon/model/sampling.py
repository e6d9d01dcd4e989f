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
    if top_k is not None:
        kth = torch.topk(logits, min(top_k, logits.numel())).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if top_p < 1:
        ordered, order = torch.sort(probs, descending=True)
        before = torch.cumsum(ordered, dim=-1) - ordered  # the mass of the tokens likelier than each
        cut = torch.zeros_like(probs).scatter_(0, order, (before >= top_p).to(probs.dtype)).bool()
        probs = probs.masked_fill(cut, 0.0)
    return int(torch.multinomial(probs, 1, generator=generator))


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
