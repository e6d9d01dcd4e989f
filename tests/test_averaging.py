"""Weight averaging (``train.ema_decay``): the average's arithmetic, its checkpointed state, and a run with it
killed between checkpoints resuming to the same bytes, its output model the average, not the trained weights."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import torch
from conftest import logged_steps, run_train, workdir
from safetensors.torch import load_file as load_safetensors
from test_resume import outcome

from solomon.model.gpt import GPT, GPTConfig
from solomon.train.averaging import RAMP, WeightAverage
from solomon.train.checkpoint import checkpoint_name, load_file

EMA = {"train": {"ema_decay": 0.9}}


def tiny_gpt(seed: int) -> GPT:
    torch.manual_seed(seed)
    return GPT(GPTConfig(vocab_size=32, n_layer=1, n_head=2, n_embd=8, block_size=4, dropout=0.0, bias=False))


def nudge(model: GPT, seed: int) -> None:
    """Stand-in for an optimiser step: every weight moves by its own random amount."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator))


def test_the_first_update_copies_and_each_later_one_moves_by_the_ramped_decay() -> None:
    model = tiny_gpt(0)
    average = WeightAverage(model, decay=0.5)
    nudge(model, 1)
    average.update(model)
    assert all(torch.equal(a, w) for a, w in zip(average.model.parameters(), model.parameters(), strict=True))
    expected = [p.detach().clone() for p in model.parameters()]
    for n in range(1, 12):
        nudge(model, 1 + n)
        decay = min(0.5, (1 + n) / (RAMP + n))  # the ramp until it reaches 0.5 at n = 8
        expected = [e + (1 - decay) * (w.detach() - e) for e, w in zip(expected, model.parameters(), strict=True)]
        average.update(model)
    for got, want in zip(average.model.parameters(), expected, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert not any(torch.equal(a, w) for a, w in zip(average.model.parameters(), model.parameters(), strict=True))


def test_a_restored_average_continues_bit_for_bit() -> None:
    model = tiny_gpt(0)
    average = WeightAverage(model, decay=0.95)
    for seed in range(5):
        nudge(model, seed)
        average.update(model)
    restored = WeightAverage(tiny_gpt(1), decay=0.95)  # other weights: the state must carry everything
    restored.load_state_dict(average.state_dict())
    for seed in range(5, 9):
        nudge(model, seed)
        average.update(model)
        restored.update(model)
    assert average.state_dict().keys() == restored.state_dict().keys()
    for name, tensor in average.state_dict().items():
        assert torch.equal(tensor, restored.state_dict()[name]), name


@pytest.mark.parametrize("decay", [0.0, 1.0, -0.1])
def test_a_decay_outside_the_open_interval_is_refused(decay: float) -> None:
    with pytest.raises(ValueError, match="EMA decay"):
        WeightAverage(tiny_gpt(0), decay)


def test_a_run_with_an_average_killed_between_checkpoints_resumes_to_the_same_bytes(
    built_repo: Path, tmp_path: Path
) -> None:
    reference = workdir(built_repo, tmp_path / "reference", EMA)
    assert (done := run_train(built_repo, reference)).returncode == 0, done.stderr

    cwd = workdir(built_repo, tmp_path / "killed", EMA)
    killed = run_train(built_repo, cwd, crash_at="after-step:25")  # 5 steps past the checkpoint of step 20
    assert killed.returncode == -signal.SIGKILL and logged_steps(cwd) == 25
    assert "average" in load_file(cwd / "checkpoints" / checkpoint_name(20))
    finished = run_train(built_repo, cwd)
    assert finished.returncode == 0, finished.stderr
    assert "(step 20)" in finished.stderr
    assert outcome(cwd) == outcome(reference)

    # The output is the average at the best evaluation (the last step here), not the trained weights ...
    last = load_file(cwd / "checkpoints" / checkpoint_name(30))
    output = load_safetensors(str(cwd / "models/model.safetensors"))
    averaged = {name.removeprefix("module."): t for name, t in last["average"].items() if name.startswith("module.")}
    assert output.keys() <= averaged.keys()
    assert all(torch.equal(tensor, averaged[name]) for name, tensor in output.items())
    assert not all(torch.equal(tensor, last["model"][name]) for name, tensor in output.items())
    # ... and the same params without an average train the same weights, whose checkpoints hold no average.
    plain = workdir(built_repo, tmp_path / "plain")
    assert (done := run_train(built_repo, plain)).returncode == 0, done.stderr
    plain_last = load_file(plain / "checkpoints" / checkpoint_name(30))
    assert "average" not in plain_last
    assert all(torch.equal(tensor, plain_last["model"][name]) for name, tensor in last["model"].items())
