"""The run report and the data card, read from the tiny pipeline's files."""

from __future__ import annotations

import json
import re
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from conftest import latest_run_dir

from solomon import records
from solomon.data.datacard import card_fields, render_markdown
from solomon.data.sources import source_files
from solomon.errors import SolomonError
from solomon.params import load_params
from solomon.report.run import Provenance, create_run

# The report stage's inputs, by name: where dvc.yaml takes them from in the workspace.
REPORT_INPUTS = {
    **{name: path for name, (path, _) in records.RECORD_FILES.items()},
    "model": records.WEIGHTS,
    "tokenizer": records.TOKENIZER,
}


def test_html_report_is_self_contained_and_has_both_curves(built_repo: Path) -> None:
    latest = records.read_latest(built_repo)
    page = (built_repo / latest["path"] / "index.html").read_text()
    # loss (train and validation), learning rate, gradient norm, tokens/s, reliability diagram (val and test), the
    # machine's and the process's CPU, the process's memory
    assert page.count("<svg") == 7
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)
    assert "<script" not in page
    assert "Motivation</h2>" in page and "Manifest SHA256" in page  # the data card, rendered; the identity
    markdown = (built_repo / latest["path"] / "README.md").read_text()
    for chart in ("loss", "lr", "grad_norm", "tokens_per_s", "reliability", "cpu", "memory"):
        assert f"![{chart}]({chart}.png)" in markdown
    assert "reliability diagram (15 equal-mass bins)" in page and "val (ECE " in page and "test (ECE " in page
    assert "bits_per_byte" in markdown and re.search(r"\|\s+ece\s+\|", markdown) and "lr.warmup" in markdown
    assert "## Samples at each evaluation" in markdown and "In the beginning" in markdown
    assert "## Evaluations during training (fixed validation subset)" in markdown


def test_the_run_directory_records_the_machine_as_training_went(built_repo: Path) -> None:
    """System samples (CPU, memory, disk, network) at least every 100 steps or 5 s, at each evaluation and at the
    last step, once per step: copied into the run directory, in the manifest, summarised and drawn on the page."""
    run_dir = latest_run_dir(built_repo)
    system = records.read_system(run_dir / records.RunFiles.SYSTEM_LOG)
    assert (run_dir / records.RunFiles.SYSTEM_LOG).read_bytes() == (built_repo / records.SYSTEM_LOG).read_bytes()
    steps = [row["step"] for row in system]
    evaluated = [e["step"] for e in records.read_evals(run_dir / records.RunFiles.EVAL_LOG)]
    last = int(records.read_steps(run_dir / records.RunFiles.STEP_LOG)[-1]["step"])
    assert steps == sorted(set(steps)) and set(evaluated) | {last} <= set(steps), (steps, evaluated)
    assert all(b - a <= 100 for a, b in zip([0, *steps], steps, strict=False)), steps
    for row in system:
        assert set(row) == set(records.SYSTEM_COLUMNS)
        assert 0 <= row["cpu_utilization_percentage"] <= 100 and 0 <= row["process_cpu_utilization_percentage"] <= 100
        assert 50 < row["process_rss_megabytes"] <= row["process_peak_rss_megabytes"]  # torch alone is more
        assert row["disk_available_megabytes"] > 0 and row["network_receive_megabytes"] >= 0
        datetime.fromisoformat(row["utc"])
    manifest = json.loads((run_dir / records.RunFiles.MANIFEST).read_text())
    [subject] = [s for s in manifest["subject"] if s["name"].endswith(records.RunFiles.SYSTEM_LOG)]
    assert subject["annotations"]["role"] == "training-log"
    page = (run_dir / "index.html").read_text()
    assert f"The machine during training ({records.RunFiles.SYSTEM_LOG})" in page
    assert f"{len(system)} samples at steps {steps[0]}–{steps[-1]}" in page and "process_peak_rss_megabytes" in page
    assert "CPU during training" in page and "memory of the training process (MB)" in page


def test_a_run_directory_belongs_to_one_training_run(repo_copy: Path) -> None:
    """Another training run's report never touches this one; a rebuilt report of the same run replaces its
    directory whole."""
    params = load_params(repo_copy / "params.yaml")
    files = {name: repo_copy / path for name, path in REPORT_INPUTS.items()}
    root, latest = repo_copy / params.report.root, repo_copy / records.LATEST
    provenance = Provenance(
        repo_copy, source_files(params.corpus, repo_copy), repo_copy / "dvc.lock", repo_copy / "requirements.lock", None
    )
    this_run = root / json.loads(latest.read_text())["run_id"]
    snapshot = {p: p.read_bytes() for p in this_run.iterdir()}
    other = json.loads(files["train_run"].read_text()) | {"run_id": "20300102T030405Z-0123abcd"}
    files["train_run"] = repo_copy / "other_train_run.json"
    files["train_run"].write_text(json.dumps(other))
    when = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    other_dir = create_run(params, repo_copy / "params.yaml", files, root, latest, provenance, when)
    assert other_dir == root / "20300102T030405Z-0123abcd"
    assert {p: p.read_bytes() for p in this_run.iterdir()} == snapshot
    assert json.loads(latest.read_text()) == records.latest_record(other_dir.name, root)
    (other_dir / "stray.txt").write_text("left over")
    rebuilt = create_run(
        params, repo_copy / "params.yaml", files, root, latest, provenance, datetime(2030, 1, 3, tzinfo=UTC)
    )
    assert rebuilt == other_dir and not (rebuilt / "stray.txt").exists()
    run_info = json.loads((rebuilt / "run.json").read_text())
    assert run_info["created_utc"].startswith("2030-01-03") and set(run_info["sha256"]) == {*REPORT_INPUTS, "params"}
    del other["run_id"]
    files["train_run"].write_text(json.dumps(other))
    with pytest.raises(SolomonError, match="names no run_id"):
        create_run(params, repo_copy / "params.yaml", files, root, latest, provenance, when)


def test_kjv_data_card_has_front_matter_and_all_datasheet_sections(built_repo: Path) -> None:
    card = (built_repo / "data/datacard.md").read_text()
    front = yaml.safe_load(card.split("---\n")[1])
    assert front["license"] == "other" and front["language"] == ["en"]
    assert {s["name"] for s in front["dataset_info"]["splits"]} == {"train", "val", "test"}
    assert all(s["num_tokens"] > 0 and s["num_bytes"] > 0 for s in front["dataset_info"]["splits"])
    for section in (
        "Motivation",
        "Composition",
        "Collection process",
        "Preprocessing",
        "Uses",
        "Distribution",
        "Maintenance",
    ):
        assert f"\n## {section}\n" in card
    assert "Crown" in card and "Not provided" not in card
    stats = json.loads((built_repo / "data/datacard.json").read_text())["statistics"]
    assert len(stats["splits"]["train"]["sha256_tokens"]) == 64
    assert stats["top_train_tokens"][0]["count"] >= stats["top_train_tokens"][-1]["count"]


def test_user_corpus_card_marks_missing_fields(built_repo: Path) -> None:
    params = load_params(built_repo / "params.yaml").corpus.model_copy(
        update={
            "source": "corpus/mine",
            "card": load_params(built_repo / "params.yaml").corpus.card.model_copy(
                update={"license": "cc-by-4.0", "motivation": "Testing."}
            ),
        }
    )
    stats = json.loads((built_repo / "data/datacard.json").read_text())["statistics"]
    card = render_markdown(card_fields(params), stats)
    assert "license: cc-by-4.0" in card and "Testing." in card
    assert "Set `corpus.card.uses` in params.yaml" in card
    assert "Set `corpus.card.composition` in params.yaml" in card


def test_make_report_rebuilds_the_pages_from_the_run_files_alone(repo_copy: Path) -> None:
    import subprocess
    import sys

    from solomon.pipeline import pipeline_env

    run_dir = latest_run_dir(repo_copy)
    pages = {name: (run_dir / name).read_bytes() for name in ("index.html", "README.md")}
    (run_dir / "README.md").unlink()
    (run_dir / "index.html").write_text("stale")
    shutil.rmtree(repo_copy / "models")  # nothing of the workspace is needed
    done = subprocess.run(
        [str(Path(sys.executable).parent / "solomon"), "report"],
        cwd=repo_copy,
        env=pipeline_env(),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert {name: (run_dir / name).read_bytes() for name in pages} == pages
    # A run evaluated before calibration existed has no reliability files, one trained before the system log has
    # none: its pages still build, without them.
    for split in ("val", "test"):
        (run_dir / f"reliability_{split}.json").unlink()
    (run_dir / "train_system.tsv").unlink()
    # Named by its run id under --root, from elsewhere.
    done = subprocess.run(
        [str(Path(sys.executable).parent / "solomon"), "report", "--run", run_dir.name, "--root", str(repo_copy)],
        cwd=repo_copy.parent,
        env=pipeline_env(),
        capture_output=True,
    )
    assert done.returncode == 0, done.stderr
    assert (run_dir / "index.html").read_text().count("<svg") == 4
