"""A GPT-style decoder-only Transformer: pre-LayerNorm blocks, causal scaled-dot-product attention, tied
input/output embeddings. Plain PyTorch, after nanoGPT's model.py; it knows nothing of files or pipelines."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from solomon.model.linear_cross_entropy import linear_cross_entropy
from solomon.params import ModelParams


@dataclass(frozen=True)
class GPTConfig:
    """The architecture, as config.json stores it (these fields, in this order). The pipeline's sizes come from
    params.yaml through ``from_params``; a bare config names its sizes, and its switches default to off."""

    vocab_size: int
    block_size: int
    n_layer: int
    n_head: int
    n_embd: int
    dropout: float = 0.0
    bias: bool = False

    @classmethod
    def from_params(cls, params: ModelParams, vocab_size: int) -> GPTConfig:
        return cls(vocab_size=vocab_size, **params.model_dump())

    def to_dict(self) -> dict:
        return asdict(self)


class Dropout(nn.Module):
    """``nn.Dropout`` with a cheaper mask: each element draws a 16-bit slice of a full-range 64-bit random word,
    four elements per draw of the CPU generator instead of one (``bernoulli_`` was 17 % of a bf16 step; this is
    7x cheaper). The same generator, so its state in the checkpoint still makes a resume exact. The drop
    probability is p rounded to a multiple of 1/65536, and the kept values are scaled by its exact inverse."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p
        self.threshold = round(p * 65536)  # drop when the slice, read as unsigned, is below this

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.threshold == 0:
            return x
        n = x.numel()
        words = torch.empty((n + 3) // 4, dtype=torch.int64).random_(-(2**63), 2**63 - 1)
        keep = words.view(torch.int16)[:n].view(x.shape) >= self.threshold - 32768  # signed view of the slice
        return (x * keep).mul_(65536 / (65536 - self.threshold))


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.n_head = config.n_head
        self.qkv = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.resid_dropout = Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, time, channels = x.shape
        q, k, v = self.qkv(x).split(channels, dim=2)
        # (B, T, C) -> (B, heads, T, head_dim)
        q, k, v = (t.view(batch, time, self.n_head, channels // self.n_head).transpose(1, 2) for t in (q, k, v))
        # No dropout on the attention probabilities: on CPU a mask there forces SDPA off its fused kernel and made
        # bf16 training 36 % slower (measured, 6L/384); embedding and residual dropout regularise instead.
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(batch, time, channels)
        return self.resid_dropout(self.proj(y))


class MLP(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.proj(F.gelu(self.fc(x))))


class Block(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.drop = Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # tied embeddings
        self.apply(self._init_weights)
        # GPT-2: scale residual projections by 1/sqrt(2 * n_layer) so the residual stream's variance stays put.
        for name, param in self.named_parameters():
            if name.endswith("proj.weight"):
                nn.init.normal_(param, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def num_params(self, non_embedding: bool = True) -> int:
        total = sum(p.numel() for p in self.parameters())
        return total - self.wpe.weight.numel() if non_embedding else total

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None, label_smoothing: float = 0.0
    ) -> torch.Tensor:
        """Logits (B, T, vocab) for token ids ``idx`` (B, T); with ``targets`` (B, T), their summed
        cross-entropy instead (fp32 scalar), without ever holding the whole batch's logits."""
        time = idx.size(1)
        if time > self.config.block_size:
            raise ValueError(f"sequence of {time} tokens exceeds block_size {self.config.block_size}")
        pos = torch.arange(time, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.blocks:
            x = block(x)
        x = self.ln_f(x)
        if targets is None:
            return self.lm_head(x)
        hidden = x.reshape(-1, x.size(-1))
        return linear_cross_entropy(hidden, self.lm_head.weight, targets.reshape(-1), label_smoothing)
