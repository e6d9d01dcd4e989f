"""``train.optimizer``: AdamW as before, or Muon on the blocks' hidden matrices with AdamW on the rest, stepped as
one optimiser whose learning rate the schedule sets and whose state a checkpoint restores exactly."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
import yaml
from conftest import ROOT

from lab.scratch import merge
from solomon.errors import SolomonError
from solomon.model.gpt import GPT, GPTConfig
from solomon.params import TrainParams, load_params
from solomon.train.optimizer import MuonWithAdamW, build_optimizer, hidden_matrices
from solomon.train.precision import autocast_for
from solomon.train.step import train_step

CONFIG = GPTConfig(vocab_size=64, block_size=16, n_layer=2, n_head=2, n_embd=32, dropout=0.0, bias=True)


def tiny_model() -> GPT:
    torch.manual_seed(0)
    return GPT(CONFIG)


def batch(seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, CONFIG.vocab_size, (4, CONFIG.block_size + 1), generator=generator)
    return [(tokens[:, :-1], tokens[:, 1:])]


def steps(model: GPT, optimizer, seeds: range, lr: float = 1e-2, label_smoothing: float = 0.0) -> list[float]:
    return [
        train_step(model, model, optimizer, batch(seed), lr, label_smoothing, 1.0, autocast_for("bf16"))[0]
        for seed in seeds
    ]


def test_muon_takes_the_blocks_hidden_matrices_and_adamw_everything_else_once() -> None:
    model = tiny_model()
    optimizer = build_optimizer(model, TrainParams(optimizer="muon"), 1e-3, "bf16")
    assert isinstance(optimizer, MuonWithAdamW)
    names = {id(p): name for name, p in model.named_parameters()}  # the tied head appears once, as wte
    muon = [names[id(p)] for group in optimizer.muon.param_groups for p in group["params"]]
    adamw = [names[id(p)] for group in optimizer.adamw.param_groups for p in group["params"]]
    expected = [f"blocks.{i}.{m}.weight" for i in range(2) for m in ("attn.qkv", "attn.proj", "mlp.fc", "mlp.proj")]
    assert muon == expected and [names[id(p)] for p in hidden_matrices(model)] == expected
    assert sorted(muon + adamw) == sorted(names.values())  # every parameter, exactly once
    decayed, undecayed = optimizer.adamw.param_groups
    assert [names[id(p)] for p in decayed["params"]] == ["wte.weight", "wpe.weight"]
    assert decayed["weight_decay"] == 0.1 and undecayed["weight_decay"] == 0.0
    assert all(p.dim() == 1 for p in undecayed["params"])  # norm gains and biases
    [group] = optimizer.muon.param_groups
    assert group["adjust_lr_fn"] == "match_rms_adamw" and (group["momentum"], group["ns_steps"]) == (0.95, 5)


def test_muon_is_the_default_and_adamw_groups_as_before() -> None:
    model = tiny_model()
    assert isinstance(build_optimizer(model, TrainParams(), 1e-3, "bf16"), MuonWithAdamW)  # the promised baseline
    optimizer = build_optimizer(model, TrainParams(optimizer="adamw"), 1e-3, "bf16")
    assert isinstance(optimizer, torch.optim.AdamW) and optimizer.defaults["fused"]
    decayed, undecayed = optimizer.param_groups
    assert [p.dim() >= 2 for p in decayed["params"]] == [True] * len(decayed["params"])
    assert len(decayed["params"]) + len(undecayed["params"]) == len(list(model.parameters()))


@pytest.mark.parametrize("name", ["adamw", "muon"])
def test_the_step_sets_every_groups_lr_and_label_smoothing_trains_with_either(name: str) -> None:
    model = tiny_model()
    optimizer = build_optimizer(model, TrainParams(optimizer=name), 1.0, "bf16")
    before = copy.deepcopy(model.state_dict())
    steps(model, optimizer, range(1), lr=0.0)  # lr 0 reaches both optimisers: nothing moves (decay is lr-scaled)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(group["lr"] == 0.0 for group in optimizer.param_groups)
    losses = steps(model, optimizer, [0] * 8, label_smoothing=0.1)  # one batch, learnt
    assert losses[-1] < losses[0] - 0.5, losses
    moved = [k for k, v in model.state_dict().items() if not torch.equal(before[k], v)]
    assert "blocks.0.attn.qkv.weight" in moved and "wte.weight" in moved and "ln_f.weight" in moved


def test_muon_state_round_trips_so_a_resumed_run_takes_the_same_steps() -> None:
    model = tiny_model()
    optimizer = build_optimizer(model, TrainParams(optimizer="muon"), 1e-2, "bf16")
    steps(model, optimizer, range(3))
    saved_model, saved_state = copy.deepcopy(model.state_dict()), copy.deepcopy(optimizer.state_dict())
    assert set(saved_state) == {"muon", "adamw"} and len(saved_state["muon"]["state"]) == 8  # momentum buffers
    continued = steps(model, optimizer, range(3, 6))

    resumed = tiny_model()
    resumed.load_state_dict(saved_model)
    restored = build_optimizer(resumed, TrainParams(optimizer="muon"), 1e-2, "bf16")
    restored.load_state_dict(saved_state)
    assert steps(resumed, restored, range(3, 6)) == continued
    assert all(torch.equal(a, b) for a, b in zip(resumed.parameters(), model.parameters(), strict=True))
    fresh = tiny_model()  # without the momentum the same steps differ: the state is what makes the resume exact
    fresh.load_state_dict(saved_model)
    assert steps(fresh, build_optimizer(fresh, TrainParams(optimizer="muon"), 1e-2, "bf16"), range(3, 6)) != continued


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"optimizer": "sgd"}, "'train.optimizer': Input should be 'adamw' or 'muon' (got 'sgd')"),
        ({"muon": {"momentum": 1.0}}, "'train.muon.momentum'"),
        ({"muon": {"ns_steps": 0}}, "'train.muon.ns_steps'"),
        ({"muon": {"nesterov": "yes"}}, "'train.muon.nesterov'"),
        ({"muon": {"beta": 0.9}}, "unknown key 'train.muon.beta'"),
    ],
)
def test_bad_optimizer_params_are_one_line_errors(tmp_path: Path, overrides: dict, message: str) -> None:
    params = merge(yaml.safe_load((ROOT / "params.yaml").read_text()), {"train": overrides})
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    with pytest.raises(SolomonError) as info:
        load_params(tmp_path / "params.yaml")
    assert message in str(info.value) and "\n" not in str(info.value)
