"""The engine's decode step compiled (``solomon serve --decode compiled``): gpt-fast's lesson, that most of a small
model's per-token time is Python and operator dispatch, not arithmetic, so one compiled graph per step wins most of
it.

It keeps the contract of ``solomon.model.kv_cache.decode`` (rows, ids, positions in; logits out; a negative
position is a padding row) with shapes that never change within a batch size, so ``torch.compile`` traces it once
per size and never again:
- attention runs over the slot's whole window (``block_size`` positions) with the positions after the row's own
  masked out, instead of over the row's own positions only;
- a padding row writes its keys and values into the cache's scratch slot (``KVCache.scratch``), which no sequence
  owns, instead of being skipped.

The logits differ from the eager step's by rounding (docs/serving.md states how much), so the same seed gives the
same text on the compiled route, and may give another than on the eager one: the route is part of the server's
provenance. Which batch sizes keep a row's bits whatever else runs is checked on the compiled step itself, as on
the eager one (``solomon.serving.engine.invariant_batch_sizes``), which also compiles every size before the first
request.
"""

from __future__ import annotations

import time

import torch
import torch._dynamo.config
import torch._inductor.config
import torch.nn.functional as F

from solomon.errors import SolomonError, first_line
from solomon.model.gpt import GPT
from solomon.model.kv_cache import KVCache

# Inductor's settings while a size compiles (set for that call only, never for the process):
COMPILER_SETTINGS = {
    # The weights become constants of the graph, so they are packed once into the GEMM kernels' own layout (which
    # the compiler cannot do with weights that are inputs); the cache stays an input.
    "freezing": True,
    # No bounds check per element where a row's cache is gathered: the indices are the engine's own slots.
    "assert_indirect_indexing": False,
}


def require_compiler() -> None:
    """Stop in one line where this route cannot run: torch's compiler package gone (the serving image drops it) or
    no C++ compiler to build its kernels with."""
    try:
        from torch._inductor import cpp_builder

        cpp_builder.get_cpp_compiler()
    except Exception as exc:  # ImportError, or the compiler's own error when it finds no C++ compiler
        raise SolomonError(
            f"--decode compiled needs torch's compiler and a C++ compiler ({first_line(exc)}): install g++ (or set "
            "CXX to one), or serve with --decode eager"
        ) from None


# The tracer's, for the same calls: every engine of a process (one per precision in the bench) compiles the same
# code again for its own model, each size a graph, past the default limit of 8; and a compile that still hits the
# limit fails rather than running eager unnoticed.
TRACER_SETTINGS = {"recompile_limit": 64, "fail_on_recompile_limit_hit": True}


class CompiledDecode:
    """``decode(model, cache, rows, ids, pos)`` for one model and cache, compiled on first use of each batch size."""

    def __init__(self, model: GPT, cache: KVCache) -> None:
        require_compiler()
        self.model, self.cache = model, cache
        self._step = torch.compile(_Step(model, cache), fullgraph=True, dynamic=False)
        self.compile_s: dict[int, float] = {}  # batch size -> seconds its first call took (the compile)

    def __call__(self, model: GPT, cache: KVCache, rows: torch.Tensor, ids: torch.Tensor, pos: torch.Tensor
                 ) -> torch.Tensor:  # fmt: skip
        if model is not self.model or cache is not self.cache:
            raise ValueError("a CompiledDecode runs the model and cache it was made for")
        padding = pos < 0
        rows, pos = torch.where(padding, cache.scratch, rows), pos.clamp(min=0)
        size = len(rows)
        if size in self.compile_s:
            with torch.no_grad():
                return self._step(rows, ids, pos)
        started = time.perf_counter()
        with (
            torch.no_grad(),
            torch._inductor.config.patch(COMPILER_SETTINGS),
            torch._dynamo.config.patch(TRACER_SETTINGS),
        ):
            logits = self._step(rows, ids, pos)
        self.compile_s[size] = time.perf_counter() - started
        return logits


class _Step(torch.nn.Module):
    """The step itself, a module so that its weights can be frozen into the compiled graph."""

    def __init__(self, model: GPT, cache: KVCache) -> None:
        super().__init__()
        self.model = model.eval().requires_grad_(False)  # inference only: frozen weights must not need gradients
        self.cache = cache  # not a module's tensors: written in place, and by the eager prefill too
        self.window = torch.arange(cache.block_size)

    def forward(self, rows: torch.Tensor, ids: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        model, cache = self.model, self.cache
        positions, tokens = pos[:, None], ids[:, None]
        visible = (self.window <= positions)[:, None, None, :]  # (rows, 1, 1, block): each row's own past
        x, rotation = model.embed(tokens, positions), model.rotation(positions)
        for layer, block in enumerate(model.blocks):

            def store_then_attend(
                q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: int = layer
            ) -> torch.Tensor:
                keys, values = cache.k[layer], cache.v[layer]
                keys[rows, :, pos] = k[:, :, 0]
                values[rows, :, pos] = v[:, :, 0]
                return F.scaled_dot_product_attention(q, keys[rows], values[rows], attn_mask=visible)

            x = block(x, rotation, model.value_embedding(layer, tokens), store_then_attend)
        return model.logits(model.ln_f(x))[:, 0]
