"""Where each of Solomon's tensors goes in GPT-2's layout: its Hugging Face name, its llama.cpp (GGUF) name, and
the biases GPT-2 has and a bias-free Solomon model has not (written as zeros, checked to be zeros).

Solomon's model is GPT-2's architecture (pre-LayerNorm, learned positions, exact GELU, tied embeddings), so the
layout represents it exactly. Hugging Face's GPT-2 keeps its projections in ``Conv1D``, which stores a weight as
[in, out]: the transpose of ``nn.Linear``'s [out, in]. llama.cpp's converter transposes them back, so GGUF holds
Solomon's own orientation. The tied output projection is written once, as the token embedding, in both.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import torch

from solomon.errors import SolomonError
from solomon.model.gpt import GPTConfig


@dataclass(frozen=True)
class Slot:
    hf: str  # the tensor's name in Hugging Face's GPT2LMHeadModel
    gguf: str  # the name llama.cpp's gpt2 loader looks for
    source: str | None  # Solomon's tensor; None: a bias Solomon's model has not (all zeros)
    conv1d: bool = False  # Hugging Face stores it transposed
    like: str = ""  # a zero bias: the weight whose rows (output features) give its length

    def zeros_length(self, state: dict) -> int:
        return state[self.like].shape[0]


def _with_bias(config: GPTConfig, hf: str, gguf: str, source: str, conv1d: bool = False) -> list[Slot]:
    weight = Slot(f"{hf}.weight", f"{gguf}.weight", f"{source}.weight", conv1d=conv1d)
    bias = Slot(f"{hf}.bias", f"{gguf}.bias", f"{source}.bias" if config.bias else None, like=weight.source)
    return [weight, bias]


def slots(config: GPTConfig) -> list[Slot]:
    """Every tensor of the exported model, in GPT-2's order; refuses a model GPT-2's layout cannot represent."""
    if config.options:
        shown = {name: json.dumps(value).strip('"') for name, value in config.options.items()}  # as YAML writes them
        options = ", ".join(f"model.{name}: {value}" for name, value in shown.items())
        raise SolomonError(
            f"the run's model has architecture options GPT-2's layout cannot represent ({options}): Hugging Face "
            "and GGUF exports need a run trained without them; serve it with `solomon serve` or export --format mlflow"
        )
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


def exported(slot: Slot, state: dict[str, torch.Tensor], hf: bool) -> torch.Tensor:
    """The tensor written for ``slot`` (``hf``: in Hugging Face's orientation), from the run's ``state``."""
    if slot.source is None:
        return torch.zeros(slot.zeros_length(state), dtype=state[slot.like].dtype)
    tensor = state[slot.source]
    return (tensor.t() if hf and slot.conv1d else tensor).contiguous()


def mismatch(slot: Slot, found: torch.Tensor, state: dict[str, torch.Tensor], hf: bool) -> str | None:
    """Why ``found`` (a tensor read back from an export), mapped back to Solomon's orientation, is not the run's
    tensor bit for bit (or, for a bias Solomon has not, not all zeros); None when it is."""
    name = slot.hf if hf else slot.gguf
    back = (found.t() if hf and slot.conv1d else found).contiguous()
    expected = exported(slot, state, hf=False)
    what = f"the run's {slot.source}" if slot.source else "all zeros (the run's model has no bias)"
    if back.dtype != expected.dtype or back.shape != expected.shape:
        return f"tensor {name}: {back.dtype} {tuple(back.shape)} after mapping back, {what} is {expected.dtype} " + str(
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
    return f"tensor {name} is not {what} bit for bit (first difference at index {index} after mapping back)"
