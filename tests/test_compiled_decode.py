"""The compiled decode route (``solomon serve --decode compiled``) against the reference path and against itself:
the reference path's tokens, its logits within 1e-5, past block_size too; a sequence bit for bit the same alone or
beside a full batch; every batch size the start-up check keeps compiled before the first request, on GPT-2's
architecture and on the llama family's (Qwen3's layout)."""

from __future__ import annotations

import pytest
import torch
from test_engine import GREEDY, PROMPT, QWEN3, SAMPLED, SHORT, Seen, drive

from solomon.model.gpt import GPT, GPTConfig
from solomon.model.sampling import generate
from solomon.serving.compiled_decode import CompiledDecode
from solomon.serving.engine import Engine

BLOCK = 16

# Compiling every batch size of two models takes minutes on 2 cores: `make test-long`.
pytestmark = pytest.mark.long


@pytest.fixture(scope="module", params=[{}, QWEN3], ids=["gpt2", "qwen3"])
def model(request: pytest.FixtureRequest) -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=101, block_size=BLOCK, n_layer=2, n_head=4, n_embd=128, **request.param)).eval()


@pytest.fixture(scope="module")
def engine(model: GPT) -> Engine:
    """One compiled engine per model (compiling is the slow part): its start-up check compiles every size."""
    return Engine(model, slots=4, decode="compiled")


def test_the_start_up_compiles_every_kept_batch_size_and_says_how_long(engine: Engine) -> None:
    assert isinstance(engine.decode, CompiledDecode)
    assert set(engine.batch_sizes) <= set(engine.decode.compile_s) and engine.batch_sizes[-1] == 4
    assert engine.compile_s >= sum(engine.decode.compile_s.values()) > 0
    assert engine.compile_line().startswith("decode step compiled for batch sizes 1, 2, 4, ")


@pytest.mark.parametrize("prompt", [PROMPT, SHORT], ids=["alone", "together"])
@pytest.mark.parametrize("settings", [SAMPLED, GREEDY], ids=["sampled", "greedy"])
def test_the_compiled_route_draws_the_reference_paths_tokens_from_its_logits_within_1e_5(
    model: GPT, engine: Engine, settings, prompt: list[int]
) -> None:
    seen = Seen(prompt, 24, seed=3, **settings)  # past block_size 16: the window slides (an eager prefill)
    drive(engine, {0: [seen]})
    reference = generate(model, prompt, 24, generator=torch.Generator().manual_seed(3), **settings)
    assert seen.tokens == reference and seen.finish == "length"
    ids = prompt + seen.tokens
    for i, logits in enumerate(seen.logits):
        window = torch.tensor([ids[: len(prompt) + i]])[:, -BLOCK:]
        assert torch.allclose(logits, model(window)[0, -1], atol=1e-5, rtol=0), i


@pytest.mark.parametrize("prompt", [PROMPT, SHORT], ids=["alone", "together"])
def test_a_compiled_sequence_is_the_same_bit_for_bit_alone_beside_one_or_beside_a_full_batch(
    engine: Engine, prompt: list[int]
) -> None:
    alone = Seen(prompt, 20, seed=11)
    drive(engine, {0: [alone]})
    beside_one = Seen(prompt, 20, seed=11)
    drive(engine, {0: [Seen([1, 2, 3], 30, seed=1)], 2: [beside_one]})
    full = Seen(prompt, 20, seed=11)
    others = [Seen([7] * n, 40, seed=n) for n in range(1, 6)]  # five others for four slots: one waits
    drive(engine, {0: others[:2], 1: others[2:4], 3: [full], 5: others[4:]})
    for under_load in (beside_one, full):
        assert under_load.tokens == alone.tokens
        assert all(torch.equal(a, b) for a, b in zip(alone.logits, under_load.logits, strict=True))
    assert all(seen.finish == "length" for seen in others)


def test_a_compiled_step_runs_only_its_own_model_and_cache(model: GPT, engine: Engine) -> None:
    other = Engine(model, slots=2, shapes="load")
    with pytest.raises(ValueError, match="the model and cache it was made for"):
        engine.decode(model, other.cache, torch.zeros(1, dtype=torch.long), torch.zeros(1, dtype=torch.long),
                      torch.zeros(1, dtype=torch.long))  # fmt: skip
