"""Text generation with temperature and top-k, driven by an explicit ``torch.Generator`` so that sampling
never touches (or is touched by) the training random state."""

from __future__ import annotations

import torch

from solomon.model.gpt import GPT


@torch.no_grad()
def generate(
    model: GPT,
    prompt_ids: list[int],
    max_new_tokens: int,
    temperature: float,
    top_k: int | None,
    generator: torch.Generator,
    stop_id: int | None = None,
) -> list[int]:
    """Token ids after ``prompt_ids`` (the prompt itself not included), ending early at ``stop_id``."""
    was_training = model.training
    model.eval()
    idx = torch.tensor([prompt_ids], dtype=torch.long)
    new: list[int] = []
    for _ in range(max_new_tokens):
        logits = model(idx[:, -model.config.block_size :])[0, -1].float() / temperature
        if top_k is not None:
            kth = torch.topk(logits, min(top_k, logits.numel())).values[-1]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        next_id = int(torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=generator))
        if next_id == stop_id:
            break
        new.append(next_id)
        idx = torch.cat([idx, torch.tensor([[next_id]])], dim=1)
    model.train(was_training)
    return new
