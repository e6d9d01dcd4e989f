"""The loop's components against hand-computed or independently computed values."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from solomon.errors import SolomonError
from solomon.model.gpt import GPT, GPTConfig
from solomon.model.linear_cross_entropy import CHUNK_TOKENS, linear_cross_entropy
from solomon.params import EarlyStoppingParams
from solomon.records import DETERMINISTIC_COLUMNS
from solomon.train import loop
from solomon.train.checkpoint import Checkpointer
from solomon.train.data_order import DataOrder
from solomon.train.early_stopping import EarlyStopping
from solomon.train.loop import train
from solomon.train.recorder import Recorder
from solomon.train.step import accumulate_gradients

torch.set_num_threads(1)


def test_label_smoothed_loss_matches_hand_computation() -> None:
    logits = torch.tensor([[2.0, 0.5, -1.0], [0.0, 1.0, 3.0]])
    targets = torch.tensor([0, 1])
    eps = 0.1
    expected = 0.0
    for row, target in zip(logits, targets, strict=True):
        log_p = row - torch.logsumexp(row, dim=0)
        expected += (1 - eps) * -log_p[target] + eps * -log_p.mean()
    # hidden = I, weight = logitsᵀ (vocab 3 × width 2): hidden @ weightᵀ is exactly ``logits``
    loss = linear_cross_entropy(torch.eye(2), logits.t().contiguous(), targets, eps)
    assert loss.item() == pytest.approx(float(expected), rel=1e-6)


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_chunked_output_loss_equals_plain_autograd(eps: float) -> None:
    """Loss and both gradients match matmul + F.cross_entropy, over several chunks and a ragged last one."""
    generator = torch.Generator().manual_seed(0)
    n_tokens = 2 * CHUNK_TOKENS + 37
    hidden = torch.randn(n_tokens, 16, generator=generator, requires_grad=True)
    weight = torch.randn(50, 16, generator=generator, requires_grad=True)
    targets = torch.randint(0, 50, (n_tokens,), generator=generator)
    plain = F.cross_entropy(hidden @ weight.t(), targets, label_smoothing=eps, reduction="sum")
    plain_grads = torch.autograd.grad(plain * 0.5, (hidden, weight))
    fused = linear_cross_entropy(hidden, weight, targets, eps)
    fused_grads = torch.autograd.grad(fused * 0.5, (hidden, weight))
    assert fused.item() == pytest.approx(plain.item(), rel=1e-5)
    for got, want in zip(fused_grads, plain_grads, strict=True):
        assert torch.allclose(got, want, rtol=1e-4, atol=1e-6)


def _grads(model: GPT) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in model.parameters()])


def test_accumulating_four_micro_batches_equals_one_big_batch() -> None:
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=64, block_size=16, n_layer=2, n_head=2, n_embd=32))
    tokens = torch.randint(0, 64, (5000,)).numpy().astype("uint16")
    one = DataOrder(3, len(tokens), 16, batch_size=8, accum_steps=1)
    four = DataOrder(3, len(tokens), 16, batch_size=8, accum_steps=4)
    assert four.micro_batch_size == 2
    grads = []
    for order in (one, four):
        model.zero_grad(set_to_none=True)
        loss = accumulate_gradients(model, [order.batch(tokens, 7, m) for m in range(order.accum_steps)], 0.1)
        grads.append((loss, _grads(model)))
    (loss_one, g_one), (loss_four, g_four) = grads
    assert loss_four == pytest.approx(loss_one, rel=1e-6)
    # Relative to the gradient's norm: fp32 sums in another order differ only by rounding.
    assert ((g_four - g_one).norm() / g_one.norm()).item() < 1e-6


def test_uneven_micro_batches_are_token_weighted() -> None:
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=32, block_size=8, n_layer=1, n_head=2, n_embd=16))
    x = torch.randint(0, 32, (3, 8))
    y = torch.randint(0, 32, (3, 8))
    model.zero_grad(set_to_none=True)
    whole = accumulate_gradients(model, [(x, y)], 0.0)
    g_whole = _grads(model)
    model.zero_grad(set_to_none=True)
    split = accumulate_gradients(model, [(x[:1], y[:1]), (x[1:], y[1:])], 0.0)  # 8 and 16 targets
    assert split == pytest.approx(whole, rel=1e-6)
    assert ((_grads(model) - g_whole).norm() / g_whole.norm()).item() < 1e-6


def test_early_stopping_on_a_scripted_curve() -> None:
    stopper = EarlyStopping(EarlyStoppingParams(patience=2, min_delta=0.01))
    curve = {10: 5.0, 20: 4.0, 30: 3.995, 40: 4.2, 50: 3.0}
    stopped_at = None
    for step, loss in curve.items():
        stopper.update(step, loss)
        if stopper.should_stop:
            stopped_at = step
            break
    assert stopped_at == 40  # 3.995 is not better than 4.0 by more than 0.01; 4.2 is the second miss
    assert (stopper.best_step, stopper.best) == (20, 4.0)
    again = EarlyStopping(EarlyStoppingParams(patience=2))
    again.load_state_dict(stopper.state_dict())
    assert again.state_dict() == stopper.state_dict()


def test_early_stopping_run_outputs_the_best_checkpoint(tiny_run, tmp_path: Path) -> None:
    # min_delta so large that no evaluation after the first counts as better: stop at the second, keep step 10.
    # No cooldown: the rate does not depend on max_steps, so the 10-step run is the longer run's first 10 steps.
    stopping = {"train": {"early_stopping": {"patience": 1, "min_delta": 100.0}}, "lr": {"cooldown": 0.0}}
    params, paths = tiny_run(stopping, tmp_path / "es")
    metrics = train(params, paths)
    assert (metrics["steps"], metrics["best_step"], metrics["stopped_early"]) == (20, 10, True)
    short, short_paths = tiny_run({"train": {"max_steps": 10}, "lr": {"cooldown": 0.0}}, tmp_path / "short")
    train(short, short_paths)
    model = (paths.model_dir / "model.safetensors").read_bytes()
    assert model == (short_paths.model_dir / "model.safetensors").read_bytes()


def test_eval_interval_does_not_change_the_training_batches(tiny_run, tmp_path: Path) -> None:
    logs = []
    for interval in (10, 3):
        # Dropout makes the training RNG matter: evaluation and sampling must not draw from it.
        params, paths = tiny_run(
            {"model": {"dropout": 0.1}, "train": {"eval_interval": interval}}, tmp_path / str(interval)
        )
        train(params, paths)
        rows = paths.steps_log.read_text().splitlines()
        logs.append([row.split("\t")[: len(DETERMINISTIC_COLUMNS)] for row in rows])
        assert len(paths.evals_log.read_text().splitlines()) == math.ceil(30 / interval)
    assert logs[0] == logs[1]


class Weights:
    """A stateful component for the checkpointer: one tensor."""

    def __init__(self, value: float) -> None:
        self.weights = torch.full((4,), value)

    def state_dict(self) -> dict:
        return {"weights": self.weights}

    def load_state_dict(self, state: dict) -> None:
        self.weights = state["weights"]


def _checkpoints(tmp_path: Path) -> Checkpointer:
    manager = Checkpointer(tmp_path / "ckpt", keep=3)
    for step in (10, 20, 30, 40):
        manager.save(step, {"part": Weights(float(step))}, {"fingerprint": {}})
    return manager


def test_only_the_last_k_checkpoints_are_kept(tmp_path: Path) -> None:
    manager = _checkpoints(tmp_path)
    index = json.loads(manager.index_path.read_text())
    assert [e["step"] for e in index["checkpoints"]] == [20, 30, 40]
    assert sorted(p.name for p in manager.directory.glob("*.pt")) == [
        "step-00000020.pt",
        "step-00000030.pt",
        "step-00000040.pt",
    ]
    assert manager.load_latest().step == 40


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_damaged_checkpoint_is_detected_and_the_previous_one_used(tmp_path: Path, damage: str, capsys) -> None:
    manager = _checkpoints(tmp_path)
    newest = manager.directory / "step-00000040.pt"
    data = bytearray(newest.read_bytes())
    if damage == "truncate":
        data = data[: len(data) // 2]
    else:
        data[len(data) // 2] ^= 0x01
    newest.write_bytes(bytes(data))
    loaded = manager.load_latest()
    restored = Weights(0.0)
    manager.restore(loaded, {"part": restored})
    assert loaded.step == 30 and torch.equal(restored.weights, torch.full((4,), 30.0))
    assert "step-00000040.pt is corrupt" in capsys.readouterr().err


@pytest.mark.parametrize("precision", ["bf16", "fp32"])  # the resume tests run the default, bf16
def test_each_precision_trains_and_is_deterministic(tiny_run, tmp_path: Path, precision: str) -> None:
    results = []
    for name in ("a", "b"):
        params, paths = tiny_run({"train": {"precision": precision, "max_steps": 10}}, tmp_path / name)
        metrics = train(params, paths)
        assert metrics["precision"] == precision and math.isfinite(metrics["final_loss"])
        results.append((paths.model_dir / "model.safetensors").read_bytes())
    assert results[0] == results[1]


def test_finished_runs_resume_without_training_more(tiny_run, tmp_path: Path) -> None:
    stopping = {"early_stopping": {"patience": 1, "min_delta": 100.0}}
    params, paths = tiny_run({"train": stopping, "lr": {"cooldown": 0.0}}, tmp_path)  # max_steps may change
    first = train(params, paths)
    model = (paths.model_dir / "model.safetensors").read_bytes()
    again = train(params, paths)  # early-stopped: stays stopped, same model, same log
    assert (again["steps"], again["resumed_from_step"]) == (first["steps"], 20)
    assert (paths.model_dir / "model.safetensors").read_bytes() == model
    assert len(paths.steps_log.read_text().splitlines()) == 21
    shorter, _ = tiny_run({"train": {"max_steps": 15, **stopping}, "lr": {"cooldown": 0.0}}, tmp_path)
    with pytest.raises(SolomonError, match=r"at step 20, past train\.max_steps 15"):
        train(shorter, paths)


def test_training_run_id_is_kept_by_saves_and_resumes_and_renewed_only_by_clear(tmp_path: Path) -> None:
    """The id that finds a run's MLflow run again: one per training run, however often it is resumed."""
    manager = Checkpointer(tmp_path / "checkpoints", keep=1)
    run_id = manager.run_id()
    assert re.fullmatch(r"\d{8}T\d{6}Z-[0-9a-f]{8}", run_id)
    for step in (1, 2):
        manager.save(step, {"part": Weights(0.0)}, {})
    manager.mark_completed(True)
    assert [e["step"] for e in manager.read_index()["checkpoints"]] == [2]
    assert Checkpointer(tmp_path / "checkpoints", keep=1).run_id() == run_id  # a new process resuming
    manager.clear()
    assert manager.run_id() != run_id


def test_chunked_output_loss_under_bf16_autocast_matches_the_bf16_matmul() -> None:
    """Under CPU autocast the output matmuls run in bf16 (as nn.Linear would) and the softmax in fp32."""
    generator = torch.Generator().manual_seed(1)
    hidden = torch.randn(CHUNK_TOKENS + 5, 32, generator=generator, requires_grad=True)
    weight = torch.randn(64, 32, generator=generator, requires_grad=True)
    targets = torch.randint(0, 64, (CHUNK_TOKENS + 5,), generator=generator)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        fused = linear_cross_entropy(hidden, weight, targets)
    logits = (hidden.to(torch.bfloat16) @ weight.to(torch.bfloat16).t()).float()
    plain = F.cross_entropy(logits, targets, reduction="sum")
    assert fused.dtype == torch.float32
    assert fused.item() == pytest.approx(plain.item(), rel=1e-6)  # an fp32 matmul would be 2e-4 off here
    grad_hidden, grad_weight = torch.autograd.grad(fused, (hidden, weight))
    assert grad_hidden.dtype == hidden.dtype and grad_weight.dtype == weight.dtype
    want_hidden, want_weight = torch.autograd.grad(plain, (hidden, weight))
    for got, want in ((grad_hidden, want_hidden), (grad_weight, want_weight)):
        assert ((got - want).norm() / want.norm()).item() < 1e-2  # bf16 rounding of the logits' gradient


def test_dropout_keeps_1_minus_p_scaled_and_is_seeded() -> None:
    from solomon.model.gpt import Dropout

    drop = Dropout(0.2)
    x = torch.ones(1_000_003, requires_grad=True)
    torch.manual_seed(5)
    y = drop(x)
    kept = y != 0
    assert abs(kept.float().mean().item() - 0.8) < 0.002  # 1,000,003 draws: 0.002 is about 5 standard deviations
    assert torch.allclose(y[kept], torch.full_like(y[kept], 65536 / (65536 - 13107)))
    y.sum().backward()
    assert torch.equal(x.grad, y.detach())  # the gradient goes through the kept elements, scaled alike
    torch.manual_seed(5)
    assert torch.equal(drop(x), y)  # the same generator state gives the same mask
    drop.eval()
    assert drop(x) is x


class RestartingShuffle(DataOrder):
    """The classic defect, on purpose and only here: batches drawn from one generator seeded when the run starts,
    so its position is process state that no checkpoint holds — a resumed run sees the first batches again."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._generator = np.random.Generator(np.random.PCG64(self.seed))
        self._drawn: dict[int, np.ndarray] = {}

    def offsets(self, step: int) -> np.ndarray:
        if step not in self._drawn:  # the next batch of the stream, whatever the step number says
            high = self.n_tokens - self.block_size - 1
            self._drawn[step] = self._generator.integers(0, high, size=self.batch_size, endpoint=True)
        return self._drawn[step]


@pytest.mark.parametrize(("order", "exact"), [(DataOrder, True), (RestartingShuffle, False)])
def test_resume_is_exact_with_the_real_data_order_and_the_check_catches_a_restarting_shuffle(
    tiny_run, tmp_path: Path, monkeypatch, order: type, exact: bool
) -> None:
    """30 steps in one go against 20 steps, a new process's worth of state, and 10 more from the checkpoint (no
    cooldown, so that a run may be extended)."""
    monkeypatch.setattr(loop, "DataOrder", order)
    params, whole = tiny_run({"lr": {"cooldown": 0.0}}, tmp_path / "whole")
    train(params, whole)
    short, resumed = tiny_run({"train": {"max_steps": 20}, "lr": {"cooldown": 0.0}}, tmp_path / "resumed")
    train(short, resumed)
    assert train(params, resumed)["resumed_from_step"] == 20
    model = (whole.model_dir / "model.safetensors").read_bytes()
    assert ((resumed.model_dir / "model.safetensors").read_bytes() == model) is exact


def test_start_up_tidies_what_interrupted_writes_left(tmp_path: Path) -> None:
    """A kill inside a write leaves a temporary file or directory, a directory swap between its renames, or a
    checkpoint file the index never named; none of them stops the next start, and the listed ones stay."""
    manager = _checkpoints(tmp_path)
    directory = manager.directory
    (directory / ".step-00000050.pt.abc.tmp").write_bytes(b"half")
    (directory / ".best.xyz.tmp").mkdir()  # weights.save's staging directory
    (directory / ".best.xyz.tmp" / "model.safetensors").write_bytes(b"half")
    (directory / ".best.old").mkdir()  # killed between the two renames: `best` is gone
    (directory / ".best.old" / "model.safetensors").write_bytes(b"previous best")
    (directory / "step-00000050.pt").write_bytes(b"written, never indexed")
    manager.remove_partial()
    assert sorted(p.name for p in directory.iterdir()) == [
        "best",
        "index.json",
        "step-00000020.pt",
        "step-00000030.pt",
        "step-00000040.pt",
    ]
    assert (directory / "best/model.safetensors").read_bytes() == b"previous best"
    assert manager.load_latest().step == 40


def test_an_unreadable_index_deletes_no_checkpoint(tmp_path: Path) -> None:
    manager = _checkpoints(tmp_path)
    manager.index_path.write_text("{not json")
    manager.remove_partial()
    assert len(list(manager.directory.glob("step-*.pt"))) == 3


def test_hooks_come_from_the_environment_and_refuse_bad_values(tmp_path: Path) -> None:
    from solomon.train.hooks import NO_HOOKS, Hooks, crash_environment, pause_environment

    assert Hooks.from_environment({}) == NO_HOOKS
    env = crash_environment("after-eval", 20) | pause_environment(7, tmp_path / "go") | {"SOLOMON_CRASH_RANK": "1"}
    hooks = Hooks.from_environment(env | {"SOLOMON_RECORD_BATCHES": str(tmp_path)})
    assert hooks == Hooks(("after-eval", 20), 1, (7, tmp_path / "go"), tmp_path)
    for bad in ({"SOLOMON_CRASH_AT": "nowhere:3"}, {"SOLOMON_CRASH_AT": "after-step:x"}, {"SOLOMON_PAUSE_AT": "7"}):
        with pytest.raises(SolomonError, match="bad test hook variable"):
            Hooks.from_environment(bad)
    with pytest.raises(ValueError, match="unknown crash point"):
        crash_environment("before-lunch", 1)


def test_batch_recording_writes_only_when_asked(tmp_path: Path) -> None:
    from solomon.train.hooks import NO_HOOKS, Hooks

    order = DataOrder(3, 5000, 16, batch_size=8, accum_steps=2, world_size=2)
    NO_HOOKS.record_step(4, 1, order)  # nothing to write to, nothing written
    Hooks(record_batches=tmp_path).record_step(4, 1, order)
    rows = [json.loads(line) for line in (tmp_path / "rank1.jsonl").read_text().splitlines()]
    assert [r["micro_batch"] for r in rows] == [2, 3]  # rank 1 holds the second half of the global batch
    assert [o for r in rows for o in r["offsets"]] == order.offsets(4)[4:].tolist()


def test_the_state_digest_is_of_the_model_and_optimizer_tensors_not_the_file(tmp_path: Path) -> None:
    """Two checkpoints whose model and optimiser are equal but whose logs differ (wall-clock speeds) have equal state
    digests and different files; the anchors are the last two, copied with their index."""
    from solomon.train.checkpoint import state_digest

    manager = Checkpointer(tmp_path / "ckpt", keep=3)
    for step, speed in ((10, 1.0), (20, 2.0), (30, 3.0)):
        parts = {"model": Weights(1.0), "optimizer": Weights(2.0), "log": Weights(speed)}
        manager.save(step, parts, {"fingerprint": {}})
    entries = json.loads(manager.index_path.read_text())["checkpoints"]
    assert len({e["state_sha256"] for e in entries}) == 1 and len({e["sha256"] for e in entries}) == 3
    live = {"model": Weights(1.0).state_dict(), "optimizer": Weights(2.0).state_dict()}
    assert state_digest(live) == entries[0]["state_sha256"]
    assert state_digest({**live, "model": Weights(1.0 + 1e-7).state_dict()}) != state_digest(live)
    anchors = manager.write_anchors(tmp_path / "anchors", 2, {"run_id": "r"})
    assert [a["step"] for a in anchors] == [20, 30]
    assert sorted(p.name for p in (tmp_path / "anchors").iterdir()) == [
        "index.json",
        "step-00000020.pt",
        "step-00000030.pt",
    ]
    assert json.loads((tmp_path / "anchors/index.json").read_text())["anchors"] == anchors


def test_the_machine_kind_names_what_selects_the_kernels() -> None:
    from solomon.machine import describe, kind

    here = describe()
    assert here["kind"] == kind(here) and here["torch_capability"] == torch.backends.cpu.get_cpu_capability()
    amx = {"arch": "x86_64", "isa": ["amx_bf16", "amx_tile", "avx512_bf16"], "torch_capability": "AVX512"}
    epyc = {"arch": "x86_64", "isa": ["avx512_bf16", "avx512f"], "torch_capability": "AVX512", "onednn": "3.12.0"}
    assert kind(amx) == "x86_64 amx_bf16, torch AVX512"
    assert kind(epyc) == "x86_64 avx512_bf16 (no AMX), torch AVX512, oneDNN 3.12.0"
    # Two microarchitectures with the same ISA flags (AMD Zen 4 and Zen 5) run at different speeds: two kinds.
    zen4, zen5 = (
        {**epyc, "vendor": "AuthenticAMD", "family": "25", "model": "17"},
        {**epyc, "vendor": "AuthenticAMD", "family": "26", "model": "2"},
    )
    assert kind(zen4) == "x86_64 AuthenticAMD family 25 model 17, avx512_bf16 (no AMX), torch AVX512, oneDNN 3.12.0"
    assert kind(zen4) != kind(zen5)


def test_the_hosts_gemm_peak_is_measured_in_under_a_second() -> None:
    import time

    from solomon.machine import gemm_peaks

    started = time.perf_counter()
    peaks = gemm_peaks()
    assert time.perf_counter() - started < 3  # the train stage measures it as it starts
    assert set(peaks) == {"fp32", "bf16"} and all(peak > 0 for peak in peaks.values())


def test_the_gemm_peak_shrinks_its_matmul_to_fit_its_time_budget() -> None:
    """A dtype without native kernels (bf16 on an AVX2-only CPU: 2.4 s a 1024² product) must not hold up the train
    stage's start: the measurement shrinks its product until it fits, and still reports a rate."""
    import time

    from solomon.machine import describe, gemm_peak_gflops

    started = time.perf_counter()
    peak = gemm_peak_gflops(torch.float32, n=2048, repeats=3, budget_s=0.01)
    assert peak > 0 and time.perf_counter() - started < 2  # 2048² fp32 nine times would take seconds anywhere
    assert describe()["bf16_matmul"] in ("native", "fallback")


def test_an_explicit_bf16_run_on_a_cpu_without_bf16_kernels_says_so_as_it_starts(tiny_run, capsys) -> None:
    """train.precision: bf16 set explicitly on a CPU whose bf16 matmuls take torch's scalar fallback (auto would
    not choose it): the run goes on in bf16, and the stage's first lines say why it is slow and what trains in
    fp32."""
    from solomon.machine import describe
    from solomon.train.precision import bf16_fallback_warning

    fallback = {**describe(), "bf16_matmul": "fallback"}
    peaks = {"fp32": 150.0, "bf16": 0.9}
    assert bf16_fallback_warning("fp32", fallback, peaks) is None
    assert bf16_fallback_warning("bf16", {**fallback, "bf16_matmul": "native"}, peaks) is None
    warning = bf16_fallback_warning("bf16", fallback, peaks)
    assert "(bf16 GEMM 0.9 GFLOP/s against 150 in fp32 here)" in warning
    assert "train.precision: auto (or fp32) trains in fp32 here" in warning
    params, paths = tiny_run(
        {"train": {"max_steps": 2, "precision": "bf16", "optimizer": "adamw"}, "lr": {"cooldown": 0.5}}
    )
    metrics = train(params, paths, recorder=Recorder(machine=fallback, gemm_peak=peaks))
    err = capsys.readouterr().err
    assert warning in err
    assert "train: computing in bf16 (train.precision: bf16; set explicitly)" in err
    assert metrics["precision"] == "bf16"


def test_precision_auto_resolves_by_the_cpu_and_an_explicit_one_wins() -> None:
    from solomon.train.precision import resolve

    native, fallback = {"bf16_matmul": "native"}, {"bf16_matmul": "fallback"}
    assert resolve("auto", False, native) == "bf16"
    assert resolve("auto", False, fallback) == "fp32"
    assert resolve("auto", True, native) == "fp32"  # a portable run is fp32 everywhere
    assert resolve("bf16", False, fallback) == "bf16"
    assert resolve("fp32", False, native) == "fp32"
    with pytest.raises(ValueError, match="not one of auto, bf16, fp32"):
        resolve("fp16", False, native)


def test_muon_orthogonalises_in_the_runs_precision() -> None:
    """bf16: torch's Muon (its Newton-Schulz in bf16); fp32: BatchedMuon in fp32, so that an fp32 step has no bf16
    matmul left (each would take the scalar path on an AVX2-only CPU)."""
    from solomon.params import TrainParams
    from solomon.train.muon import BatchedMuon
    from solomon.train.optimizer import build_optimizer

    model = GPT(GPTConfig(vocab_size=64, block_size=8, n_layer=1, n_head=2, n_embd=16))
    assert type(build_optimizer(model, TrainParams(), 1e-3, "bf16").muon) is torch.optim.Muon
    fp32 = build_optimizer(model, TrainParams(), 1e-3, "fp32").muon
    assert isinstance(fp32, BatchedMuon) and fp32.ns_dtype == torch.float32


def test_an_auto_run_records_its_choice_and_resumes_only_in_it(tiny_run, capsys) -> None:
    """auto on a CPU without native bf16 matmuls trains in fp32 and says so; the run record and the checkpoint's
    fingerprint hold fp32. A resume where auto would choose bf16 is refused with the fix, which works: the explicit
    precision the run resolved to resumes it (the setting itself is not fingerprinted, its resolution is)."""
    from solomon.machine import describe
    from solomon.train.checkpoint import Checkpointer

    here = describe()
    native, fallback = {**here, "bf16_matmul": "native"}, {**here, "bf16_matmul": "fallback"}
    params, paths = tiny_run({"train": {"max_steps": 10}, "lr": {"cooldown": 0.0}})
    assert params.train.precision == "auto"
    metrics = train(params, paths, recorder=Recorder(machine=fallback))
    err = capsys.readouterr().err
    assert "train: computing in fp32 (train.precision: auto; this CPU has no native bf16 matmuls)" in err
    assert metrics["precision"] == "fp32"
    loaded = Checkpointer(paths.checkpoints, 3).load_latest()
    assert loaded.state["fingerprint"]["environment.precision"] == "fp32"
    Checkpointer(paths.checkpoints, 3).mark_completed(False)  # as a run killed after its checkpoint at step 10
    params, paths = tiny_run({"train": {"max_steps": 12}, "lr": {"cooldown": 0.0}})
    with pytest.raises(SolomonError) as refused:
        train(params, paths, recorder=Recorder(machine=native))
    assert str(refused.value).startswith(
        "resume refused: environment.precision differs from the checkpoint at step 10 ('fp32' → 'bf16'); "
        "train.precision: auto resolves otherwise on this CPU; set train.precision to the checkpoint's value"
    )
    params, paths = tiny_run({"train": {"max_steps": 12, "precision": "fp32"}, "lr": {"cooldown": 0.0}})
    metrics = train(params, paths, recorder=Recorder(machine=native))
    assert metrics["resumed_from_step"] == 10 and metrics["precision"] == "fp32"


def test_a_resume_on_another_machine_kind_is_warned_and_recorded(tiny_run, capsys) -> None:
    """The kind is not in the fingerprint: the resume goes on (a pod rescheduled on another node), says which steps
    are no longer bit-identical to an uninterrupted run, and train_metrics.json records which kind trained which."""
    from solomon.machine import describe

    here = describe()
    other = {**here, "torch_capability": "DEFAULT", "kind": "x86_64 no AVX2 (no AMX), torch DEFAULT"}
    params, paths = tiny_run({"train": {"max_steps": 20}, "lr": {"cooldown": 0.0}})  # no cooldown: extendable
    assert train(params, paths, recorder=Recorder(machine=here))["machine_kinds"] == [
        {"kind": here["kind"], "steps": [1, 20]}
    ]
    params, paths = tiny_run({"train": {"max_steps": 30}, "lr": {"cooldown": 0.0}})
    metrics = train(params, paths, recorder=Recorder(machine=other))
    warning = (
        f"resuming on another machine kind ({other['kind']}): steps ≥ 21 will not be bit-identical to an "
        f"uninterrupted run on {here['kind']}"
    )
    assert warning in capsys.readouterr().err
    assert metrics["resumed_from_step"] == 20
    assert metrics["machine_kinds"] == [
        {"kind": here["kind"], "steps": [1, 20]},
        {"kind": other["kind"], "steps": [21, 30]},
    ]


@pytest.mark.parametrize("capped", [False, True])
def test_the_check_stage_says_what_the_run_will_compute_in_and_how_long(
    built_repo: Path, tmp_path: Path, capped: bool
) -> None:
    """Before any data stage: the check stage resolves train.precision for this host and times the configured step.
    oneDNN capped at AVX2 has no bf16 kernels (as an AVX2-only CPU), so auto resolves to fp32 there."""
    import subprocess
    import sys

    from conftest import ROOT, workdir

    from solomon.machine import bf16_matmul_native
    from solomon.pipeline import pipeline_env

    cwd = workdir(built_repo, tmp_path / "check")
    env = pipeline_env() | ({"ONEDNN_MAX_CPU_ISA": "AVX2"} if capped else {})
    done = subprocess.run(
        [sys.executable, str(ROOT / "stages/check.py")], cwd=cwd, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    expected = "fp32" if capped or not bf16_matmul_native() else "bf16"
    native = "has native" if expected == "bf16" else "has no native"
    line = done.stdout.splitlines()[-1]
    assert re.fullmatch(
        rf"check: train\.precision auto → {expected} on this host \(this CPU {native} bf16 matmuls; .*\): a "
        r"step takes about [0-9.e-]+ s \(probe of 2\), so train\.max_steps [0-9,]+ ≈ [0-9.,]+ min of training",
        line,
    ), line
    # the cap is named when this test sets it, or when the caller's environment did (a whole suite run capped)
    assert ("ONEDNN_MAX_CPU_ISA=AVX2" in line) is (env.get("ONEDNN_MAX_CPU_ISA") == "AVX2")
