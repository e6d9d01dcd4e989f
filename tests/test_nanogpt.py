"""The nanoGPT comparison's own parts: a nanoGPT checkpoint maps onto Solomon's GPT tensor for tensor, a checkout
that is not nanoGPT at the pinned commit is refused, and docs/nanogpt.md is what its data renders to. (Running
nanoGPT needs its checkout, which CI cannot fetch: `python -m lab docs nanogpt --checkout DIR`, docs/nanogpt.md.)"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from conftest import ROOT

from lab.nanogpt import page
from lab.nanogpt.run import COMMIT, FILES, PATCH, RENAMES, check_checkout, patch_autocast, to_solomon, variants_for
from solomon.errors import SolomonError
from solomon.model.gpt import GPT, GPTConfig


def _as_nanogpt(model: GPT) -> dict:
    """Solomon's state under nanoGPT's names, as a compiled nanoGPT model saves it (``_orig_mod.`` first)."""
    state = {}
    for name, tensor in model.state_dict().items():
        for theirs, ours in RENAMES:  # a top-level name is a prefix; a block's part is inside the name
            name = theirs + name.removeprefix(ours) if name.startswith(ours) else name.replace(ours, theirs)
        state[f"_orig_mod.{name}"] = tensor.clone()
    return state


def test_a_nanogpt_checkpoint_is_solomons_gpt_under_other_names() -> None:
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=64, block_size=16, n_layer=2, n_head=2, n_embd=32)
    model = GPT(config).eval()
    state = _as_nanogpt(model)
    assert any(name.startswith("_orig_mod.transformer.h.1.attn.c_attn.") for name in state)
    args = {"vocab_size": 64, "block_size": 16, "n_layer": 2, "n_head": 2, "n_embd": 32, "bias": False}
    loaded = to_solomon(state, args)
    tokens = torch.randint(0, 64, (2, 16))
    assert torch.equal(loaded(tokens)[0], model(tokens)[0])
    state["_orig_mod.transformer.h.0.attn.bias"] = torch.ones(1)  # a tensor with no place in Solomon's GPT
    with pytest.raises(SolomonError, match="does not map onto Solomon's GPT"):
        to_solomon(state, args)


def test_only_nanogpt_at_the_pinned_commit_with_its_files_unchanged_is_accepted(tmp_path: Path) -> None:
    with pytest.raises(SolomonError, match=r"is not a nanoGPT checkout.*git clone"):
        check_checkout(tmp_path)
    for name in FILES:
        (tmp_path / name).write_text("# not nanoGPT\n")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "add", "-A"], check=True)
    subprocess.run(
        ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"], check=True
    )
    with pytest.raises(SolomonError, match=f"checkout {COMMIT}"):
        check_checkout(tmp_path)


def test_the_nanogpt_page_is_what_its_data_renders_to(tmp_path: Path) -> None:
    docs = shutil.copytree(ROOT / "docs", tmp_path / "docs")
    assert page.render(docs) is not None, "docs/nanogpt/data/nanogpt.json is missing: run `python -m lab docs nanogpt`"
    assert (docs / "nanogpt.md").read_bytes() == (ROOT / "docs" / "nanogpt.md").read_bytes()
    assert (docs / "nanogpt" / "val_loss.png").read_bytes() == (ROOT / "docs" / "nanogpt" / "val_loss.png").read_bytes()


def test_the_page_says_when_the_solomon_run_it_was_timed_against_was_made_again() -> None:
    solomon = {"train_run": {"run_id": "r1", "wall_s": 300.0}}
    same = {"against": {"run_id": "r1", "wall_s": 300.0}}
    assert page.stale({"stock": same, "bf16": same}, solomon) is None
    notice = page.stale({"stock": same, "bf16": {"against": {"run_id": "r0", "wall_s": 280.0}}}, solomon)
    assert notice is not None and "(bf16) was timed against run r0 (280.0 s)" in notice and "now run r1" in notice


def test_the_bf16_variant_turns_on_nanogpts_autocast_on_cpu_and_refuses_another_train_py() -> None:
    source = f"ptdtype = torch.float32\n{PATCH[0]}\nscaler = None\n"
    patched = patch_autocast(source)
    assert patched == f"ptdtype = torch.float32\n{PATCH[1]}\nscaler = None\n" and "nullcontext()" not in patched
    for other in ("ctx = nullcontext()\n", source + PATCH[0]):  # missing, or there twice: not the pinned train.py
        with pytest.raises(SolomonError, match="autocast line once"):
            patch_autocast(other)
    assert variants_for(bf16_native=True) == ("stock", "bf16") and variants_for(bf16_native=False) == ("stock",)
