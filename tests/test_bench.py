"""`python -m lab bench` end to end on the tiny pipeline: every figure is there and sane (a benchmark: no timings are
asserted, and the compiled variant stays out of the suite)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import LAB

from lab.bench import NOT_NATIVE
from lab.bench.report import format_throughput
from lab.bench.throughput import MATMUL_OPS, training_throughput
from lab.scratch import lab_env, merge
from solomon.machine import bf16_matmul_native
from solomon.params import PARAMS_FILE, Params, read_yaml


@pytest.mark.long
def test_bench_reports_mfu_per_variant_and_the_stage_overheads(repo_copy: Path) -> None:
    done = subprocess.run(
        [
            *LAB,
            "bench",
            "--steps",
            "2",
            "--stage-steps",
            "12",
            "--skip-compile",
            "--serving-clients",
            "0",  # the serving section at tiny scale: tests/test_bench_serving.py
        ],
        cwd=repo_copy,
        env=lab_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    [record] = list((repo_copy / "reports/bench").glob("*.json"))
    result = json.loads(record.read_text())
    throughput = result["throughput"]
    assert set(throughput["variants"]) == {"eager fp32", "eager fp32 muon", "eager bf16", "eager bf16 muon"}
    if bf16_matmul_native():
        assert "| eager bf16" in done.stdout
        assert throughput["variants"]["eager bf16 muon"]["optimizer"] == "muon" and "| eager bf16 muon" in done.stdout
        assert set(throughput["gemm_peak_gflops"]) == set(throughput["matmul_ceiling_mfu"]) == {"fp32", "bf16"}
    else:  # an AVX2-only CPU: what computes in bf16 is left out, and said so
        _assert_bf16_left_out(throughput, done.stdout)
    assert all(peak > 0 for peak in throughput["gemm_peak_gflops"].values())
    # the default path as train.precision auto resolves here (fp32 with Muon without native bf16), operator by operator
    profile = throughput["default_step_profile"]
    assert 3 <= len(profile) <= 10 and all(0 < op["share"] <= 1 for op in profile)
    assert any(op["op"] in MATMUL_OPS for op in profile)
    assert "where the default path's step time goes" in done.stdout
    in_step = throughput["in_step_matmul"]  # the step's matmul kernels, timed by the profiler inside a real step
    assert in_step["ms_per_step"] > 0 and 0 < in_step["of_peak"] < 2 and "the same matmuls inside" in done.stdout
    assert all(0 < ceiling < 2 for ceiling in throughput["matmul_ceiling_mfu"].values())
    for variant in (v for v in throughput["variants"].values() if "not_measured" not in v):
        assert variant["tokens_per_s"] > 0 and 0 < variant["mfu"] < 2 and variant["gflops"] > 0
    stage = result["stage"]  # timed on any host: params.yaml's auto computes in what is fast here
    assert "share of loop wall" in done.stdout
    assert stage["steps"] == 12 and set(stage["seconds"]) == {"eval_and_samples", "checkpoints", "tracking"}
    assert stage["seconds"]["eval_and_samples"] > 0 and stage["seconds"]["checkpoints"] > 0
    assert 0 < stage["overhead_share"] < 1
    assert 0 < stage["resume_s"] < stage["process_s"]  # start to training again, less one step
    # The copy of the built pipeline is up to date, so the bench times a real no-op `dvc repro`.
    assert stage["noop_dvc_repro_s"] > 0
    assert result["parts"] == ["throughput", "families", "portable", "stage", "serving"]
    assert "serving" not in result  # 0 clients: skipped
    families = result["families"]["families"]
    assert set(families) == {"gpt2", "llama", "qwen3"} and families["gpt2"]["step_time_to_gpt2"] == 1
    assert all(f["ms_per_step"] > 0 for f in families.values()) and "the block families' step" in done.stdout
    portable = result["portable"]
    assert [len(runs) for runs in portable["runs"].values()] == [2, 2] and portable["portable_over_default"] > 0
    assert "portable mode's cost on the default model (A B A B" in done.stdout


def _assert_bf16_left_out(throughput: dict, text: str) -> None:
    variants = throughput["variants"]
    assert variants["eager bf16"] == {"not_measured": NOT_NATIVE, "optimizer": "adamw"}
    assert variants["eager bf16 muon"] == {"not_measured": NOT_NATIVE, "optimizer": "muon"}
    assert variants["eager fp32"]["tokens_per_s"] > 0 and variants["eager fp32"]["ratio_to_eager_fp32"] == 1.0
    assert variants["eager fp32 muon"]["tokens_per_s"] > 0  # an fp32 run's Muon orthogonalises in fp32
    assert set(throughput["matmul_ceiling_gflops"]) == set(throughput["matmul_ceiling_mfu"]) == {"fp32"}
    # the default path is params.yaml's auto: fp32 with Muon on such a CPU, profiled as on any other
    assert throughput["default_step_profile"] and throughput["in_step_matmul"]["ms_per_step"] > 0
    assert f"not measured: eager bf16 muon: {NOT_NATIVE}" in text
    assert re.search(r"^\| eager bf16 +\| not measured", text, re.MULTILINE)
    assert "the default path was not measured here" not in text


def test_without_native_bf16_the_bench_leaves_out_what_computes_in_bf16_and_says_why(repo_copy: Path) -> None:
    """On any host: the bench told bf16 matmuls are not native (an AVX2-only CPU, where a bf16 step of the
    default model takes minutes) measures fp32 alone and names the rest, rather than running for hours; the real
    train stage is timed, since params.yaml's train.precision: auto trains in fp32 there."""
    from lab.bench.stage import stage_overheads

    params = Params.model_validate(read_yaml(repo_copy / PARAMS_FILE))
    throughput = training_throughput(params, steps=1, warmup=1, compile_variant=False, bf16_native=False)
    _assert_bf16_left_out(throughput, format_throughput(throughput))
    stage = stage_overheads(repo_copy, 12, bf16_native=False)
    assert "not_measured" not in stage and stage["steps"] == 12
    explicit = merge(read_yaml(repo_copy / PARAMS_FILE), {"train": {"precision": "bf16"}})
    (repo_copy / PARAMS_FILE).write_text(yaml.safe_dump(explicit))
    assert stage_overheads(repo_copy, 12, bf16_native=False) == {"steps": 12, "not_measured": NOT_NATIVE}
