"""`solomon serve`'s GET /metrics, scraped from a real process on 127.0.0.1 over a copy of the tiny pipeline after a
known set of requests (plain, streamed, two 400s, a 404, 429s with one slot and no queue, a client gone
mid-stream): each count is exactly what the clients saw, and the gauges are back to 0 once it is idle."""

from __future__ import annotations

import http.client
import json
from pathlib import Path

from conftest import wait_until
from prometheus_client.parser import text_string_to_metric_families
from serve_helpers import request, start, stop, wait

LONG = 1024  # tokens: seconds of the tiny model's text, so a second request arrives while it runs
ASK = {"prompt": "In the beginning", "max_tokens": 12, "seed": 3, "temperature": 0.9, "logprobs": 0}
COMPLETIONS = "/v1/completions"


def scrape(port: int) -> dict[str, float]:
    """Every sample of /metrics by its name and labels, e.g. ``solomon_requests_total{endpoint=/readyz,status=200}``."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    connection.request("GET", "/metrics")
    answer = connection.getresponse()
    assert answer.status == 200 and answer.getheader("content-type").startswith("text/plain"), answer.status
    text = answer.read().decode()
    connection.close()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()) if k != "le")
            if "le" not in sample.labels:
                samples[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return samples


def requests_by_status(samples: dict[str, float], endpoint: str) -> dict[str, int]:
    prefix = f"solomon_requests_total{{endpoint={endpoint},status="
    return {name[len(prefix) : -1]: int(value) for name, value in samples.items() if name.startswith(prefix)}


def open_stream(port: int, body: dict) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    """A streamed completion in a slot: its first event has come."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    connection.request("POST", COMPLETIONS, json.dumps(body | {"stream": True}))
    answer = connection.getresponse()
    assert answer.status == 200
    return connection, answer


def streamed_tokens(answer: http.client.HTTPResponse, first: bytes = b"") -> list[int]:
    """Tokens per choice of a streamed answer read to its end (logprobs: one entry per generated token)."""
    counts: dict[int, int] = {}
    for line in (first + answer.read()).decode().split("\n\n"):
        if line.startswith("data: {"):
            choice = json.loads(line[6:])["choices"][0]
            counts[choice["index"]] = counts.get(choice["index"], 0) + len(choice["logprobs"]["tokens"])
    return list(counts.values())


def test_metrics_count_what_the_clients_saw(repo_copy: Path) -> None:
    process, port = start(repo_copy, "--slots", "1", "--queue", "0", "--max-tokens", str(LONG))
    try:
        wait(port, process)
        before = scrape(port)
        assert before["solomon_slots_total"] == 1 and before["solomon_completion_tokens_total"] == 0
        seen: dict[int, int] = {}  # status -> answers, of /v1/completions
        choices: list[int] = []  # tokens generated per choice
        prompt_tokens = 0

        def ask(body: dict) -> dict:
            nonlocal prompt_tokens
            status, answer, _ = request(port, "POST", COMPLETIONS, body)
            seen[status] = seen.get(status, 0) + 1
            if status == 200:
                choices.extend(len(choice["logprobs"]["tokens"]) for choice in answer["choices"])
                assert sum(choices[-len(answer["choices"]) :]) == answer["usage"]["completion_tokens"]
                prompt_tokens += answer["usage"]["prompt_tokens"]
            return answer

        prompt = ask(ASK)["usage"]["prompt_tokens"]
        ask(ASK | {"seed": 4, "temperature": 0})
        for status, raw in ((400, b'{"prompt": "x",'), (400, json.dumps(ASK | {"max_tokens": LONG + 1}).encode())):
            assert request(port, "POST", COMPLETIONS, raw=raw)[0] == status
            seen[status] = seen.get(status, 0) + 1
        assert request(port, "GET", "/no/such/path")[0] == 404

        # A stream in the one slot, no queue: the next request is refused with 429 (tried again should the stream
        # have ended at once, at its end-of-document token).
        for seed in range(5):
            connection, stream = open_stream(port, ASK | {"max_tokens": LONG, "seed": seed})
            first = stream.readline()
            refused = ask(ASK)
            choices.extend(streamed_tokens(stream, first))
            prompt_tokens += prompt
            seen[200] += 1
            connection.close()
            if "error" in refused:
                break
        assert seen.get(429, 0) >= 1, seen
        connection, stream = open_stream(port, ASK | {"seed": 9})
        choices.extend(streamed_tokens(stream))
        connection.close()
        prompt_tokens += prompt
        seen[200] += 1

        after = scrape(port)
        assert requests_by_status(after, COMPLETIONS) == {str(k): v for k, v in seen.items()}, (seen, after)
        assert requests_by_status(after, "/readyz")["200"] == 1  # wait() asks until the first 200
        assert requests_by_status(after, "unmatched") == {"404": 1}
        assert requests_by_status(after, "/metrics") == {"200": 1}  # the scrape before; this one counts after
        assert after["solomon_completion_tokens_total"] == sum(choices)
        assert after["solomon_prompt_tokens_total"] == prompt_tokens
        first_tokens = sum(1 for tokens in choices if tokens)
        assert after["solomon_time_to_first_token_seconds_count"] == first_tokens
        assert after["solomon_time_per_output_token_seconds_count"] == sum(choices) - first_tokens
        assert after["solomon_queue_depth_sequences"] == 0 and after["solomon_slots_busy"] == 0

        # A client gone mid-stream: one 200, the tokens drawn before its slot went back, the gauges back to 0.
        connection, stream = open_stream(port, ASK | {"max_tokens": LONG, "temperature": 0})
        stream.readline()
        connection.close()
        wait_until(lambda: scrape(port)["solomon_slots_busy"] == 0, "the slot to go back", process=process)
        gone = scrape(port)
        assert requests_by_status(gone, COMPLETIONS)["200"] == seen[200] + 1
        drawn = gone["solomon_completion_tokens_total"] - after["solomon_completion_tokens_total"]
        assert drawn >= 1 and gone["solomon_time_to_first_token_seconds_count"] == first_tokens + 1
        assert gone["solomon_time_per_output_token_seconds_count"] == sum(choices) + drawn - first_tokens - 1
        assert (
            gone["solomon_queue_depth_sequences"] == 0 and gone["solomon_prompt_tokens_total"] == prompt_tokens + prompt
        )
    finally:
        stop(process)
    assert process.returncode == 0, process.stderr.read()
