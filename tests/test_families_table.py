"""The block families are one table (solomon/families.py) that the params, the model and the exports read: a
third family — here a test-only one, GPT-2's blocks with RMSNorm — is one entry, and the model builds and trains
with it, its options are held to it, and the exports refuse it in one line (no layout of ours carries it)."""

from __future__ import annotations

from typing import get_args

import pytest
import torch
import torch.nn as nn

from solomon.errors import SolomonError
from solomon.export.layout import slots
from solomon.families import FAMILIES, LAYOUTS, Family
from solomon.model.gpt import GPT, GPTConfig
from solomon.params import ModelParams

torch.set_num_threads(1)


def test_params_lists_the_tables_families_and_their_layouts_are_the_exports() -> None:
    assert get_args(ModelParams.model_fields["family"].annotation) == tuple(FAMILIES)
    assert list(LAYOUTS) == ["gpt2", "llama", "qwen3"]
    assert {layout.hf_class for layout in LAYOUTS.values()} == {
        "GPT2LMHeadModel",
        "LlamaForCausalLM",
        "Qwen3ForCausalLM",
    }


@pytest.fixture
def rms_gpt2(monkeypatch) -> str:
    family = Family(defaults={"position": "learned", "qk_norm": False, "activation": "gelu"}, rms_norm=True)
    monkeypatch.setitem(FAMILIES, "gpt2-rms", family)
    return "gpt2-rms"


def test_a_third_family_is_one_entry(rms_gpt2: str) -> None:
    config = GPTConfig(vocab_size=40, block_size=8, n_layer=2, n_head=2, n_embd=16, family=rms_gpt2)
    model = GPT(config)
    assert isinstance(model.blocks[0].ln_1, nn.RMSNorm) and isinstance(model.ln_f, nn.RMSNorm)
    assert model.blocks[0].attn.q_norm is None  # its entry gives QK-norm no gain
    tokens = torch.randint(0, 40, (2, 8))
    loss = model(tokens, tokens)
    loss.backward()
    assert torch.isfinite(loss) and model.wte.weight.grad is not None
    with pytest.raises(SolomonError, match=r"no layout Solomon writes represents .*model.family: gpt2-rms"):
        slots(config)
    with pytest.raises(ValueError, match="family 'gpt3' is not one of gpt2, llama, gpt2-rms"):
        GPTConfig(vocab_size=40, block_size=8, n_layer=2, n_head=2, n_embd=16, family="gpt3")


def test_a_family_holds_its_fixed_options_and_biases() -> None:
    with pytest.raises(ValueError, match="family llama has rotary only"):
        ModelParams(family="llama", position="learned")
    with pytest.raises(ValueError, match="family llama has no biases"):
        ModelParams(family="llama", bias=True)
    assert ModelParams(family="gpt2", bias=True, position="rotary").bias
