"""``make soak``: closed-loop clients against a served model on loopback for a while, then what a long run shows and a
short one hides: every error by kind, throughput, p50/p95 latency and the server's resident memory over time.

The model is ``make bench``'s serving one (``lab.bench.serving``: the default size, random weights, the
real serving stack). Each client sends its next completion as soon as the last is answered, until the time is up.
Resident memory (VmRSS of /proc/<pid>/status) is sampled at the start (a tenth of the way in, past the warm-up's
first allocations), the middle and the end; the soak fails on any error, or when the end's is more than
``MAX_GROWTH_MIB`` above the start's.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

CLIENTS = 8
SECONDS = 600.0
MAX_TOKENS = 32
MAX_GROWTH_MIB = 64.0  # resident memory, start to end: a leak of a few KiB per request passes it within minutes


def rss_mib(pid: int) -> float:
    """The process's resident memory (VmRSS), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise ValueError(f"no VmRSS in /proc/{pid}/status")


def soak(
    seconds: float = SECONDS,
    clients: int = CLIENTS,
    max_tokens: int = MAX_TOKENS,
    threads: int = 1,
    report: Callable[[str], None] = print,
) -> dict:
    """Run the soak; its figures (errors by kind, latencies' percentiles, RSS samples in MiB)."""
    import tempfile  # below: torch, not for `solomon --help`

    from lab.bench.serving import ask, bench_tokenizer, percentile, random_model_server

    latencies: list[float] = []
    errors: Counter[str] = Counter()
    tokens = [0]
    with (
        tempfile.TemporaryDirectory(prefix="solomon-soak-") as work,
        random_model_server(bench_tokenizer(Path(work)), threads) as server,
    ):
        stop_at = time.monotonic() + seconds

        def client(index: int) -> None:
            sent = 0
            while time.monotonic() < stop_at:
                body = {"prompt": "In the beginning", "max_tokens": max_tokens, "seed": index * 10**6 + sent}
                sent += 1
                started = time.perf_counter()
                try:
                    status, payload = ask(server.port, "/v1/completions", body, timeout=120)
                except Exception as exc:  # refused, reset, timed out, cut short, not JSON: each counted by kind
                    errors[type(exc).__name__] += 1
                    continue
                latencies.append(time.perf_counter() - started)
                if status == 200:
                    tokens[0] += payload["usage"]["completion_tokens"]
                else:
                    errors[f"HTTP {status}"] += 1

        workers = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
        began = time.monotonic()
        for worker in workers:
            worker.start()
        rss = {}
        for name, share in (("start", 0.1), ("middle", 0.5), ("end", 1.0)):
            time.sleep(max(0.0, began + share * seconds - time.monotonic()))
            rss[name] = round(rss_mib(server.pid), 1)
            report(f"soak: {name}: {len(latencies)} answers, {sum(errors.values())} errors, RSS {rss[name]} MiB")
        for worker in workers:
            worker.join()
        wall = time.monotonic() - began
    ordered = sorted(latencies) or [0.0]
    return {
        "clients": clients,
        "seconds": seconds,
        "max_tokens": max_tokens,
        "requests": len(latencies) + sum(errors.values()),
        "answered": len(latencies),
        "errors": dict(errors),
        "requests_per_s": round(len(latencies) / wall, 2),
        "generated_tokens_per_s": round(tokens[0] / wall, 1),
        "p50_latency_s": round(percentile(ordered, 0.5), 3),
        "p95_latency_s": round(percentile(ordered, 0.95), 3),
        "rss_mib": rss,
    }


def problems(result: dict, max_growth_mib: float = MAX_GROWTH_MIB) -> list[str]:
    """Why the soak failed: each kind of error, and resident memory grown past the bound; none: it passed."""
    found = [f"{count} × {kind}" for kind, count in sorted(result["errors"].items())]
    if result["answered"] == 0:
        found.append("no request was answered")
    growth = result["rss_mib"]["end"] - result["rss_mib"]["start"]
    if growth > max_growth_mib:
        found.append(f"resident memory grew {growth:.1f} MiB from start to end, above the bound of {max_growth_mib:g}")
    return found


def summary(result: dict) -> str:
    errors = ", ".join(f"{kind}: {count}" for kind, count in sorted(result["errors"].items())) or "none"
    rss = result["rss_mib"]
    return (
        f"soak: {result['clients']} clients, {result['seconds']:g} s, max_tokens {result['max_tokens']}: "
        f"{result['requests']} requests, errors {errors}; {result['requests_per_s']} requests/s, "
        f"{result['generated_tokens_per_s']} tokens/s; latency p50 {result['p50_latency_s']} s, "
        f"p95 {result['p95_latency_s']} s; server RSS {rss['start']} / {rss['middle']} / {rss['end']} MiB "
        "(start / middle / end)"
    )
