"""`make soak`'s tool run briefly against a real server process on loopback (the bench's random-weights model), so it
cannot rot: answers, no error, resident memory sampled three times; and its verdict on errors and on growth."""

from __future__ import annotations

import pytest

from lab.soak import problems, soak, summary


@pytest.mark.slow
def test_a_short_soak_answers_without_error_and_samples_the_servers_memory() -> None:
    lines: list[str] = []
    result = soak(seconds=4, clients=2, max_tokens=4, report=lines.append)
    assert result["errors"] == {} and result["answered"] == result["requests"] > 0, result
    assert 0 < result["p50_latency_s"] <= result["p95_latency_s"] and result["generated_tokens_per_s"] > 0
    assert set(result["rss_mib"]) == {"start", "middle", "end"} and all(v > 50 for v in result["rss_mib"].values())
    assert [line.split(":")[1].strip() for line in lines] == ["start", "middle", "end"]
    assert problems(result, max_growth_mib=1e6) == [] and "p95" in summary(result)


def test_the_verdict_names_each_error_kind_and_memory_growth_past_the_bound() -> None:
    result = {"errors": {}, "answered": 10, "rss_mib": {"start": 500.0, "middle": 510.0, "end": 540.0}}
    assert problems(result, max_growth_mib=64) == []
    assert problems(result, max_growth_mib=32) == [
        "resident memory grew 40.0 MiB from start to end, above the bound of 32"
    ]
    failed = result | {"errors": {"HTTP 500": 2, "ConnectionResetError": 1}, "answered": 0}
    assert problems(failed) == ["1 × ConnectionResetError", "2 × HTTP 500", "no request was answered"]
