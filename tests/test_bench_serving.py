"""The serving section of `python -m lab bench` at tiny scale: every row there, on the same weights, every figure
positive and no errors (a benchmark: no time is asserted); and `--only` / `--serving-clients` on the command line."""

from __future__ import annotations

import json
import numbers
import subprocess
from pathlib import Path

import pytest
from conftest import LAB

from lab.bench import NOT_NATIVE
from lab.bench import SERVING_CLIENTS as CLIENTS
from lab.bench.serving_section import ENGINE, format_serving, serving_section
from lab.scratch import lab_env
from solomon.machine import bf16_matmul_native
from solomon.serving.limits import PRECISIONS

TINY = {"n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 64}


def _numbers(row: dict) -> dict:
    return {k: v for k, v in row.items() if isinstance(v, numbers.Number) and k not in ("batch", "errors")}


def test_the_serving_section_runs_every_row_side_by_side(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no workspace tokenizer here: the section trains its own
    # the eager route only: the compiled one compiles every batch size (tests/test_compiled_decode.py)
    section = serving_section(
        requests_per_client=1, model=TINY, peer_requests=1, copy_mib=16, gemm=(128, 2), decodes=("eager",)
    )
    assert section["model"]["n_embd"] == 32 and section["threads"] == 1 and section["max_tokens"] == 32
    rows = section["rows"]
    native = bf16_matmul_native()  # without it (an AVX2-only CPU) the bf16 rows are left out, with the reason
    served = tuple(p for p in PRECISIONS if native or p != "bf16")
    engine = [row for row in rows if row["row"].startswith(ENGINE) and not row.get("skipped")]
    assert sorted((row["precision"], row["batch"]) for row in engine) == sorted((p, c) for p in served for c in CLIENTS)
    assert all(row["errors"] == 0 and row["requests"] == row["batch"] for row in engine)
    assert all(row["ttft_p50_s"] <= row["p50_latency_s"] for row in engine)
    assert all(row["ratio_to_engine"] == 1.0 for row in engine if row["precision"] == "fp32")
    for precision, sizes in section["decode_batch_sizes"].items():  # each server's start-up check, and the rows
        assert sizes[-1] == section["slots"] and sizes == sorted(sizes)
        for row in (row for row in engine if row["precision"] == precision):
            assert f"(decode batch {next(s for s in sizes if s >= min(row['batch'], section['slots']))})" in row["row"]
    by_name = {}
    for row in rows:
        by_name.setdefault(row["row"].split(" (")[0], []).append(row["batch"])
    assert by_name["old serial path"] == [1]
    assert all(by_name[f"engine in process, {precision}"] == [1, 16] for precision in served)
    assert by_name["transformers generate, fp32"] == [1, 16]
    assert by_name["transformers generate, bf16"] == ([1, 16] if native else [1])
    assert all(by_name[f"{limit} limit"] == [1, 1, 16, 16] for limit in ("bandwidth", "compute"))  # fp32, bf16
    assert by_name["llama.cpp"] == [1]
    for row in rows:
        if row.get("skipped") == NOT_NATIVE:
            assert not native and row["row"].startswith((f"{ENGINE}, bf16", "transformers generate, bf16"))
            continue
        if row.get("skipped"):
            assert row["row"].startswith("llama.cpp") and "llama_cpp" in row["skipped"]
            continue
        figures = _numbers(row)
        assert "tokens_per_s" in figures and "ratio_to_engine" in figures, row
        assert all(value > 0 for value in figures.values()), row
        assert row.get("errors", 0) == 0, row
    transformers = [row for row in rows if row["row"].startswith("transformers") and not row.get("skipped")]
    # the same model, through the export layout (bf16: within its rounding)
    assert all(row["max_abs_logit_diff"] < (1e-4 if "fp32" in row["row"] else 0.5) for row in transformers)
    hardware = section["hardware"]
    assert hardware["copy_bandwidth_gbs"] > 0 and all(peak > 0 for peak in hardware["gemm_peak_gflops"].values())
    assert hardware["weight_bytes"] == 4 * hardware["parameters"]  # fp32
    assert section["host"]["cpu"]
    text = format_serving(section)
    rows_shown = len(served) * len(CLIENTS) + len(PRECISIONS) - len(served)  # a left-out precision: one row
    assert text.count(f"| {ENGINE}") == rows_shown and "host:" in text and "GEMM peak fp32" in text
    json.dumps(section)  # the bench record holds it as it is


def _bench(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    command = [*LAB, "bench", "--out", str(cwd / "out"), *args]
    return subprocess.run(command, cwd=cwd, env=lab_env(), capture_output=True, text=True, timeout=300)


def test_bench_only_measures_the_parts_named_and_refuses_bad_client_counts(tmp_path: Path) -> None:
    done = _bench(tmp_path, "--only", "serving", "--serving-clients", "0")
    assert done.returncode == 0, done.stdout + done.stderr
    [record] = (tmp_path / "out").glob("*.json")
    result = json.loads(record.read_text())
    assert result["parts"] == ["serving"] and not {"throughput", "stage", "serving"} & set(result)
    refused = _bench(tmp_path, "--serving-clients", "0", "4")
    assert refused.returncode != 0 and "--serving-clients 0 4" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and len(list((tmp_path / "out").glob("*.json"))) == 1
