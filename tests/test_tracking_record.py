"""The MLflow record of a run is complete: every held-out metric of metrics.json (ECE and MCE included), system
metrics sampled during training, the corpus as a dataset input with its SHA256, MLflow's standard source tags, no
param the string "None", and the model directory described by an MLmodel. Read back from the real store the tiny
pipeline wrote."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml
from conftest import latest_run_dir
from mlflow.models import Model
from mlflow.tracking import MlflowClient

from solomon.params import flatten
from solomon.records import SYSTEM_COLUMNS
from solomon.tracking.store import DATASET_DIGEST_HEX, RUN_ID_TAG, model_artifact_path, param_value, param_values
from solomon.train.system_metrics import SystemSampler

SYSTEM_METRICS = tuple(f"system/{name}" for name in SYSTEM_COLUMNS[2:])


def test_null_params_are_logged_as_null_never_none() -> None:
    values = param_values({"eval": {"max_tokens": None, "batch_size": 4}, "tags": ["a", None], "on": True})
    assert values == {"eval.max_tokens": "null", "eval.batch_size": "4", "tags": '["a", null]', "on": "True"}
    assert param_value(None) == "null"


def test_system_sampler_reads_cpu_memory_disk_and_network_cheaply() -> None:
    sampler = SystemSampler()
    busy_until = time.process_time() + 0.2
    while time.process_time() < busy_until:  # a busy stretch, so the process CPU share is well above zero
        pass
    sample = {f"system/{name}": value for name, value in sampler.sample().items()}
    assert set(sample) == set(SYSTEM_METRICS), sample
    assert 0 <= sample["system/cpu_utilization_percentage"] <= 100
    assert 0 < sample["system/process_cpu_utilization_percentage"] <= 100
    assert 10 < sample["system/process_rss_megabytes"] <= sample["system/process_peak_rss_megabytes"]
    assert sample["system/system_memory_usage_megabytes"] > 0
    assert 0 < sample["system/system_memory_usage_percentage"] < 100
    assert 0 < sample["system/disk_usage_percentage"] < 100 and sample["system/disk_available_megabytes"] > 0
    assert sample["system/network_receive_megabytes"] >= 0
    started = time.perf_counter()
    for _ in range(100):
        sampler.sample()
    per_sample = (time.perf_counter() - started) / 100
    # Taken on the training thread every 100 steps or 5 s: even 5 ms would be nothing.
    assert per_sample < 0.005, f"{per_sample * 1e3:.2f} ms per sample"


def test_the_pipeline_run_is_a_complete_mlflow_record(built_repo: Path, tmp_path: Path) -> None:
    client = MlflowClient(f"sqlite:///{built_repo / 'mlflow.db'}")
    run_dir = latest_run_dir(built_repo)
    experiment = client.get_experiment_by_name("solomon")
    [run] = client.search_runs([experiment.experiment_id], filter_string=f"tags.`{RUN_ID_TAG}` = '{run_dir.name}'")
    mlflow_run = run.info.run_id

    # Every number of metrics.json, ECE and MCE included, as <split>/<name>.
    metrics = json.loads((run_dir / "metrics.json").read_text())
    for split in ("val", "test"):
        assert {"ece", "mce"} <= set(metrics[split])
        for name, value in metrics[split].items():
            assert run.data.metrics[f"{split}/{name}"] == value, f"{split}/{name}"

    # System metrics, sampled live during training at training steps (evaluations at 10, 20, 30 included).
    for key in SYSTEM_METRICS:
        history = client.get_metric_history(mlflow_run, key)
        steps = sorted(m.step for m in history)
        assert {10, 20, 30} <= set(steps) and len(steps) == len(set(steps)), (key, steps)
    rss = [m.value for m in client.get_metric_history(mlflow_run, "system/process_rss_megabytes")]
    assert all(50 < value < 100_000 for value in rss), rss  # torch alone is more than 50 MB resident
    cpu = [m.value for m in client.get_metric_history(mlflow_run, "system/process_cpu_utilization_percentage")]
    assert all(0 <= value <= 100 for value in cpu) and max(cpu) > 0, cpu

    # The corpus as a dataset input: the source's SHA256 as digest (cut to MLflow's 36-character limit), whole in
    # the profile, with each split's SHA256 as the data card records it.
    datacard = json.loads((run_dir / "datacard.json").read_text())
    source = json.loads((built_repo / "data/corpus/summary.json").read_text())["source"]
    assert datacard["statistics"]["source"]["sha256"] == source["sha256"]
    [corpus] = run.inputs.dataset_inputs
    assert corpus.dataset.name == source["description"] and corpus.dataset.source_type == "local"
    assert corpus.dataset.digest == source["sha256"][:DATASET_DIGEST_HEX] and len(corpus.dataset.digest) <= 36
    assert json.loads(corpus.dataset.source) == {"uri": source["spec"]}
    profile = json.loads(corpus.dataset.profile)
    assert profile["sha256"] == source["sha256"]
    assert {s: v["sha256_corpus"] for s, v in profile["splits"].items()} == {
        s: v["sha256_corpus"] for s, v in datacard["statistics"]["splits"].items()
    }
    assert [(t.key, t.value) for t in corpus.tags] == [("mlflow.data.context", "training")]

    # MLflow's standard source tags.
    run_info = json.loads((run_dir / "run.json").read_text())
    tags = run.data.tags
    assert tags["mlflow.source.name"] == "stages/train.py" and tags["mlflow.source.type"] == "LOCAL"
    assert tags["mlflow.source.git.commit"] == run_info["git"]["commit"] and len(tags["mlflow.source.git.commit"]) == 40
    assert tags["mlflow.user"]

    # No param is Python's "None"; the run's null params are there, spelled null.
    assert "None" not in run.data.params.values()
    hyperparameters = flatten(yaml.safe_load((run_dir / "hyperparameters.yaml").read_text()))
    nulls = sorted(key for key, value in hyperparameters.items() if value is None)
    assert nulls and all(run.data.params[key] == "null" for key in nulls), nulls

    # The model directory is described by an MLmodel naming the weights' SHA256.
    source_dir = model_artifact_path(run_info["sha256"]["model"])
    mlmodel = Model.load(client.download_artifacts(mlflow_run, f"{source_dir}/MLmodel", str(tmp_path)))
    assert mlmodel.flavors["solomon"]["weights_sha256"] == run_info["sha256"]["model"]
    assert mlmodel.run_id == mlflow_run and mlmodel.artifact_path == source_dir


@pytest.mark.parametrize("datacard", [{}, {"statistics": {"source": {"kind": "text"}}}])
def test_a_data_card_without_a_source_hash_logs_no_dataset(datacard: dict) -> None:
    from solomon.tracking.store import corpus_dataset

    assert corpus_dataset(datacard) is None
