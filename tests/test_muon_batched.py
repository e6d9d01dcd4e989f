"""BatchedMuon: torch.optim.Muon's update with one Newton-Schulz product per matrix shape, and torch's state.

Against torch's one-matrix-at-a-time Muon the parameters agree to fp32 tolerance (torch.testing's defaults for
float32: rtol 1.3e-6, atol 1e-5): a batched GEMM may sum in another order than a 2-D one. On the Intel AMX host
it was written on they are equal bit for bit, which is stronger, not promised. Two runs of the batched one are
equal bit for bit.
"""

from __future__ import annotations

import pytest
import torch

from solomon.model.gpt import GPT, GPTConfig
from solomon.params import TrainParams
from solomon.train.muon import BatchedMuon
from solomon.train.optimizer import MuonWithAdamW, build_optimizer, hidden_matrices

CONFIG = GPTConfig(vocab_size=64, block_size=16, n_layer=2, n_head=2, n_embd=32, dropout=0.0, bias=False)


def matrices() -> list[torch.nn.Parameter]:
    """The tiny model's hidden matrices: tall (qkv, MLP up), square (projection) and wide (MLP down)."""
    torch.manual_seed(0)
    return hidden_matrices(GPT(CONFIG))


def run(optimizer_class: type, steps: int = 4, **options) -> tuple[list[torch.Tensor], dict]:
    params = matrices()
    optimizer = optimizer_class(params, lr=0.02, weight_decay=0.1, **options)
    generator = torch.Generator().manual_seed(1)
    for _ in range(steps):
        for p in params:
            p.grad = torch.randn(p.shape, generator=generator)
        optimizer.step()
    return [p.detach().clone() for p in params], optimizer.state_dict()


@pytest.mark.parametrize(
    "options",
    [
        {"nesterov": True, "ns_steps": 5, "adjust_lr_fn": "match_rms_adamw"},
        {"nesterov": False, "ns_steps": 3, "adjust_lr_fn": None, "momentum": 0.9},
    ],
)
def test_the_batched_update_is_torchs_within_fp32_tolerance_and_its_own_bit_for_bit(options: dict) -> None:
    reference, reference_state = run(torch.optim.Muon, **options)
    batched, batched_state = run(BatchedMuon, **options)
    torch.testing.assert_close(batched, reference)  # fp32 tolerance: see the module docstring
    for key, entry in reference_state["state"].items():
        torch.testing.assert_close(batched_state["state"][key]["momentum_buffer"], entry["momentum_buffer"])
    assert batched_state["param_groups"] == reference_state["param_groups"]  # the same keys and values
    again, _ = run(BatchedMuon, **options)
    assert all(torch.equal(a, b) for a, b in zip(batched, again, strict=True))
    start = [p.detach() for p in matrices()]
    assert not any(torch.equal(a, b) for a, b in zip(batched, start, strict=True))  # it did move every matrix


def test_newton_schulz_runs_once_per_shape_on_all_its_matrices() -> None:
    calls: list[tuple[int, int, int]] = []
    params = matrices()
    optimizer = BatchedMuon(params, ns_hook=calls.append)
    for p in params:
        p.grad = torch.ones_like(p)
    optimizer.step()
    d = CONFIG.n_embd  # 2 layers: each shape's 2 matrices in one product, in the order the blocks list them
    assert calls == [(2, 3 * d, d), (2, d, d), (2, 4 * d, d), (2, d, 4 * d)]


def test_a_checkpoint_of_either_muon_loads_into_the_other() -> None:
    """Checkpoints written with torch.optim.Muon (runs before BatchedMuon) resume under it, and back."""
    _, torch_state = run(torch.optim.Muon, steps=2)
    _, batched_state = run(BatchedMuon, steps=2)
    for source, target_class in ((torch_state, BatchedMuon), (batched_state, torch.optim.Muon)):
        target = target_class(matrices(), lr=0.02)
        target.load_state_dict(source)
        assert target.state_dict()["param_groups"] == source["param_groups"]
        buffers = [entry["momentum_buffer"] for entry in target.state_dict()["state"].values()]
        assert len(buffers) == 8 and all(torch.count_nonzero(b) > 0 for b in buffers)


def test_train_optimizer_muon_keeps_torchs_the_bench_picks_either_and_non_matrices_are_refused() -> None:
    """torch's stays the default (BatchedMuon's step measured slower: lab/bench/muon.py)."""
    torch.manual_seed(0)
    model = GPT(CONFIG)
    assert type(build_optimizer(model, TrainParams(optimizer="muon"), 1e-3, "bf16").muon) is torch.optim.Muon
    assert isinstance(
        MuonWithAdamW(model, TrainParams(optimizer="muon"), 1e-3, muon_class=BatchedMuon).muon, BatchedMuon
    )
    with pytest.raises(ValueError, match="2-D parameters only"):
        BatchedMuon([torch.nn.Parameter(torch.ones(3))])
