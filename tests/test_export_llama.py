"""The llama block family's exports (issue 47): Hugging Face's LlamaForCausalLM, or Qwen3ForCausalLM with QK-norm,
loads the export in real `transformers` and computes Solomon's logits (fp32, within 1e-5) and greedy tokens; the
GGUF file (llama.cpp's `llama` or `qwen3` architecture) reads back, every tensor as written bit for bit, with the
query and key rows of `llama` in interleaved pairs; `verify --export` catches a changed tensor. llama.cpp itself
loads them in `make gguf-check` (tests/test_gguf_llama.py)."""

from __future__ import annotations

from pathlib import Path

import gguf
import pytest
import torch
from conftest import LLAMA_FAMILIES, latest_run_dir, one_line_refusal, rehash_export
from safetensors.torch import load_file, save_file

from solomon.data.tokens import load_tokenizer
from solomon.export.check import verify_export
from solomon.export.gguf_file import GGUF_FILE, export_gguf
from solomon.export.hf import export_hf
from solomon.export.layout import exported, interleave_pairs, mismatch, slots
from solomon.model import weights
from solomon.model.gpt import GPT, GPTConfig
from solomon.model.sampling import generate

PROMPTS = ("In the beginning", "And the LORD said unto Moses", "Blessed are")
torch.set_num_threads(1)


@pytest.fixture(params=list(LLAMA_FAMILIES))
def llama_repo(request, family_repo) -> Path:
    """The tiny pipeline trained as the llama family (with QK-norm: Qwen3's layout)."""
    return family_repo(request.param)


def test_the_llama_layout_covers_every_tensor_and_interleaves_rotary_pairs_for_gguf_llama() -> None:
    config = GPTConfig(vocab_size=40, block_size=8, n_layer=2, n_head=2, n_embd=16, position="rotary",
                       activation="swiglu", family="llama", qk_norm=True)  # fmt: skip
    state = {k: v for k, v in GPT(config).state_dict().items() if k != weights.TIED}
    for gguf_llama in (False, True):
        layout = slots(config, gguf_llama)
        assert {s.source for s in layout} == set(state)
        for hf in (True, False):
            assert all(mismatch(slot, exported(slot, state, hf), state, hf) is None for slot in layout)
    q = next(s for s in slots(config, gguf_llama=True) if s.gguf == "blk.0.attn_q.weight")
    rows = state["blocks.0.attn.qkv.weight"][:16]
    # head 0's rows 0..7 pair (0, 4), (1, 5)...: interleaved they are 0, 4, 1, 5, 2, 6, 3, 7
    assert torch.equal(exported(q, state, hf=False)[:8], rows[[0, 4, 1, 5, 2, 6, 3, 7]])
    assert torch.equal(interleave_pairs(rows, 2)[8:], rows[[8, 12, 9, 13, 10, 14, 11, 15]])


def test_transformers_loads_the_llama_export_and_computes_solomons_logits(llama_repo: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM, LlamaForCausalLM, Qwen3ForCausalLM

    run_dir = latest_run_dir(llama_repo)
    out = export_hf(run_dir, llama_repo, tmp_path / "hf")
    ours = weights.load(llama_repo / "models")
    theirs = AutoModelForCausalLM.from_pretrained(out).eval()
    assert isinstance(theirs, Qwen3ForCausalLM if ours.config.qk_norm else LlamaForCausalLM)
    card = (out / "README.md").read_text()  # the model card names the class that loads it, not GPT-2's
    assert f"`{type(theirs).__name__}.from_pretrained`" in card and "GPT2" not in card
    tokenizer = load_tokenizer(llama_repo / "data/tokenizer.json")
    eod = tokenizer.token_to_id("<|endoftext|>")
    worst = 0.0
    for prompt in PROMPTS:
        ids = tokenizer.encode(prompt).ids
        with torch.no_grad():
            logits = theirs(torch.tensor([ids])).logits
            worst = max(worst, float((logits - ours(torch.tensor([ids]))).abs().max()))
        greedy = generate(ours, ids, 20, 1.0, 1, torch.Generator().manual_seed(0), stop_id=eod)
        done = theirs.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=len(greedy),
                               min_new_tokens=len(greedy))  # fmt: skip
        assert done[0, len(ids) :].tolist() == greedy, prompt
    print(f"max abs logit difference, transformers {type(theirs).__name__} vs Solomon (fp32): {worst:.3g}")
    assert worst < 1e-5
    assert verify_export(out, llama_repo).startswith(f"{out}: hf export of run {run_dir.name} verified")


def test_the_llama_gguf_reads_back_and_verify_catches_a_changed_tensor(llama_repo: Path, tmp_path: Path) -> None:
    run_dir = latest_run_dir(llama_repo)
    qwen3 = weights.load(llama_repo / "models").config.qk_norm
    out = export_gguf(run_dir, llama_repo, tmp_path / "gguf").parent
    reader = gguf.GGUFReader(out / GGUF_FILE)
    arch = reader.fields["general.architecture"].contents()
    assert arch == ("qwen3" if qwen3 else "llama")
    assert reader.fields[f"{arch}.rope.freq_base"].contents() == 10000.0
    names = {t.name for t in reader.tensors}
    assert ("blk.0.attn_q_norm.weight" in names) == qwen3 and "blk.1.ffn_gate.weight" in names
    assert verify_export(out, llama_repo).startswith(f"{out}: gguf export of run {run_dir.name}")

    hf = export_hf(run_dir, llama_repo, tmp_path / "hf")
    tensors = load_file(str(hf / "model.safetensors"))
    name = "model.layers.1.self_attn.k_proj.weight"
    tensors[name].view(-1)[5] = torch.nextafter(tensors[name].view(-1)[5], torch.tensor(9.0))
    save_file(tensors, str(hf / "model.safetensors"), metadata={"format": "pt"})
    rehash_export(hf)  # a forger who also rewrote provenance.json's hashes
    message = one_line_refusal(verify_export, hf, llama_repo)
    assert f"tensor {name} is not the run's blocks.1.attn.qkv.weight rows 64-127 bit for bit" in message
