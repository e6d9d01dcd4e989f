"""Cached inference over ``GPT``'s own weights, in gpt-fast's style: a static key/value cache per slot (one slot per
sequence, each the model's whole context) and two passes that read and write it. ``GPT.forward`` is untouched: this
module runs the model's own blocks, handing each an ``attend`` that stores the keys and values and attends over the
cached past, so training never runs a line of it and the cache never re-implements a block.

- ``prefill`` runs one sequence (at most ``block_size`` tokens, positions from 0) into its slot: the operations of
  ``GPT.forward`` on that sequence, all of them on its shapes but the output layer, which runs on the last
  position only (the plain forward's logits within rounding: tests/test_engine.py).
- ``decode`` advances many slots by one token each in one batch. Which rows run is the caller's choice: a matmul's
  rounding depends on its row count, so a caller that wants a row's result independent of the other rows always
  passes the same rows (``solomon.serving.engine`` passes all of them). Attention runs per row, over that row's
  own positions only (no mask, no other row's shape).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from solomon.model.gpt import GPT, causal_attention


class KVCache:
    """Keys and values of every layer for ``slots`` sequences, and one more slot that no sequence owns (``scratch``:
    where a step of fixed shapes writes its padding rows): (slots + 1, heads, block_size, head_dim) each."""

    def __init__(self, model: GPT, slots: int) -> None:
        config = model.config
        shape = (slots + 1, config.n_head, config.block_size, config.n_embd // config.n_head)
        dtype = model.wte.weight.dtype
        self.k = [torch.zeros(shape, dtype=dtype) for _ in range(config.n_layer)]
        self.v = [torch.zeros(shape, dtype=dtype) for _ in range(config.n_layer)]
        self.slots, self.block_size = slots, config.block_size
        self.scratch = slots  # the scratch slot's index


FLASH = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
FLASH_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """One row's attention (no mask: every cached position is the row's own past): the CPU flash kernel that
    ``F.scaled_dot_product_attention`` picks for these inputs, called directly. Same kernel, same bits; without the
    public function's argument checks and kernel choice, which took a sizeable share of the per-row attention's
    time (docs/serving-performance.md, "What made the serving path fast")."""
    if q.device.type == "cpu" and q.dtype in FLASH_DTYPES:
        return FLASH(q, k, v)[0]
    return F.scaled_dot_product_attention(q, k, v)


@torch.no_grad()
def prefill(model: GPT, cache: KVCache, slot: int, ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Run ``ids`` into ``slot`` (positions 0..len-1): (the last position's logits (vocab,), the final hidden
    states (len, n_embd), for whoever wants every position's logits)."""
    time = len(ids)
    if time > cache.block_size:
        raise ValueError(f"sequence of {time} tokens exceeds block_size {cache.block_size}")
    positions, tokens = torch.arange(time), torch.tensor([ids])
    x, rotation = model.embed(tokens, positions), model.rotation(positions)
    for layer, block in enumerate(model.blocks):

        def store_then_attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: int = layer) -> torch.Tensor:
            cache.k[layer][slot, :, :time] = k[0]
            cache.v[layer][slot, :, :time] = v[0]
            return causal_attention(q, k, v)

        x = block(x, rotation, model.value_embedding(layer, tokens), store_then_attend)
    x = model.ln_f(x)
    return model.logits(x[:, -1:])[0, -1], x[0]


@torch.no_grad()
def decode(model: GPT, cache: KVCache, rows: torch.Tensor, ids: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """Logits (len(rows), vocab) of token ``ids[i]`` at position ``pos[i]`` of slot ``rows[i]``, every earlier
    position of that slot coming from the cache. A negative ``pos`` marks a padding row: its projections are
    computed (the batch's shape is the point) but it attends to nothing and is never written; its logits are
    meaningless. Attention runs row by row over that row's own positions 0..pos[i] only: its shapes, and so its
    rounding, are the row's own whatever else runs, and a step reads only the cache it needs."""
    written = pos >= 0
    into_slots, into_positions = rows[written], pos[written]  # where the live rows' keys and values go
    live = [(i, slot, p) for i, (slot, p) in enumerate(zip(rows.tolist(), pos.tolist(), strict=True)) if p >= 0]
    positions = pos.clamp(min=0)[:, None]
    tokens = ids[:, None]
    x, rotation = model.embed(tokens, positions), model.rotation(positions)
    for layer, block in enumerate(model.blocks):

        def store_then_attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: int = layer) -> torch.Tensor:
            keys, values = cache.k[layer], cache.v[layer]
            keys[into_slots, :, into_positions] = k[written, :, 0]
            values[into_slots, :, into_positions] = v[written, :, 0]
            rows_q, y = q.split(1), [torch.zeros_like(q[:1])] * len(q)  # a padding row's output stays zero
            for i, slot, p in live:
                y[i] = attend(rows_q[i], keys[slot : slot + 1, :, : p + 1], values[slot : slot + 1, :, : p + 1])
            return torch.cat(y)

        x = block(x, rotation, model.value_embedding(layer, tokens), store_then_attend)
    return model.logits(model.ln_f(x))[:, 0]
