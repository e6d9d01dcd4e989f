"""The batched engine against the reference path (the whole window through ``GPT.forward`` per token): the same
tokens, logits within 1e-5, past block_size too; a sequence's tokens and logits bit for bit the same alone or
beside others arriving at any step; and the load-dependent batch shape shown to break that. Each test runs on
GPT-2's architecture and on a model with every architecture option."""

from __future__ import annotations

import copy
import time

import numpy as np
import pytest
import torch

from lab.bench.precision import precision_scores
from solomon.model.gpt import GPT, GPTConfig
from solomon.model.sampling import generate
from solomon.serving.engine import Engine, Sequence
from solomon.serving.precision import in_precision

BLOCK = 16


# GPT-2's architecture, the same with every architecture option on (rotary positions, QK-norm, squared ReLU), and
# the llama family with QK-norm (Qwen3's layout: RMSNorm and QK-norm with gains, SwiGLU).
QWEN3 = {"family": "llama", "position": "rotary", "activation": "swiglu", "qk_norm": True}


@pytest.fixture(scope="module", params=[{}, {"position": "rotary", "qk_norm": True, "activation": "relu2"}, QWEN3],
                ids=["gpt2", "options", "qwen3"])  # fmt: skip
def model(request: pytest.FixtureRequest) -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=101, block_size=BLOCK, n_layer=2, n_head=4, n_embd=128, **request.param)).eval()


class Seen:
    """What a sequence told its listener: tokens, the logits each came from, how it finished."""

    def __init__(self, prompt: list[int], max_tokens: int, seed: int, **settings) -> None:
        self.tokens: list[int] = []
        self.logits: list[torch.Tensor] = []
        self.finish: str | None = None
        settings = {"temperature": 0.8, "top_k": 20} | settings
        self.sequence = Sequence(prompt, max_tokens, seed=seed, on_token=self.token, on_finish=self.done, **settings)

    def token(self, token: int, logits: torch.Tensor) -> bool:
        self.tokens.append(token)
        self.logits.append(logits.clone())
        return True

    def done(self, reason: str) -> None:
        self.finish = reason


def drive(engine: Engine, arrivals: dict[int, list[Seen]]) -> None:
    """Step ``engine`` until idle, submitting ``arrivals[step]`` before each step."""
    step = 0
    while engine.busy() or any(at >= step for at in arrivals):
        for seen in arrivals.get(step, []):
            engine.submit(seen.sequence)
        engine.step()
        step += 1


PROMPT = [5, 17, 42, 8, 99, 3]  # longer than the tests' 4 slots: prefilled alone
SHORT = [5, 17, 42]  # no longer than 4 slots: prefilled as rows of decode steps, together with other short prompts
SAMPLED = {"temperature": 0.8, "top_k": 20}
GREEDY = {"temperature": 1.0, "top_k": 1}
NUCLEUS = {"temperature": 1.0, "top_k": None, "top_p": 0.7}


@pytest.fixture(scope="module")
def bf16_model(model: GPT) -> GPT:
    return in_precision(copy.deepcopy(model), "bf16")


@pytest.fixture(scope="module")
def fp32_model(model: GPT) -> GPT:
    """The fp32 model as the server holds it: packed linear layers."""
    return in_precision(copy.deepcopy(model), "fp32")


@pytest.mark.parametrize("prompt", [PROMPT, SHORT], ids=["alone", "together"])
@pytest.mark.parametrize("packed", [False, True], ids=["plain", "packed"])
@pytest.mark.parametrize("settings", [SAMPLED, GREEDY, NUCLEUS], ids=["sampled", "greedy", "nucleus"])
def test_the_engine_draws_the_reference_paths_tokens_from_its_logits_within_1e_5(
    model: GPT, fp32_model: GPT, settings, packed: bool, prompt: list[int]
) -> None:
    # 6 (or 3) prompt tokens + 24 new: past block_size 16, so the window slides for the last 14 (or 11).
    seen = Seen(prompt, 24, seed=3, **settings)
    drive(Engine(fp32_model if packed else model, slots=4), {0: [seen]})
    reference = generate(model, prompt, 24, generator=torch.Generator().manual_seed(3), **settings)
    assert seen.tokens == reference and seen.finish == "length"
    ids = prompt + seen.tokens
    for i, logits in enumerate(seen.logits):
        window = torch.tensor([ids[: len(prompt) + i]][-BLOCK:])[:, -BLOCK:]
        assert torch.allclose(logits, model(window)[0, -1], atol=1e-5, rtol=0), i


def test_prompts_prefilled_together_give_each_its_plain_forwards_logits_within_1e_5(model: GPT) -> None:
    prompts = [SHORT, [9, 1], [4, 4, 4, 4], [60]]  # 10 rows: chunks of 4, a prompt across two of them
    windows: list[torch.Tensor] = []
    seen = [Seen(prompt, 2, seed=n) for n, prompt in enumerate(prompts)]
    for each in seen:
        each.sequence.on_prompt = windows.append
    drive(Engine(model, slots=4), {0: seen})
    for prompt, window in zip(prompts, windows, strict=True):
        assert torch.allclose(window, model(torch.tensor([prompt]))[0], atol=1e-5, rtol=0)


def test_bf16_runs_every_linear_layer_in_bf16_near_the_fp32_logits(model: GPT, bf16_model: GPT) -> None:
    assert bf16_model.wte.weight.dtype == torch.float32 and bf16_model.lm_head.weight.dtype == torch.bfloat16
    assert all(block.mlp.fc.weight.dtype == torch.bfloat16 for block in bf16_model.blocks)
    ids = torch.tensor([PROMPT])
    exact, approx = model(ids), bf16_model(ids)
    assert approx.dtype == torch.float32 and not torch.equal(exact, approx)
    assert (exact - approx).abs().max() < 0.05 * exact.abs().max()
    with pytest.raises(ValueError, match="precision 'fp16'"):
        in_precision(model, "fp16")


@pytest.mark.parametrize("prompt", [PROMPT, SHORT], ids=["alone", "together"])
@pytest.mark.parametrize("precision", ["plain", "fp32", "bf16"])
@pytest.mark.parametrize("shapes", ["checked", "fixed"])
@pytest.mark.parametrize("settings", [SAMPLED, GREEDY], ids=["sampled", "greedy"])
def test_a_sequence_is_the_same_bit_for_bit_alone_beside_one_or_beside_a_full_batch(
    model: GPT, fp32_model: GPT, bf16_model: GPT, settings, shapes: str, precision: str, prompt: list[int]
) -> None:
    model = {"plain": model, "fp32": fp32_model, "bf16": bf16_model}[precision]
    alone = Seen(prompt, 20, seed=11, **settings)
    drive(Engine(model, slots=4, shapes=shapes), {0: [alone]})
    beside_one = Seen(prompt, 20, seed=11, **settings)
    drive(Engine(model, slots=4, shapes=shapes), {0: [Seen([1, 2, 3], 30, seed=1)], 2: [beside_one]})
    full = Seen(prompt, 20, seed=11, **settings)
    others = [Seen([7] * n, 40, seed=n) for n in range(1, 6)]  # five others for four slots: one waits
    drive(Engine(model, slots=4, shapes=shapes), {0: others[:2], 1: others[2:4], 3: [full], 5: others[4:]})
    # Arriving with three other short prompts: 2 + 3 + 1 + len(prompt) rows, prefilled in chunks of 4 together.
    crowd = Seen(prompt, 20, seed=11, **settings)
    drive(Engine(model, slots=4, shapes=shapes), {0: [Seen([8, 8], 30, seed=2), Seen([1, 2, 3], 30, seed=1),
                                                      Seen([6], 30, seed=3), crowd]})  # fmt: skip
    for under_load in (beside_one, full, crowd):
        assert under_load.tokens == alone.tokens
        assert all(torch.equal(a, b) for a, b in zip(alone.logits, under_load.logits, strict=True))
    assert all(seen.finish == "length" for seen in others)


def test_a_load_dependent_batch_shape_changes_the_logits_so_the_invariance_test_can_fail(model: GPT) -> None:
    runs = []
    for company in ([], [Seen([7] * n, 40, seed=n) for n in range(1, 4)]):
        seen = Seen(PROMPT, 8, seed=11)
        drive(Engine(model, slots=4, shapes="load"), {0: [seen, *company]})
        runs.append(seen)
    alone, crowded = runs
    assert not all(torch.equal(a, b) for a, b in zip(alone.logits, crowded.logits, strict=True))


class RowCountDependent(torch.nn.Module):
    """An output layer whose rounding changes with the batch's row count, as a GEMM kernel's may."""

    def __init__(self, linear: torch.nn.Linear) -> None:
        super().__init__()
        self.linear = linear

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x) + (x.shape[0] % 4) * 1e-6


def test_the_start_up_check_keeps_only_batch_sizes_that_give_every_row_its_full_batch_bits(
    model: GPT, bf16_model: GPT
) -> None:
    for served in (model, bf16_model):  # which sizes pass is the host's kernels' say: fp32 on Intel keeps only 8
        native = Engine(served, slots=8).batch_sizes
        assert native[-1] == 8 and set(native) <= {1, 2, 4, 8}
        changed = copy.deepcopy(served)
        changed.lm_head = RowCountDependent(changed.lm_head)  # 4 and 8 rows round as the full batch; 1 and 2 do not
        assert Engine(changed, slots=8).batch_sizes == tuple(size for size in native if size % 4 == 0)
        assert Engine(changed, slots=8, shapes="fixed").batch_sizes == (8,)
        assert Engine(changed, slots=8).cache.k[0].abs().sum() == 0  # the check leaves the cache as it found it


def test_stop_token_cancel_and_deadline_free_their_slots(model: GPT) -> None:
    probe = Seen(PROMPT, 10, seed=2)
    drive(Engine(model, slots=1), {0: [probe]})
    first_new = next(i for i, token in enumerate(probe.tokens) if i and token not in probe.tokens[:i])
    stopped = Seen(PROMPT, 10, seed=2, stop_id=probe.tokens[first_new])
    late = Seen(PROMPT, 5, seed=2, deadline=time.monotonic() - 1)
    cancelled = Seen(PROMPT, 50, seed=2)
    after = Seen(PROMPT, 10, seed=2)
    engine = Engine(model, slots=1)
    drive(engine, {0: [stopped, late, cancelled], 3: [after]})
    assert stopped.tokens == probe.tokens[:first_new] and stopped.finish == "stop"
    assert late.finish == "timeout" and late.tokens == []
    assert cancelled.finish == "length"  # nobody cancelled it: now one that is
    cancelled = Seen(PROMPT, 50, seed=2)
    engine.submit(cancelled.sequence)
    engine.step()
    cancelled.sequence.cancelled = True
    engine.step()
    assert cancelled.finish == "cancelled" and not engine.busy() and after.tokens == probe.tokens


def test_the_precision_bench_scores_a_model_in_each_serving_precision(model: GPT) -> None:
    tokens = np.random.default_rng(0).integers(0, 101, 200).astype(np.uint16)
    scores = precision_scores(model, {"val": tokens}, np.full(101, 3), batch_size=4)
    assert set(scores) == {"fp32", "bf16"} and model.lm_head.weight.dtype == torch.float32  # scored on copies
    fp32, bf16 = scores["fp32"]["val"], scores["bf16"]["val"]
    assert fp32["loss"] != bf16["loss"] and abs(fp32["loss"] - bf16["loss"]) < 0.05
