"""`solomon serve`'s completions take ``prompt`` as OpenAI defines it — a string, a list of strings, a list of token
ids, a list of token-id lists — over a copy of the tiny pipeline, as a real process: choices prompt-major, each
prompt answered as it is alone, token ids answered as their text, ``echo`` with ``logprobs`` scoring every prompt
token as the run's weights do here (``max_tokens: 0`` scores alone), and each bad shape refused in one line."""

from __future__ import annotations

import hashlib
import http.client
import json
from pathlib import Path

import torch
from conftest import latest_run_dir
from serve_helpers import request, start, stop, wait

from solomon.data.tokens import load_tokenizer
from solomon.model import weights

SETTINGS = {"max_tokens": 5, "seed": 11, "temperature": 0.9, "top_k": 20}


def complete(port: int, body: dict) -> dict:
    status, answer, _ = request(port, "POST", "/v1/completions", body)
    assert status == 200, answer
    return answer


def test_list_prompts_answer_prompt_major_each_as_alone_and_token_ids_as_their_text(repo_copy: Path) -> None:
    digest = hashlib.sha256((latest_run_dir(repo_copy) / "manifest.json").read_bytes()).hexdigest()
    tokenizer = load_tokenizer(repo_copy / "data/tokenizer.json")
    prompts = ["In the beginning", "And the LORD said", "Blessed"]
    process, port = start(repo_copy, "--slots", "4", "--queue", "8")
    try:
        wait(port, process)
        together = complete(port, {"prompt": prompts, "n": 2, **SETTINGS})
        assert together["system_fingerprint"] == digest
        assert [choice["index"] for choice in together["choices"]] == list(range(6))
        for p, prompt in enumerate(prompts):
            alone = complete(port, {"prompt": prompt, "n": 2, **SETTINGS})["choices"]
            assert [c["text"] for c in together["choices"][2 * p : 2 * p + 2]] == [c["text"] for c in alone], prompt
        usage = together["usage"]
        assert usage["prompt_tokens"] == sum(len(tokenizer.encode(p).ids) for p in prompts)

        ids = [tokenizer.encode(p).ids for p in prompts]
        as_ids = complete(port, {"prompt": ids, "n": 2, **SETTINGS})
        assert [c["text"] for c in as_ids["choices"]] == [c["text"] for c in together["choices"]]
        one = complete(port, {"prompt": ids[0], **SETTINGS})
        assert one["choices"][0]["text"] == together["choices"][0]["text"]

        # streamed: every choice of every prompt, its chunks adding up to the text it gets without stream
        streamed = stream_texts(port, {"prompt": prompts, "n": 2, "stream": True, **SETTINGS})
        assert streamed == {c["index"]: c["text"] for c in together["choices"]}
    finally:
        stop(process)


def stream_texts(port: int, body: dict) -> dict[int, str]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    connection.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    lines = connection.getresponse().read().decode().split("\n\n")
    connection.close()
    texts: dict[int, str] = {}
    for line in lines:
        data = line.removeprefix("data: ")
        if data and data != "[DONE]":
            for choice in json.loads(data)["choices"]:
                texts[choice["index"]] = texts.get(choice["index"], "") + choice["text"]
    return texts


def test_echo_scores_every_prompt_token_as_the_weights_do_and_max_tokens_0_scores_alone(repo_copy: Path) -> None:
    model = weights.load(repo_copy / "models").eval()
    block = model.config.block_size
    tokenizer = load_tokenizer(repo_copy / "data/tokenizer.json")
    eod = tokenizer.token_to_id("<|endoftext|>")
    sequences = [[eod, *tokenizer.encode("In the beginning God created").ids], tokenizer.encode(" and the earth").ids]
    sequences.append(tokenizer.encode("And God said, Let there be light: " * 4).ids[:block])  # the whole window
    process, port = start(repo_copy, "--slots", "2", "--queue", "4")
    try:
        wait(port, process)
        scored = complete(port, {"prompt": sequences, "max_tokens": 0, "echo": True, "logprobs": 1})
        lm_eval_style = complete(port, {"prompt": sequences, "max_tokens": 1, "echo": True, "logprobs": 1})
    finally:
        stop(process)
    for sequence, choice, generated in zip(sequences, scored["choices"], lm_eval_style["choices"], strict=True):
        entries = choice["logprobs"]
        assert choice["finish_reason"] == "length" and len(entries["tokens"]) == len(sequence)
        assert entries["token_logprobs"][0] is None and entries["top_logprobs"][0] is None
        with torch.no_grad():
            mine = torch.log_softmax(model(torch.tensor([sequence[:-1]]))[0].float(), dim=-1)
        want = [float(mine[i, token]) for i, token in enumerate(sequence[1:])]
        assert max(abs(a - b) for a, b in zip(entries["token_logprobs"][1:], want, strict=True)) < 1e-4
        # with one token generated (what lm-eval sends), the prompt's entries are the same and one more follows
        assert generated["logprobs"]["token_logprobs"][: len(sequence)] == entries["token_logprobs"]
        assert len(generated["logprobs"]["tokens"]) == len(sequence) + 1
    assert scored["usage"]["completion_tokens"] == 0


def test_each_bad_prompt_shape_is_refused_in_one_line(repo_copy: Path) -> None:
    vocab = weights.load(repo_copy / "models").config.vocab_size
    bad = {
        "an empty list": ({"prompt": []}, "prompt: an empty list"),
        "mixed strings and ids": ({"prompt": ["In", 5]}, "prompt: a list mixes strings and token ids"),
        "mixed ids and lists": ({"prompt": [5, [6]]}, "prompt: a list mixes token ids and token-id lists"),
        "an empty id list": ({"prompt": [[5], []]}, "prompt: prompt 1 is an empty list of token ids"),
        "an id past the vocabulary": ({"prompt": [5, vocab]}, f"prompt: token id {vocab} is outside"),
        "a negative id": ({"prompt": [[5], [-1]]}, "prompt: prompt 1: token id -1 is outside"),
        "a float id": ({"prompt": [5, 1.5]}, "prompt: item 1 is a number"),
        "a boolean": ({"prompt": [True]}, "prompt: item 0 is a boolean"),
        "an object": ({"prompt": {"text": "x"}}, "prompt: give a string, a list of strings"),
        "a nested string": ({"prompt": [["x"]]}, "prompt: prompt 0 holds something other than token ids"),
        "an empty string in a list": ({"prompt": ["In", ""]}, "prompt: prompt 1: empty"),
        "too many prompts": ({"prompt": ["a"] * 7}, "prompt: 7 prompts × n 1 = 7 sequences, more than"),
        "prompts × n": ({"prompt": ["a", "b"], "n": 4}, "prompt: 2 prompts × n 4 = 8 sequences"),
        "too many tokens in all": ({"prompt": [[5] * 30] * 5}, "prompt: 150 tokens in all, more than"),
        "max_tokens 0 without echo": ({"prompt": "In", "max_tokens": 0}, "max_tokens: 0 generates nothing"),
        "echo past the window": (
            {"prompt": [5] * 40, "echo": True, "logprobs": 0, "max_tokens": 0},
            "prompt: 40 tokens; echo with logprobs scores at most",
        ),
    }
    process, port = start(
        repo_copy, "--slots", "2", "--queue", "4", "--max-request-tokens", "100", "--max-prompt-tokens", "64"
    )
    try:
        wait(port, process)
        for name, (body, message) in bad.items():
            status, answer, _ = request(port, "POST", "/v1/completions", body)
            error = answer.get("error", {})
            assert status == 400 and error.get("message", "").startswith(message), (name, status, answer)
            assert "\n" not in error["message"] and error["param"] == message.split(":")[0], name
        assert request(port, "POST", "/v1/completions", {"prompt": ["In", "And"], "max_tokens": 2})[0] == 200
    finally:
        stop(process)
