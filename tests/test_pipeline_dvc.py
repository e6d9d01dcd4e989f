"""The pipeline end to end with real DVC: repro, no-op repro, precise invalidation, experiments, metrics diff."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, digest, dvc

from lab.scratch import write_params
from solomon.pipeline import run

STAGES = {"prepare", "tokenizer", "datacard", "train", "evaluate", "report"}


def ran_stages(output: str) -> set[str]:
    return set(re.findall(r"Running stage '([^']+)'", output))


def run_dirs(repo: Path) -> list[str]:
    return sorted(p.name for p in (repo / "reports/training").iterdir())


def test_full_repro_writes_every_output(built_repo: Path) -> None:
    for split in ("train", "val", "test"):
        assert (built_repo / f"data/corpus/{split}.parquet").stat().st_size > 0
        assert (built_repo / f"data/tokens/{split}.bin").stat().st_size > 0
    for path in (
        "data/tokenizer.json",
        "data/datacard.md",
        "data/datacard.json",
        "models/model.safetensors",
        "reports/train_log.tsv",
        "reports/train_metrics.json",
        "metrics.json",
        "reports/reliability/val.json",
        "reports/reliability/test.json",
        "reports/latest.json",
    ):
        assert (built_repo / path).is_file(), path
    metrics = json.loads((built_repo / "metrics.json").read_text())
    for split in ("val", "test"):
        assert set(metrics[split]) >= {"loss", "perplexity", "bits_per_byte", "accuracy", "ece", "mce"}
        assert 0 < metrics[split]["bits_per_byte"] < 8
        assert 0 < metrics[split]["ece"] <= metrics[split]["mce"] < 1
        # The reliability file is the ECE's own data: the metric recomputes from it.
        bins = json.loads((built_repo / f"reports/reliability/{split}.json").read_text())
        assert len(bins) == 15 and sum(b["tokens"] for b in bins) == metrics[split]["tokens"]
        ece = sum(b["tokens"] * abs(b["accuracy"] - b["confidence"]) for b in bins) / metrics[split]["tokens"]
        assert ece == pytest.approx(metrics[split]["ece"], abs=1e-6)
    # Temperature scaling: T fitted on val; test's figures and bins with it, beside the raw ones it leaves as they are.
    scaled = metrics["calibration"]
    assert 0.25 < scaled["temperature"] < 4 and scaled["fitted_on"].startswith("val (")
    assert 0 < scaled["test_ece"] <= scaled["test_mce"] < 1 and 0 < scaled["test_bits_per_byte"] < 8
    assert scaled["test_loss"] <= metrics["test"]["loss"] + 0.05  # fitted on val, so not necessarily lower on test
    assert sum(b["tokens"] for b in scaled["test_reliability"]) == metrics["test"]["tokens"]
    # The train stage measured the host's GEMM peak as it started: a record of how it ran, not a result.
    peak = json.loads((built_repo / "reports/train_run.json").read_text())["gemm_peak_gflops"]
    assert set(peak) == {"fp32", "bf16"} and all(v > 0 for v in peak.values())
    assert "gemm_peak" not in (built_repo / "reports/train_metrics.json").read_text()
    plots = json.loads(dvc(built_repo, "plots", "show", "--json").stdout)["data"]
    diagram = plots["reliability diagram"][0]["content"]
    assert {row["filename"] for row in diagram["data"]["values"]} == {"val.json", "test.json"}
    assert diagram["encoding"]["x"]["field"] == "confidence" and '"y": {"field": "accuracy"' in json.dumps(diagram)
    latest = json.loads((built_repo / "reports/latest.json").read_text())
    run_dir = built_repo / latest["path"]
    for name in (
        "README.md",
        "index.html",
        "manifest.json",
        "loss.png",
        "lr.png",
        "grad_norm.png",
        "tokens_per_s.png",
        "reliability.png",
        "reliability_val.json",
        "reliability_test.json",
        "params.yaml",
        "hyperparameters.yaml",
        "datacard.md",
        "metrics.json",
        "train_log.tsv",
        "run.json",
    ):
        assert (run_dir / name).is_file(), name
    page = (run_dir / "README.md").read_text()
    assert f"Temperature scaling (T = {scaled['temperature']}" in page and "Reliability bins of test" in page
    assert sum(f.stat().st_size for f in run_dir.iterdir()) < 2_000_000
    assert not [f for f in run_dir.iterdir() if f.suffix in (".safetensors", ".pt", ".bin")]
    log_lines = (built_repo / "reports/train_log.tsv").read_text().splitlines()
    assert log_lines[0].split("\t") == ["step", "tokens", "loss", "lr", "grad_norm", "tokens_per_s"]
    assert len(log_lines) == 1 + 30


def test_second_repro_runs_nothing(repo_copy: Path) -> None:
    before = run_dirs(repo_copy)
    done = dvc(repo_copy, "repro")
    assert ran_stages(done.stdout) == set(), done.stdout
    assert "didn't change, skipping" in done.stdout
    assert run_dirs(repo_copy) == before
    assert "up to date" in dvc(repo_copy, "status").stdout


def test_eval_param_change_reruns_only_check_evaluate_and_report(repo_copy: Path) -> None:
    """`check` validates every param, so any param change reruns it; its output is unchanged, so nothing upstream of
    evaluate reruns after it."""
    before = run_dirs(repo_copy)
    old_run = repo_copy / "reports/training" / before[0]
    old_bytes = {p.name: p.read_bytes() for p in old_run.iterdir()}
    write_params(repo_copy, {"eval": {"max_tokens": 2048, "calibration_bins": 10}})
    done = dvc(repo_copy, "repro")
    assert ran_stages(done.stdout) == {"check", "evaluate", "report"}, done.stdout
    # Same training run, so the same run directory, rebuilt with the new evaluation; its training record is
    # unchanged byte for byte.
    assert run_dirs(repo_copy) == before
    new_bytes = {p.name: p.read_bytes() for p in old_run.iterdir()}
    assert new_bytes.keys() == old_bytes.keys()
    for name in ("train_log.tsv", "train_evals.jsonl", "train_metrics.json", "train_run.json", "datacard.md"):
        assert new_bytes[name] == old_bytes[name], name
    assert "max_tokens: 2048" in new_bytes["params.yaml"].decode()
    assert json.loads(new_bytes["metrics.json"])["val"]["tokens"] == 2048
    assert len(json.loads(new_bytes["reliability_val.json"])) == 10
    assert json.loads((repo_copy / "metrics.json").read_text())["val"]["tokens"] == 2048


@pytest.mark.parametrize(
    "edit",
    [
        ('"Transformer blocks"', '"Transformer blocks of the decoder"'),  # a parameter's meaning
        ("class ModelParams(_Section):", "class ModelParams(_Section):  # a comment"),
    ],
    ids=["meaning", "comment"],
)
def test_editing_the_params_code_without_changing_a_value_reruns_only_check(repo_copy: Path, edit) -> None:
    """The stages after check depend on what check validated for them (data/checked/<stage>.json), not on
    solomon/params.py: a meaning or a comment there must not rerun an hour of training."""
    code = repo_copy / "solomon/params.py"
    text = code.read_text(encoding="utf-8")
    assert edit[0] in text
    code.write_text(text.replace(edit[0], edit[1], 1), encoding="utf-8")
    done = dvc(repo_copy, "repro")
    assert ran_stages(done.stdout) == {"check"}, done.stdout
    assert "up to date" in dvc(repo_copy, "status").stdout


def test_a_changed_params_list_reruns_check_for_that_stage(repo_copy: Path) -> None:
    """check's command names each stage's params (python -m lab deps --write), so a stage given a new param gets it in
    its checked file at once, not at some later check."""
    from lab import stage_deps

    dvc_yaml = repo_copy / "dvc.yaml"
    dvc_yaml.write_text(
        dvc_yaml.read_text(encoding="utf-8").replace(
            "      - eval\n    metrics:", "      - eval\n      - tracking\n    metrics:"
        ),
        encoding="utf-8",
    )
    assert not stage_deps.is_fresh(repo_copy)
    stage_deps.write(repo_copy)
    done = dvc(repo_copy, "repro")
    assert {"check", "evaluate"} <= ran_stages(done.stdout) <= {"check", "evaluate", "report"}, done.stdout
    assert "tracking" in json.loads((repo_copy / "data/checked/evaluate.json").read_text())


@pytest.mark.long
def test_exp_run_changes_warmup_and_metrics_diff_shows_it(repo_copy: Path) -> None:
    run(["git", "add", "-A"], repo_copy)
    run(["git", "commit", "-q", "-m", "baseline run"], repo_copy)
    old = json.loads((repo_copy / "metrics.json").read_text())
    done = dvc(repo_copy, "exp", "run", "-S", "lr.warmup=10", check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert yaml.safe_load((repo_copy / "params.yaml").read_text())["lr"]["warmup"] == 10
    assert "train" in ran_stages(done.stdout)
    diff = json.loads(dvc(repo_copy, "metrics", "diff", "--json").stdout)
    changed = diff["metrics.json"]
    assert "val.loss" in changed and changed["val.loss"]["old"] == old["val"]["loss"]
    assert changed["val.loss"]["new"] != changed["val.loss"]["old"]
    shown = json.loads(dvc(repo_copy, "exp", "show", "--json").stdout)
    [experiment] = [exp for baseline in shown for group in baseline["experiments"] or [] for exp in group["revs"]]
    assert experiment["data"]["params"]["params.yaml"]["data"]["lr"]["warmup"] == 10
    # The experiment is its own MLflow run (embedded SQLite), named with DVC's experiment name and the run id.
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{repo_copy / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("solomon").experiment_id])
    exp_runs = [r for r in runs if "dvc.exp_name" in r.data.tags]
    assert len(runs) == len(exp_runs) == 1, [r.data.tags for r in runs]
    run_id = json.loads((repo_copy / "reports/latest.json").read_text())["run_id"]
    assert exp_runs[0].data.tags["dvc.exp_name"] == experiment["name"]
    assert exp_runs[0].info.run_name == f"{experiment['name']}-{run_id}"
    # The same run id in the DVC experiment (its commit's train_run.json), MLflow and the run directory.
    recorded = run(["git", "show", f"{experiment['rev']}:reports/train_run.json"], repo_copy).stdout
    assert json.loads(recorded)["run_id"] == run_id


def test_tokenizer_and_encoded_splits_are_byte_identical_across_runs(built_repo: Path, tmp_path: Path) -> None:
    outputs = []
    for name in ("a", "b"):
        tokenizer, tokens = tmp_path / f"{name}.json", tmp_path / f"{name}_tokens"
        run([sys.executable, str(ROOT / "stages/tokenizer.py"), "data/corpus", str(tokenizer), str(tokens)], built_repo)
        outputs.append({"tokenizer": digest(tokenizer)} | {p.name: digest(p) for p in sorted(tokens.iterdir())})
    assert outputs[0] == outputs[1]
    # ...and identical to what the DVC stage wrote in its own process.
    assert outputs[0]["tokenizer"] == digest(built_repo / "data/tokenizer.json")
    assert outputs[0]["train.bin"] == digest(built_repo / "data/tokens/train.bin")


def test_bad_corpus_fails_dvc_repro_with_one_line(repo_copy: Path) -> None:
    write_params(repo_copy, {"corpus": {"source": "corpus/missing"}})
    done = dvc(repo_copy, "repro", check=False)
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: corpus.source")]
    assert errors == [
        "error: corpus.source 'corpus/missing' does not exist: point corpus.source at a directory or glob of .txt "
        "files, a .jsonl / .jsonl.gz / .jsonl.zst file, or Parquet (a file or a directory of shards), under corpus/ "
        "(or use 'kjv')"
    ], done.stderr
