"""`solomon serve` with the batched engine, as a real process on 127.0.0.1 over a copy of the tiny pipeline: a seed's
text alone, beside others and from `solomon generate` is the same; streaming, top_p, logprobs, echo and n in
OpenAI's shapes; the request schema at /openapi.json; an overload of 64 clients gets only 200 and 429; a client
gone mid-stream frees its slot."""

from __future__ import annotations

import http.client
import json
import subprocess
import threading
from pathlib import Path

import pytest
from conftest import latest_run_dir, wait_until
from serve_helpers import SOLOMON, request, start, stop, wait

from solomon.pipeline import pipeline_env

LONG = 4096  # tokens: about 15 s of the tiny model's greedy text, two at a time
ASK = {"prompt": "In the beginning", "max_tokens": 40, "seed": 5, "temperature": 0.9, "top_k": 40}


def events(port: int, body: dict) -> list[dict | str]:
    """A streamed completion's server-sent events, each parsed (``[DONE]`` kept as the string)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    connection.request("POST", "/v1/completions", json.dumps(body | {"stream": True}))
    answer = connection.getresponse()
    assert answer.status == 200 and answer.getheader("content-type").startswith("text/event-stream")
    lines = answer.read().decode().split("\n\n")
    connection.close()
    assert lines[-1] == "" and all(line.startswith("data: ") for line in lines[:-1]), lines
    return [line[6:] if line == "data: [DONE]" else json.loads(line[6:]) for line in lines[:-1]]


def concurrently(calls: list) -> list:
    answers: list = [None] * len(calls)
    threads = [threading.Thread(target=lambda i=i, c=c: answers.__setitem__(i, c())) for i, c in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers


def test_same_text_at_any_load_streaming_logprobs_echo_n_and_the_schema(repo_copy: Path) -> None:
    process, port = start(repo_copy, "--slots", "4", "--max-tokens", "64")
    try:
        wait(port, process)
        digest = request(port, "GET", "/v1/provenance")[1]["manifest_sha256"]
        alone = request(port, "POST", "/v1/completions", ASK)[1]
        for body in (ASK, ASK | {"temperature": 0}):  # sampled and greedy, alone and beside a full batch
            first = request(port, "POST", "/v1/completions", body)[1]["choices"]
            others = [
                lambda s=s: request(port, "POST", "/v1/completions", ASK | {"seed": s, "max_tokens": 64})
                for s in range(6)
            ]
            crowded = concurrently(
                [*others[:3], lambda b=body: request(port, "POST", "/v1/completions", b), *others[3:]]
            )
            assert crowded[3][1]["choices"] == first and all(a[0] in (200, 429) for a in crowded)
        settings = ["--max-new-tokens", "40", "--temperature", "0.9", "--top-k", "40", "--seed", "5", "--slots", "4"]
        generated = subprocess.run(
            [SOLOMON, "generate", "--prompt", ASK["prompt"], *settings],
            cwd=repo_copy, env=pipeline_env(), capture_output=True, text=True,
        )  # fmt: skip
        assert generated.stdout.rstrip("\n") == ASK["prompt"] + alone["choices"][0]["text"], generated.stderr

        # Streamed: chunks in OpenAI's shape adding up to the same text, a finish_reason last, then [DONE].
        for body in (ASK, ASK | {"stop": ["the", "e "]}):
            whole = request(port, "POST", "/v1/completions", body)[1]["choices"][0]
            streamed = events(port, body)
            assert streamed[-1] == "[DONE]" and all(e["system_fingerprint"] == digest for e in streamed[:-1])
            assert all(e["object"] == "text_completion" and e["model"] == alone["model"] for e in streamed[:-1])
            assert "".join(e["choices"][0]["text"] for e in streamed[:-1]) == whole["text"]
            assert [e["choices"][0]["finish_reason"] for e in streamed[:-1]][-1] == whole["finish_reason"]

        # Streamed with log-probabilities and two choices: however the pieces were joined, each choice's text and
        # entries add up to the answer without streaming.
        body = ASK | {"logprobs": 2, "n": 2, "max_tokens": 12}
        whole = request(port, "POST", "/v1/completions", body)[1]["choices"]
        streamed = events(port, body)[:-1]
        for choice in whole:
            pieces = [e["choices"][0] for e in streamed if e["choices"][0]["index"] == choice["index"]]
            assert "".join(piece["text"] for piece in pieces) == choice["text"]
            for key, entries in choice["logprobs"].items():
                assert [entry for piece in pieces for entry in piece["logprobs"][key]] == entries, key

        # What common OpenAI clients send: stream_options.include_usage ends the stream with a usage chunk (no
        # choices); stream_options without a stream is refused in one line; chat answers in one line where to go.
        body = ASK | {"max_tokens": 6, "n": 2}
        whole = request(port, "POST", "/v1/completions", body)[1]
        streamed = events(port, body | {"stream_options": {"include_usage": True}})
        assert streamed[-1] == "[DONE]" and streamed[-2]["choices"] == [] and streamed[-2]["usage"] == whole["usage"]
        assert all("usage" not in e for e in streamed[:-2])
        status, refused, _ = request(port, "POST", "/v1/completions", ASK | {"stream_options": {"include_usage": True}})
        assert status == 400 and refused["error"]["message"] == "stream_options: only with stream: true", refused
        status, chat, _ = request(
            port, "POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]}
        )
        assert status == 404 and "POST /v1/completions with a prompt" in chat["error"]["message"], chat

        nucleus = ASK | {"top_p": 0.5}
        assert (
            request(port, "POST", "/v1/completions", nucleus)[1]["choices"]
            == request(port, "POST", "/v1/completions", nucleus)[1]["choices"]
        )

        # logprobs, echo, n: choice i is the text of seed + i.
        body = ASK | {"logprobs": 3, "echo": True, "n": 2, "max_tokens": 8}
        status, answer, _ = request(port, "POST", "/v1/completions", body)
        assert status == 200 and [c["index"] for c in answer["choices"]] == [0, 1], answer
        second = request(port, "POST", "/v1/completions", ASK | {"seed": 6, "max_tokens": 8})[1]["choices"][0]
        assert answer["choices"][1]["text"] == ASK["prompt"] + second["text"]
        logprobs = answer["choices"][0]["logprobs"]
        prompt_tokens = answer["usage"]["prompt_tokens"]
        assert len(logprobs["tokens"]) == prompt_tokens + 8 == len(logprobs["text_offset"])
        assert logprobs["token_logprobs"][0] is None and logprobs["top_logprobs"][0] is None
        assert all(lp <= 0 for lp in logprobs["token_logprobs"][1:])
        assert all(len(top) <= 3 and max(top.values()) <= 0 for top in logprobs["top_logprobs"][1:])
        assert "".join(logprobs["tokens"]) == answer["choices"][0]["text"]
        assert logprobs["text_offset"][prompt_tokens] == len(ASK["prompt"])
        greedy = request(port, "POST", "/v1/completions", ASK | {"temperature": 0, "logprobs": 1})[1]["choices"][0]
        top = greedy["logprobs"]["top_logprobs"]
        assert all(list(t) == [token] for t, token in zip(top, greedy["logprobs"]["tokens"], strict=True))

        assert request(port, "GET", "/v1/models")[1]["data"][0]["id"] == alone["model"]
        schema = request(port, "GET", "/openapi.json")[1]
        completions = schema["paths"]["/v1/completions"]["post"]["requestBody"]["content"]["application/json"]
        fields = completions["schema"]["properties"]
        assert {"prompt", "top_p", "logprobs", "echo", "n", "stream"} <= set(fields)
        assert fields["n"]["maximum"] == 4 and completions["schema"]["additionalProperties"] is False
    finally:
        stop(process)
    assert process.returncode == 0, process.stderr.read()


def one_text_per_seed(repo: Path, port: int, route: list[str]) -> None:
    """A seed's text at 4 slots alone, beside others under load, and from `solomon generate` with ``route``'s
    flags: the same."""
    alone = request(port, "POST", "/v1/completions", ASK)[1]["choices"]
    others = [lambda s=s: request(port, "POST", "/v1/completions", ASK | {"seed": s}) for s in range(5)]
    crowded = concurrently([*others[:2], lambda: request(port, "POST", "/v1/completions", ASK), *others[2:]])
    assert crowded[2][1]["choices"] == alone and all(answer[0] in (200, 429) for answer in crowded)
    settings = ["--max-new-tokens", "40", "--temperature", "0.9", "--top-k", "40", "--seed", "5", "--slots", "4"]
    generated = subprocess.run(
        [SOLOMON, "generate", "--prompt", ASK["prompt"], *settings, *route],
        cwd=repo, env=pipeline_env(), capture_output=True, text=True,
    )  # fmt: skip
    assert generated.stdout.rstrip("\n") == ASK["prompt"] + alone[0]["text"], generated.stderr


def test_bf16_serves_the_same_text_at_any_load_and_says_so_in_its_provenance(repo_copy: Path) -> None:
    process, port = start(repo_copy, "--slots", "4", "--precision", "bf16")
    try:
        wait(port, process)
        provenance = request(port, "GET", "/v1/provenance")[1]
        assert provenance["precision"] == "bf16" and provenance["decode_batch_sizes"][-1] == 4
        one_text_per_seed(repo_copy, port, ["--precision", "bf16"])
    finally:
        stop(process)
    assert process.returncode == 0, process.stderr.read()


@pytest.mark.long  # compiling the decode step for each batch size: most of a minute on 2 cores
def test_the_compiled_route_serves_one_text_per_seed_at_any_load_passes_the_answers_check_and_says_so(
    repo_copy: Path,
) -> None:
    run = latest_run_dir(repo_copy)
    process, port = start(repo_copy, "--slots", "4", "--decode", "compiled")
    try:
        wait(port, process, timeout=600)
        provenance = request(port, "GET", "/v1/provenance")[1]
        assert provenance["decode"] == "compiled" and provenance["decode_batch_sizes"][-1] == 4
        one_text_per_seed(repo_copy, port, ["--decode", "compiled"])
        # the run's weights, recomputed here eagerly, answer as the compiled server does (fresh prompts, logprobs)
        checked = subprocess.run(
            [SOLOMON, "lineage", "--url", f"http://127.0.0.1:{port}", "--answers-only", "--run", run.name],
            cwd=repo_copy, env=pipeline_env(), capture_output=True, text=True,
        )  # fmt: skip
        assert checked.returncode == 0 and "holds" in checked.stdout, checked.stdout + checked.stderr
        print(checked.stdout)
    finally:
        stop(process)
    assert process.returncode == 0
    assert "engine: decode step compiled for batch sizes 1, 2, 4" in process.stderr.read()


@pytest.mark.long
def test_an_overload_gets_only_200_and_429_and_a_client_gone_mid_stream_frees_its_slot(repo_copy: Path) -> None:
    process, port = start(repo_copy, "--slots", "2", "--queue", "4", "--max-tokens", str(LONG), "--timeout", "120")
    try:
        wait(port, process)
        body = ASK | {"max_tokens": 48}
        answers = concurrently(
            [lambda s=s: request(port, "POST", "/v1/completions", body | {"seed": s}) for s in range(64)]
        )
        codes = [status for status, _, _ in answers]
        assert set(codes) == {200, 429} and codes.count(200) >= 6, codes

        # Six streams fill two slots and the queue of four (a seventh is refused); one client hangs up after its
        # first chunk, and its sequence ends at once, the other five still in flight.
        def in_flight() -> int:
            return request(port, "GET", "/readyz")[1]["in_flight"]

        # Greedy text that never reaches the end-of-document token: its sequence runs all LONG tokens.
        endless = next(
            body
            for prompt in ("In the beginning", "And", "The", "the the the", "and the")
            if request(
                port, "POST", "/v1/completions", body := {"prompt": prompt, "max_tokens": LONG, "temperature": 0}
            )[1]["choices"][0]["finish_reason"]
            == "length"
        )
        streams = []
        for _ in range(6):
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            connection.request("POST", "/v1/completions", json.dumps(endless | {"stream": True}))
            streams.append(connection)
        wait_until(lambda: in_flight() == 6, "six streams in flight", process=process, timeout=10)
        assert request(port, "POST", "/v1/completions", ASK)[0] == 429
        first = streams[0].getresponse()
        first.fp.readline()  # in a slot: its events have begun (a queued one's have not)
        first.close()
        streams[0].close()
        wait_until(lambda: in_flight() == 5, "the hung-up stream's sequence to end", process=process, timeout=10)
        assert request(port, "POST", "/v1/completions", ASK | {"max_tokens": 8})[0] == 200
        for connection in streams[1:]:
            connection.close()
        wait_until(lambda: in_flight() == 0, "every stream's sequence to end", process=process, timeout=30)
    finally:
        stop(process)
    assert process.returncode == 0, process.stderr.read()
