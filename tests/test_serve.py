"""`solomon serve` as a real process on 127.0.0.1 over a copy of the tiny pipeline: ready only after
verification, refuses tampered weights, answers with the manifest digest, repeats a seed, refuses each bad request
with a 4xx JSON error and keeps serving, sheds load beyond its queue, and drains in-flight requests on SIGTERM."""

from __future__ import annotations

import hashlib
import signal
import subprocess
import threading
import time
from pathlib import Path

from conftest import flip_last_byte, latest_run_dir, wait_until
from serve_helpers import SOLOMON, request, start, stop, wait

from solomon.pipeline import pipeline_env

GOOD = {"prompt": "In the beginning", "max_tokens": 6, "seed": 7, "temperature": 0.8, "top_k": 40}


def test_ready_after_verification_answers_with_the_manifest_digest_and_repeats_a_seed(
    repo_copy: Path, tmp_path: Path
) -> None:
    run_dir = latest_run_dir(repo_copy)
    digest = hashlib.sha256((run_dir / "manifest.json").read_bytes()).hexdigest()
    hold = tmp_path / "go"
    process, port = start(repo_copy, "--slots", "1", "--queue", "1", env={"SOLOMON_SERVE_HOLD_UNTIL": str(hold)})
    try:
        wait(port, process, "/healthz")
        status, body, headers = request(port, "GET", "/readyz")
        assert status == 503 and "verifying" in body["error"]["message"] and headers["retry-after"] == "1"
        assert request(port, "GET", "/v1/provenance")[0] == 503
        assert request(port, "POST", "/v1/completions", GOOD)[0] == 503
        hold.touch()
        wait(port, process)
        status, provenance, _ = request(port, "GET", "/v1/provenance")
        assert status == 200 and provenance["manifest_sha256"] == digest and provenance["run_id"] == run_dir.name
        weights = hashlib.sha256((repo_copy / "models/model.safetensors").read_bytes()).hexdigest()
        assert provenance["weights_sha256"] == weights and provenance["registry"] is None
        assert provenance["verified_utc"] and provenance["threads"] == 1 and provenance["git"]["commit"]

        status, first, _ = request(port, "POST", "/v1/completions", GOOD)
        assert status == 200, first
        assert first["system_fingerprint"] == digest and first["object"] == "text_completion"
        assert first["choices"][0]["logprobs"] is None and first["choices"][0]["index"] == 0
        usage = first["usage"]
        assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"] > usage["prompt_tokens"]
        assert request(port, "POST", "/v1/completions", GOOD)[1]["choices"] == first["choices"]
        # The same text `solomon generate` samples with the same settings and seed.
        settings = ["--max-new-tokens", "6", "--temperature", "0.8", "--top-k", "40", "--seed", "7", "--slots", "1"]
        generated = subprocess.run(
            [SOLOMON, "generate", "--prompt", GOOD["prompt"], *settings],
            cwd=repo_copy,
            env=pipeline_env(),
            capture_output=True,
            text=True,
        )
        assert generated.stdout.rstrip("\n") == GOOD["prompt"] + first["choices"][0]["text"], generated.stderr
        fresh = request(port, "POST", "/v1/completions", {"prompt": "In the beginning"})[1]
        again = request(port, "POST", "/v1/completions", {"prompt": "In the beginning", "seed": fresh["seed"]})[1]
        assert again["choices"] == fresh["choices"]

        bad = {
            "malformed JSON": (b'{"prompt": "x",', 400, None),
            "not UTF-8": (b'{"prompt": "\xff\xfe"}', 400, None),
            "not an object": (b'["In the beginning"]', 400, None),
            "NaN": (b'{"prompt": "x", "temperature": NaN}', 400, None),
            "body too large": (b'{"prompt": "' + b"a" * 70000 + b'"}', 413, None),
            "wrong type": ({"prompt": "x", "max_tokens": "5"}, 400, "max_tokens"),
            "bool for int": ({"prompt": "x", "seed": True}, 400, "seed"),
            "prompts beyond the room": ({"prompt": ["x", "y", "z"]}, 400, "prompt"),  # one slot, one waiting
            "missing prompt": ({"max_tokens": 5}, 400, "prompt"),
            "empty prompt": ({"prompt": ""}, 400, "prompt"),
            "out of range": ({"prompt": "x", "temperature": 5}, 400, "temperature"),
            "negative seed": ({"prompt": "x", "seed": -1}, 400, "seed"),
            "above the cap": ({"prompt": "x", "max_tokens": 100000}, 400, "max_tokens"),
            "prompt too long": ({"prompt": "In the beginning " * 200}, 400, "prompt"),
            "nucleus of 0": ({"prompt": "x", "top_p": 0}, 400, "top_p"),
            "a lone surrogate": (b'{"prompt": "In \\ud800 the beginning"}', 400, "prompt"),  # was 500
            "tiny temperature": ({"prompt": "x", "temperature": 1e-300}, 400, "temperature"),  # was 500: NaN
            "n above the cap": ({"prompt": "x", "n": 5}, 400, "n"),
            "n above the room": ({"prompt": "x", "n": 3}, 400, "n"),  # one slot, one waiting
            "logprobs above 5": ({"prompt": "x", "logprobs": 6}, 400, "logprobs"),
            "stream not a bool": ({"prompt": "x", "stream": "yes"}, 400, "stream"),
            "stop list": ({"prompt": "x", "stop": ["a", ""]}, 400, "stop"),
            "unknown field": ({"prompt": "x", "best_of": 2}, 400, "best_of"),
        }
        for name, (body, code, param) in bad.items():
            raw = body if isinstance(body, bytes) else None
            status, answer, _ = request(port, "POST", "/v1/completions", None if raw else body, raw=raw)
            assert status == code and answer["error"]["param"] == param, (name, status, answer)
            assert answer["error"]["message"].startswith(f"{param}:" if param else ""), (name, answer)
            assert request(port, "POST", "/v1/completions", GOOD)[1]["choices"] == first["choices"], name
        status, answer, _ = request(port, "POST", "/v1/completions", GOOD | {"stop": ["e", "a"], "max_tokens": 30})
        assert status == 200 and answer["choices"][0]["finish_reason"] == "stop", answer
        assert "e" not in answer["choices"][0]["text"] and "a" not in answer["choices"][0]["text"]

        # A top_p that float32 rounds to 0 keeps the likeliest token alone (it cut every token: 500): greedy text.
        nucleus = request(port, "POST", "/v1/completions", GOOD | {"top_p": 5e-324})
        assert nucleus[0] == 200, nucleus
        greedy = request(port, "POST", "/v1/completions", GOOD | {"temperature": 0})[1]
        assert nucleus[1]["choices"][0]["text"] == greedy["choices"][0]["text"]

        # One generating, one queued (--queue 1): the rest are refused with 429 and Retry-After.
        answers = []
        long = GOOD | {"max_tokens": 256}
        threads = [
            threading.Thread(target=lambda: answers.append(request(port, "POST", "/v1/completions", long)))
            for _ in range(6)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        codes = sorted(status for status, _, _ in answers)
        assert codes.count(200) >= 2 and 429 in codes, codes
        refused = next(a for a in answers if a[0] == 429)
        assert int(refused[2]["retry-after"]) >= 1 and "busy" in refused[1]["error"]["message"]
        assert request(port, "POST", "/v1/completions", GOOD)[0] == 200
    finally:
        stop(process)
    assert process.returncode == 0, process.stderr.read()


def test_tampered_weights_refuse_to_start_with_one_line(repo_copy: Path) -> None:
    flip_last_byte(repo_copy / "models/model.safetensors")
    process, _ = start(repo_copy)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 2, out + err
    assert out == "" and len(err.strip().splitlines()) == 1, err
    assert err.startswith("error: refusing to load") and "models/model.safetensors: SHA256 mismatch" in err


def test_sigterm_finishes_the_requests_in_flight_then_exits_0(repo_copy: Path) -> None:
    # Room for three requests (one generating, two queued): a fourth is refused, and that refusal is the server
    # saying that three are in flight. ~1 s each, so the fourth arrives long before the first is done.
    process, port = start(repo_copy, "--timeout", "300", "--slots", "1", "--queue", "2", "--max-tokens", "1024")
    wait(port, process)
    answers, finished = [], []
    long = GOOD | {"max_tokens": 1024, "stop": "no such stop string"}

    def ask() -> None:
        answers.append(request(port, "POST", "/v1/completions", long))
        finished.append(time.monotonic())

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for thread in threads:
        thread.start()
    wait_until(lambda: any(a[0] == 429 for a in answers), "a 429: the server holding three requests", process=process)
    signalled = time.monotonic()
    process.send_signal(signal.SIGTERM)
    for thread in threads:
        thread.join(timeout=120)
    assert process.wait(timeout=60) == 0, process.stderr.read()
    assert sorted(a[0] for a in answers) == [200, 200, 200, 429], answers
    assert all(a[1]["usage"]["completion_tokens"] > 0 for a in answers if a[0] == 200)
    assert max(finished) > signalled  # they were in flight when the signal came
