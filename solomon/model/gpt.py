"""A decoder-only Transformer: pre-norm blocks, causal scaled-dot-product attention, tied input/output embeddings.
Plain PyTorch, after nanoGPT's model.py; it knows nothing of files or pipelines.

Two block families (solomon/families.py says what each one is; params.yaml's default is ``llama``). ``gpt2`` is
GPT-2's architecture: LayerNorm, learned positions, an exact-GELU MLP; three options change it: rotary position
embeddings on queries and keys (RoFormer; GPT-NeoX's rotate-half pairing), RMS-normalised queries and keys (QK-norm,
without a gain) and a squared-ReLU MLP (Primer). ``llama`` is the layout of Llama and Qwen3: RMSNorm with a gain, rotary
positions, a SwiGLU MLP, no biases, and with ``qk_norm`` each head's queries and keys RMS-normalised with a gain of
their own (Qwen3)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import get_args

import torch
import torch.nn as nn
import torch.nn.functional as F

from solomon.families import FAMILIES, Family
from solomon.model.linear_cross_entropy import linear_cross_entropy
from solomon.params import ModelParams, with_family_defaults

# The architecture options and their values are ModelParams' (one declaration); off is GPT-2's value.
OPTIONS = ("position", "qk_norm", "activation", "family", "value_embeddings", "logit_softcap")
OFF = {
    "position": "learned",
    "qk_norm": False,
    "activation": "gelu",
    "family": "gpt2",
    "value_embeddings": 0,
    "logit_softcap": None,
}


def _values(annotation: object) -> tuple[str, ...]:
    """The strings of a ``Literal`` (or an optional one)."""
    return tuple(a for arg in get_args(annotation) for a in (get_args(arg) or (arg,)) if isinstance(a, str))


# The block families are families.py's entries (params' Literal lists the same names: a test holds them equal).
CHOICES = {name: _values(ModelParams.model_fields[name].annotation) for name in ("position", "activation")}
ROPE_BASE = 10000.0  # RoFormer's and GPT-NeoX's base wavelength
RMS_EPS = 1e-6  # the llama family's RMSNorm epsilon (Qwen3's)


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
    position: str = OFF["position"]
    qk_norm: bool = OFF["qk_norm"]
    activation: str = OFF["activation"]
    family: str = OFF["family"]
    value_embeddings: int = OFF["value_embeddings"]
    logit_softcap: float | None = OFF["logit_softcap"]

    def __post_init__(self) -> None:
        for name, allowed in (*CHOICES.items(), ("family", tuple(FAMILIES))):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} {getattr(self, name)!r} is not one of {', '.join(allowed)}")

    @property
    def options(self) -> dict[str, object]:
        """The architecture options that are on (GPT-2 has none of them), by name: {} for GPT-2's architecture."""
        return {name: getattr(self, name) for name, off in OFF.items() if getattr(self, name) != off}

    @property
    def spec(self) -> Family:
        """The family's entry (solomon/families.py): its norms, its QK-norm's gain, its layouts."""
        return FAMILIES[self.family]

    @property
    def mlp_hidden(self) -> int:
        """The MLP's hidden width: 4 × n_embd, or for SwiGLU 8/3 × n_embd rounded up to a multiple of 64 (the same
        parameter count in three matrices as GELU's in two, where 8/3 × n_embd is a multiple of 64)."""
        if self.activation == "swiglu":
            return -(-8 * self.n_embd // (3 * 64)) * 64
        return 4 * self.n_embd

    @classmethod
    def from_params(cls, params: ModelParams, vocab_size: int) -> GPTConfig:
        """The config of ``params``, an option left null resolved to its family's value."""
        return cls(vocab_size=vocab_size, **with_family_defaults(params.model_dump()))

    def to_dict(self) -> dict:
        """The config as config.json stores it: an option only when on, so a GPT-2 model's config keeps the bytes
        it had before the options existed."""
        on = self.options
        return {name: value for name, value in asdict(self).items() if name not in OFF or name in on}


def softcap(logits: torch.Tensor, cap: float) -> torch.Tensor:
    """``cap · tanh(logits / cap)`` computed in fp32 (the fused loss computes it so too), returned as fp32."""
    return torch.tanh(logits.float() / cap) * cap


class Rotary(nn.Module):
    """Rotary position embeddings: each head's channel i is paired with channel i + head_dim/2 and the pair rotated
    by position × base^(-2i/head_dim). The angles' cosines and sines are computed once in fp32 (not saved: they
    follow from the config) and cast to the queries' dtype at use."""

    def __init__(self, head_dim: int, block_size: int) -> None:
        super().__init__()
        inv_freq = ROPE_BASE ** -(torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
        angles = torch.outer(torch.arange(block_size, dtype=torch.float64), inv_freq)
        self.register_buffer("cos", angles.cos().float(), persistent=False)
        self.register_buffer("sin", angles.sin().float(), persistent=False)

    def forward(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(cos, sin) at ``positions`` (T,) or (B, 1), shaped to broadcast over (B, heads, T, head_dim / 2)."""
        return self.cos[positions].unsqueeze(-3), self.sin[positions].unsqueeze(-3)


def rotate(x: torch.Tensor, rotation: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """``x`` (B, heads, T, head_dim) rotated pairwise by ``rotation`` (``Rotary``'s output)."""
    cos, sin = (t.to(x.dtype) for t in rotation)
    first, second = x.chunk(2, dim=-1)
    return torch.cat((first * cos - second * sin, second * cos + first * sin), dim=-1)


def rms_norm_as(x: torch.Tensor, norm: nn.RMSNorm) -> torch.Tensor:
    """``norm(x)`` with its gain cast to ``x``'s dtype: under bf16 autocast the queries and keys are bf16, and a
    float32 gain sends ``rms_norm`` down its unfused path (several passes each way)."""
    assert norm.weight is not None and isinstance(norm.eps, float)
    return F.rms_norm(x, norm.normalized_shape, norm.weight.to(x.dtype), norm.eps)


class Dropout(nn.Module):
    """``nn.Dropout`` with a cheaper mask: each element draws a 16-bit slice of a full-range 64-bit random word,
    four elements per draw of the CPU generator instead of one (``bernoulli_``'s masks were a visible share of a
    bf16 step: docs/performance.md). The same generator, so its state in the checkpoint still makes a resume exact.
    The drop probability is p rounded to a multiple of 1/65536, and the kept values are scaled by its exact
    inverse."""

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


Attend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    # No dropout on the attention probabilities: on CPU a mask there forces SDPA off its fused kernel, which slows
    # bf16 training (docs/performance.md); embedding and residual dropout regularise instead.
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.n_head = config.n_head
        self.qk_norm = config.qk_norm
        head_dim = config.n_embd // config.n_head
        # a family's QK-norm may have a gain per channel of a head (Qwen3's q_norm, k_norm; GPT-2's has none)
        self.q_norm = nn.RMSNorm(head_dim, eps=RMS_EPS) if config.qk_norm and config.spec.qk_gain else None
        self.k_norm = nn.RMSNorm(head_dim, eps=RMS_EPS) if config.qk_norm and config.spec.qk_gain else None
        self.qkv = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.resid_dropout = Dropout(config.dropout)

    def heads(
        self,
        x: torch.Tensor,
        rotation: tuple[torch.Tensor, torch.Tensor] | None,
        value_embedding: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k, v of ``x`` (B, T, C) as (B, heads, T, head_dim), queries and keys normalised and rotated where the
        config says, ``value_embedding`` (B, T, C) added to the values (the KV cache calls this too, so cached keys
        and values are exactly the ones training attends to)."""
        batch, time, channels = x.shape
        q, k, v = self.qkv(x).split(channels, dim=2)
        if value_embedding is not None:
            v = v + value_embedding.to(v.dtype)
        q, k, v = (t.view(batch, time, self.n_head, channels // self.n_head).transpose(1, 2) for t in (q, k, v))
        if self.q_norm is not None and self.k_norm is not None:
            q, k = rms_norm_as(q, self.q_norm), rms_norm_as(k, self.k_norm)
        elif self.qk_norm:
            q, k = F.rms_norm(q, q.shape[-1:]), F.rms_norm(k, k.shape[-1:])
        if rotation is not None:
            q, k = rotate(q, rotation), rotate(k, rotation)
        return q, k, v

    def forward(
        self,
        x: torch.Tensor,
        rotation: tuple[torch.Tensor, torch.Tensor] | None = None,
        value_embedding: torch.Tensor | None = None,
        attend: Attend | None = None,
    ) -> torch.Tensor:
        """``attend`` maps the heads' q, k, v to their output: causal attention over ``x`` itself unless given (the
        KV cache passes one that stores k and v and attends over the cached past)."""
        batch, time, channels = x.shape
        q, k, v = self.heads(x, rotation, value_embedding)
        y = (attend or causal_attention)(q, k, v)
        y = y.transpose(1, 2).contiguous().view(batch, time, channels)
        return self.resid_dropout(self.proj(y))


class MLP(nn.Module):
    """fc, the nonlinearity, proj. For SwiGLU ``fc`` holds the gate's rows then the up-projection's (one GEMM for
    both): ``silu(gate) * up``."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.activation = config.activation
        hidden = config.mlp_hidden
        self.fc = nn.Linear(config.n_embd, 2 * hidden if self.activation == "swiglu" else hidden, bias=config.bias)
        self.proj = nn.Linear(hidden, config.n_embd, bias=config.bias)
        self.dropout = Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.fc(x)
        if self.activation == "swiglu":
            gate, up = hidden.chunk(2, dim=-1)
            hidden = F.silu(gate) * up
        else:
            hidden = F.relu(hidden).square() if self.activation == "relu2" else F.gelu(hidden)
        return self.dropout(self.proj(hidden))


def norm(config: GPTConfig) -> nn.Module:
    """The family's normalisation of the residual stream: RMSNorm with a gain where its entry says, else LayerNorm."""
    if config.spec.rms_norm:
        return nn.RMSNorm(config.n_embd, eps=RMS_EPS)
    return nn.LayerNorm(config.n_embd, bias=config.bias)


class Block(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = norm(config)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = norm(config)
        self.mlp = MLP(config)

    def forward(
        self,
        x: torch.Tensor,
        rotation: tuple[torch.Tensor, torch.Tensor] | None = None,
        value_embedding: torch.Tensor | None = None,
        attend: Attend | None = None,
    ) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), rotation, value_embedding, attend)
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        rotary = config.position == "rotary"
        self.wpe = None if rotary else nn.Embedding(config.block_size, config.n_embd)
        self.rotary = Rotary(config.n_embd // config.n_head, config.block_size) if rotary else None
        self.drop = Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = norm(config)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # tied embeddings
        # Outside the blocks, so the optimiser treats them as the embeddings they are (AdamW, not Muon).
        self.value_embeds = nn.ModuleList(
            nn.Embedding(config.vocab_size, config.n_embd) for _ in range(config.value_embeddings)
        )
        self.apply(self._init_weights)
        for table in self.value_embeds:  # zero: a model with them starts as the model without them
            nn.init.zeros_(table.weight)
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
        return total - self.wpe.weight.numel() if non_embedding and self.wpe is not None else total

    def embed(self, idx: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """The residual stream's input for tokens ``idx`` at ``positions`` (before dropout)."""
        x = self.wte(idx)
        return x if self.wpe is None else x + self.wpe(positions)

    def value_embedding(self, layer: int, idx: torch.Tensor) -> torch.Tensor | None:
        """What block ``layer`` adds to its attention values for tokens ``idx`` (None: nothing)."""
        return self.value_embeds[layer](idx) if layer < len(self.value_embeds) else None

    def rotation(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
        """What the blocks rotate queries and keys by at ``positions`` (None: learned positions, no rotation)."""
        return None if self.rotary is None else self.rotary(positions)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """The output logits of final hidden states ``x`` (after ``ln_f``): the tied projection, soft-capped where
        the config says (every path to logits — training's loss, scoring, the KV cache — goes through here or
        computes the same)."""
        logits = self.lm_head(x)
        cap = self.config.logit_softcap
        return logits if cap is None else softcap(logits, cap)

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None, label_smoothing: float = 0.0
    ) -> torch.Tensor:
        """Logits (B, T, vocab) for token ids ``idx`` (B, T); with ``targets`` (B, T), their summed
        cross-entropy instead (fp32 scalar), without ever holding the whole batch's logits."""
        time = idx.size(1)
        if time > self.config.block_size:
            raise ValueError(f"sequence of {time} tokens exceeds block_size {self.config.block_size}")
        pos = torch.arange(time, device=idx.device)
        x = self.drop(self.embed(idx, pos))
        rotation = self.rotation(pos)
        for layer, block in enumerate(self.blocks):
            x = block(x, rotation, self.value_embedding(layer, idx))
        x = self.ln_f(x)
        if targets is None:
            return self.logits(x)
        hidden = x.reshape(-1, x.size(-1))
        return linear_cross_entropy(
            hidden, self.lm_head.weight, targets.reshape(-1), label_smoothing, self.config.logit_softcap
        )
