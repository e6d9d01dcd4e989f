"""The answers check's own parts (solomon/lineage/answers.py): prompts drawn from a nonce, the greedy reference
of the run's weights, and the token-by-token verdict — equal, a log-probability past the tolerance, a near-tie, a
departure — in both OpenAI shapes and in text. Real servers answer it in tests/test_lineage.py."""

from __future__ import annotations

import copy

import pytest
import torch

from solomon.data.tokenizer import train_tokenizer
from solomon.lineage.answers import (
    TOLERANCES,
    Verdict,
    check_completions,
    check_texts,
    compare_tokens,
    draw,
    expected,
    token_entries,
)
from solomon.model.gpt import GPT, GPTConfig
from solomon.params import TokenizerParams

TEXT = "In the beginning God created the heaven and the earth. And the earth was without form, and void. " * 40


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer([TEXT], TokenizerParams(vocab_size=300, min_frequency=1))


def model_of(tokenizer, seed: int) -> GPT:
    torch.manual_seed(seed)
    config = GPTConfig(vocab_size=tokenizer.get_vocab_size(), block_size=64, n_layer=1, n_head=2, n_embd=32)
    return GPT(config).eval()


def server_of(model: GPT, tokenizer, logprobs: bool = True, shape: str = "tokens"):
    """What an OpenAI-style server running ``model`` greedily answers (its reference, as a server computes it)."""

    def ask(body: dict) -> dict:
        want = expected(model, tokenizer, body["prompt"], body["max_tokens"], None)
        if not logprobs:
            return {"choices": [{"text": want.text[len(body["prompt"]) :], "logprobs": None}]}
        if shape == "content":
            entries = [{"token": t, "logprob": p} for t, p in zip(want.texts, want.logprobs, strict=True)]
            return {"choices": [{"text": "", "logprobs": {"content": entries}}]}
        return {"choices": [{"text": "", "logprobs": {"tokens": want.texts, "token_logprobs": want.logprobs}}]}

    return ask


def test_a_nonce_draws_the_same_prompts_and_another_nonce_others(tokenizer) -> None:
    first, again, other = draw(tokenizer, "ab" * 16), draw(tokenizer, "ab" * 16), draw(tokenizer, "cd" * 16)
    assert first.prompts == again.prompts and first.prompts != other.prompts
    assert len(first.prompts) == 8 and all(prompt and tokenizer.encode(prompt).ids for prompt in first.prompts)
    assert draw(tokenizer).nonce != draw(tokenizer).nonce  # fresh by default


@pytest.mark.parametrize("shape", ["tokens", "content"])
def test_the_same_weights_hold_and_other_weights_leave_at_a_named_token(tokenizer, shape: str) -> None:
    model, challenge = model_of(tokenizer, 0), draw(tokenizer, "01" * 16)
    verdict = check_completions(challenge, server_of(model, tokenizer, shape=shape), model, tokenizer, None)
    assert verdict.holds and verdict.mode == "logprobs" and verdict.equal == verdict.compared > 0
    assert verdict.max_delta == 0.0 and "tokens equal over 8 fresh prompts" in verdict.line()

    other = model_of(tokenizer, 1)
    verdict = check_completions(challenge, server_of(other, tokenizer, shape=shape), model, tokenizer, None)
    assert not verdict.holds and verdict.departure.startswith("prompt ")


def test_one_tensor_changed_slightly_is_caught_by_the_logprobs_and_passes_on_tokens_alone(tokenizer) -> None:
    model, challenge = model_of(tokenizer, 0), draw(tokenizer, "02" * 16)
    changed = copy.deepcopy(model)
    with torch.no_grad():
        changed.blocks[0].mlp.fc.weight.mul_(1.01)
    verdict = check_completions(challenge, server_of(changed, tokenizer), model, tokenizer, None)
    assert not verdict.holds and verdict.max_delta > TOLERANCES["fp32"][0], verdict.line()
    text_only = check_completions(challenge, server_of(changed, tokenizer, logprobs=False), model, tokenizer, None)
    assert text_only.mode == "greedy text" and "greedy text only" in text_only.line()


def test_a_near_tie_stops_the_prompt_and_a_wide_gap_departs() -> None:
    def verdict() -> Verdict:
        return Verdict("logprobs", 1e-4, "fp32")

    from solomon.lineage.answers import Expected

    want = Expected([5, 6], [" a", " b"], [-0.5, -0.7], [1e-5, 2.0], "x a b")
    tie = verdict()
    compare_tokens(tie, 0, want, [(" c", -0.5), (" b", -0.7)])
    assert tie.ties == 1 and tie.departure is None
    gap = verdict()
    compare_tokens(gap, 0, want, [(" a", -0.5), (" c", -0.9)])
    assert gap.departure == "prompt 0 token 1: the server answered ' c' (logprob -0.900000), the run's weights ' b' " \
        "(logprob -0.700000)"  # fmt: skip
    far = verdict()
    compare_tokens(far, 0, want, [(" a", -0.5002), (" b", -0.7)])
    assert far.departure is not None and far.max_delta == pytest.approx(2e-4)
    short = verdict()
    compare_tokens(short, 0, want, [(" a", -0.5)])
    assert "the server answered '<end>'" in short.departure


def test_token_entries_read_both_openai_shapes_and_none() -> None:
    legacy = {"logprobs": {"tokens": ["a", "b"], "token_logprobs": [-1.0, -2.0]}}
    content = {"logprobs": {"content": [{"token": "a", "logprob": -1.0}, {"token": "b", "logprob": -2.0}]}}
    assert token_entries(legacy) == token_entries(content) == [("a", -1.0), ("b", -2.0)]
    assert token_entries({"logprobs": None}) is None and token_entries({}) is None


def test_sampled_text_answers_hold_for_the_same_weights_and_not_for_others(tokenizer) -> None:
    from solomon.serving.generate import Completer
    from solomon.serving.loader import Served

    def completer_of(model: GPT) -> Completer:
        samples = {"temperature": 1.0, "top_k": None, "max_new_tokens": 16}
        served = Served(model, tokenizer, None, samples, "run", "0" * 64, {}, {}, "", "", 1, "fp32")
        return Completer(served, slots=2)

    challenge = draw(tokenizer, "03" * 16)
    mine, same, other = (completer_of(model_of(tokenizer, seed)) for seed in (0, 0, 1))

    def server(completer: Completer):
        return lambda prompts, seeds: [completer.complete(p, 16, seed=s) for p, s in zip(prompts, seeds, strict=True)]

    def local(prompt: str, seed: int) -> str:
        return mine.complete(prompt, 16, seed=seed)

    verdict = check_texts(challenge, server(same), local)
    assert verdict.holds and verdict.mode == "sampled text" and "8/8 sampled texts equal" in verdict.line()
    verdict = check_texts(challenge, server(other), local)
    assert not verdict.holds and verdict.departure.startswith("prompt ")
