"""Where each of Solomon's tensors goes in an exported layout: its Hugging Face name, its llama.cpp (GGUF) name, and
how it is written there.

A gpt2-family model is GPT-2's architecture (pre-LayerNorm, learned positions, exact GELU, tied embeddings), so
GPT-2's layout represents it exactly, with the biases GPT-2 has and a bias-free model has not written as zeros
(checked to be zeros). Hugging Face's GPT-2 keeps its projections in ``Conv1D``, which stores a weight as [in, out]:
the transpose of ``nn.Linear``'s [out, in]. llama.cpp's converter transposes them back, so GGUF holds Solomon's own
orientation. A llama-family model is Llama's layout (Qwen3's with QK-norm): Solomon's fused qkv and gate+up weights
are written as their row blocks (q, k, v; gate, up). GGUF's ``llama`` architecture rotates interleaved channel pairs
where Solomon (and Hugging Face's Llama) pair channel i with i + head_dim/2, so its query and key rows are permuted
as llama.cpp's converter permutes them; ``qwen3`` pairs them as Solomon does. The tied output projection is written
once, as the token embedding, everywhere.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from solomon.errors import SolomonError
from solomon.families import GPT2, LLAMA, QWEN3, Layout, layout_of
from solomon.model.gpt import OFF, GPTConfig

# The model options of either family that no exported layout has a place for (a soft cap, value embeddings).
BEYOND_LAYOUTS = ("value_embeddings", "logit_softcap")


@dataclass(frozen=True)
class Slot:
    hf: str  # the tensor's name in Hugging Face's model
    gguf: str  # the name llama.cpp's loader looks for
    source: str | None  # Solomon's tensor; None: a bias Solomon's model has not (all zeros)
    conv1d: bool = False  # Hugging Face stores it transposed
    like: str = ""  # a zero bias: the weight whose rows (output features) give its length
    rows: tuple[int, int] | None = None  # the block of the source's rows written here (a fused weight's part)
    rope_heads: int = 0  # GGUF llama: permute the rows of this many heads from rotate-half to interleaved pairs

    def zeros_length(self, state: dict) -> int:
        return state[self.like].shape[0]

    def describe(self) -> str:
        if self.source is None:
            return "all zeros (the run's model has no bias)"
        return f"the run's {self.source}" + (f" rows {self.rows[0]}-{self.rows[1] - 1}" if self.rows else "")


def _with_bias(config: GPTConfig, hf: str, gguf: str, source: str, conv1d: bool = False) -> list[Slot]:
    weight = Slot(f"{hf}.weight", f"{gguf}.weight", f"{source}.weight", conv1d=conv1d)
    bias = Slot(f"{hf}.bias", f"{gguf}.bias", f"{source}.bias" if config.bias else None, like=weight.source)
    return [weight, bias]


def slots(config: GPTConfig, gguf_llama: bool = False) -> list[Slot]:
    """Every tensor of the exported model, in its layout's order; refuses a model no layout represents.
    ``gguf_llama``: the GGUF file is of llama.cpp's ``llama`` architecture (interleaved rotary pairs)."""
    beyond = {name: getattr(config, name) for name in BEYOND_LAYOUTS if getattr(config, name) != OFF[name]}
    if beyond:
        options = ", ".join(f"model.{name}: {value:g}" for name, value in beyond.items())
        raise SolomonError(
            f"the run's model has {options}, which no Hugging Face or GGUF layout Solomon writes (GPT-2, Llama, "
            "Qwen3) carries: serve it with `solomon serve` or export --format mlflow"
        )
    written = layout_of(config.family, config.qk_norm)
    if written not in (GPT2, LLAMA, QWEN3) or (written == GPT2 and config.options):
        shown = {name: json.dumps(value).strip('"') for name, value in config.options.items()}  # as YAML writes them
        options = ", ".join(f"model.{name}: {value}" for name, value in shown.items())
        raise SolomonError(
            f"the run's model has architecture options no layout Solomon writes represents ({options}): Hugging Face "
            "and GGUF exports need a run trained without them; serve it with `solomon serve` or export --format mlflow"
        )
    return _llama_slots(config, gguf_llama) if written in (LLAMA, QWEN3) else _gpt2_slots(config)


def _gpt2_slots(config: GPTConfig) -> list[Slot]:
    layout = [
        Slot("transformer.wte.weight", "token_embd.weight", "wte.weight"),
        Slot("transformer.wpe.weight", "position_embd.weight", "wpe.weight"),
    ]
    for i in range(config.n_layer):
        hf, gguf, own = f"transformer.h.{i}", f"blk.{i}", f"blocks.{i}"
        layout += _with_bias(config, f"{hf}.ln_1", f"{gguf}.attn_norm", f"{own}.ln_1")
        layout += _with_bias(config, f"{hf}.attn.c_attn", f"{gguf}.attn_qkv", f"{own}.attn.qkv", True)
        layout += _with_bias(config, f"{hf}.attn.c_proj", f"{gguf}.attn_output", f"{own}.attn.proj", True)
        layout += _with_bias(config, f"{hf}.ln_2", f"{gguf}.ffn_norm", f"{own}.ln_2")
        layout += _with_bias(config, f"{hf}.mlp.c_fc", f"{gguf}.ffn_up", f"{own}.mlp.fc", True)
        layout += _with_bias(config, f"{hf}.mlp.c_proj", f"{gguf}.ffn_down", f"{own}.mlp.proj", True)
    return layout + _with_bias(config, "transformer.ln_f", "output_norm", "ln_f")


def layout(config: GPTConfig) -> Layout:
    """The published layout the model is written as (its family's entry, by QK-norm); refuses a model none carries."""
    found = layout_of(config.family, config.qk_norm)
    if found is None:
        raise SolomonError(
            f"the run's model (family {config.family}, model.qk_norm: {str(config.qk_norm).lower()}) has no Hugging "
            "Face or GGUF layout Solomon writes: serve it with `solomon serve` or export --format mlflow"
        )
    return found


def _llama_slots(config: GPTConfig, gguf_llama: bool) -> list[Slot]:
    d, hidden, heads = config.n_embd, config.mlp_hidden, config.n_head
    layout = [Slot("model.embed_tokens.weight", "token_embd.weight", "wte.weight")]
    for i in range(config.n_layer):
        hf, gguf, own = f"model.layers.{i}", f"blk.{i}", f"blocks.{i}"
        qkv = f"{own}.attn.qkv.weight"
        rope = heads if gguf_llama else 0
        layout += [
            Slot(f"{hf}.input_layernorm.weight", f"{gguf}.attn_norm.weight", f"{own}.ln_1.weight"),
            Slot(f"{hf}.self_attn.q_proj.weight", f"{gguf}.attn_q.weight", qkv, rows=(0, d), rope_heads=rope),
            Slot(f"{hf}.self_attn.k_proj.weight", f"{gguf}.attn_k.weight", qkv, rows=(d, 2 * d), rope_heads=rope),
            Slot(f"{hf}.self_attn.v_proj.weight", f"{gguf}.attn_v.weight", qkv, rows=(2 * d, 3 * d)),
            Slot(f"{hf}.self_attn.o_proj.weight", f"{gguf}.attn_output.weight", f"{own}.attn.proj.weight"),
        ]
        if config.qk_norm:
            layout += [
                Slot(f"{hf}.self_attn.q_norm.weight", f"{gguf}.attn_q_norm.weight", f"{own}.attn.q_norm.weight"),
                Slot(f"{hf}.self_attn.k_norm.weight", f"{gguf}.attn_k_norm.weight", f"{own}.attn.k_norm.weight"),
            ]
        fc = f"{own}.mlp.fc.weight"
        layout += [
            Slot(f"{hf}.post_attention_layernorm.weight", f"{gguf}.ffn_norm.weight", f"{own}.ln_2.weight"),
            Slot(f"{hf}.mlp.gate_proj.weight", f"{gguf}.ffn_gate.weight", fc, rows=(0, hidden)),
            Slot(f"{hf}.mlp.up_proj.weight", f"{gguf}.ffn_up.weight", fc, rows=(hidden, 2 * hidden)),
            Slot(f"{hf}.mlp.down_proj.weight", f"{gguf}.ffn_down.weight", f"{own}.mlp.proj.weight"),
        ]
    return [*layout, Slot("model.norm.weight", "output_norm.weight", "ln_f.weight")]


def interleave_pairs(weight: torch.Tensor, heads: int) -> torch.Tensor:
    """Rows of a query or key projection reordered per head from rotate-half pairs (i, i + head_dim/2) to adjacent
    pairs (2i, 2i + 1): llama.cpp's converter's ``LlamaModel.permute`` for GGUF's ``llama`` architecture."""
    rows = weight.shape[0]
    return weight.reshape(heads, 2, rows // heads // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def exported(slot: Slot, state: dict[str, torch.Tensor], hf: bool) -> torch.Tensor:
    """The tensor written for ``slot`` (``hf``: in Hugging Face's layout, else GGUF's), from the run's ``state``."""
    if slot.source is None:
        return torch.zeros(slot.zeros_length(state), dtype=state[slot.like].dtype)
    tensor = state[slot.source]
    if slot.rows is not None:
        tensor = tensor[slot.rows[0] : slot.rows[1]]
    if hf and slot.conv1d:
        tensor = tensor.t()
    if not hf and slot.rope_heads:
        tensor = interleave_pairs(tensor, slot.rope_heads)
    return tensor.contiguous()


def mismatch(slot: Slot, found: torch.Tensor, state: dict[str, torch.Tensor], hf: bool) -> str | None:
    """Why ``found`` (a tensor read back from an export) is not what the run's tensor is written as, bit for bit
    (or, for a bias Solomon has not, not all zeros); None when it is."""
    name = slot.hf if hf else slot.gguf
    back = found.contiguous()
    expected = exported(slot, state, hf)
    what = slot.describe()
    if back.dtype != expected.dtype or back.shape != expected.shape:
        return f"tensor {name}: {back.dtype} {tuple(back.shape)}, {what} is written as {expected.dtype} " + str(
            tuple(expected.shape)
        )
    if back.numel() == 0:
        return None
    left = back.reshape(-1).view(torch.uint8).reshape(back.numel(), -1)
    right = expected.reshape(-1).view(torch.uint8).reshape(expected.numel(), -1)
    differing = (left != right).any(dim=1).nonzero()
    if len(differing) == 0:
        return None
    index = tuple(int(i) for i in np.unravel_index(int(differing[0]), tuple(back.shape)))
    return f"tensor {name} is not {what} bit for bit (first difference at index {index} as written)"


def check_tensors(path: Path, found: dict[str, torch.Tensor], config: GPTConfig, state: dict[str, torch.Tensor],
                  hf: bool) -> str:  # fmt: skip
    """The tensors of an export's file ``path`` (Hugging Face's names where ``hf``, else GGUF's) against the run's
    ``state``: none added, none missing, each bit for bit; what was checked, or SolomonError naming the first."""
    written = slots(config, gguf_llama=not hf and layout(config).interleaved_rope)
    names = {slot.hf if hf else slot.gguf for slot in written}
    extra = sorted(set(found) - names)
    if extra:
        raise SolomonError(f"{path}: tensor {extra[0]} is not one of the run's model")
    for slot in written:
        key = slot.hf if hf else slot.gguf
        if key not in found:
            raise SolomonError(f"{path}: tensor {key} is missing")
        problem = mismatch(slot, found[key], state, hf)
        if problem:
            raise SolomonError(f"{path}: {problem}")
    return f"{len(written)} tensors bit for bit against the run's weights"
