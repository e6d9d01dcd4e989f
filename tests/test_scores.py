"""Scores that carry their proof, on the tiny pipeline: the evaluate stage's lm-eval scores in metrics.json and the
run directory (verify fails on an edited score, task file or data file), the same scores from lm-eval's own
``local-completions`` against `solomon serve` (fp32 and bf16) and its ``hf`` model on the Hugging Face export,
the held-out rolling bits per byte beside the evaluate stage's own, and `solomon score` telling the run's server
from another run's."""

from __future__ import annotations

import json
import os
import random
import subprocess
from pathlib import Path

import pytest
import torch
from conftest import latest_run_dir
from serve_helpers import SOLOMON, start, stop, wait

from lab.scores import lm_eval_scores
from solomon.data.corpus import read_documents
from solomon.data.tokens import load_tokenizer, open_tokens, read_meta, token_byte_lengths
from solomon.errors import SolomonError
from solomon.evaluation.harness import score_tasks, task_config
from solomon.evaluation.heldout import HeldOutScore, predictions
from solomon.evaluation.tasks import build_task_data, next_line_items
from solomon.machine import describe
from solomon.model import weights
from solomon.pipeline import pipeline_env

HELDOUT, NEXT_LINE = "solomon_heldout", "solomon_next_line"
SHORT_TASK = "solomon_short_choice"


def solomon(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([SOLOMON, *args], cwd=repo, env=pipeline_env(), capture_output=True, text=True)


def test_the_run_records_its_scores_their_files_and_a_replay_sample(built_repo: Path) -> None:
    run_dir = latest_run_dir(built_repo)
    tasks = json.loads((run_dir / "metrics.json").read_text())["tasks"]
    assert set(tasks) == {HELDOUT, NEXT_LINE}
    assert tasks[HELDOUT]["bits_per_byte"] > 0 and tasks[HELDOUT]["n"] == len(list(read_documents(
        built_repo / "data/corpus", "test", ["sha256"])))  # fmt: skip
    assert 0 <= tasks[NEXT_LINE]["acc"] <= 1 and tasks[NEXT_LINE]["acc_stderr"] > 0 and tasks[NEXT_LINE]["n"] > 0
    for name, section in tasks.items():
        assert section["lm_eval"] == "0.4.13" and len(section["task_sha256"]) == 64
        assert (run_dir / f"task_{name}.yaml").read_bytes() == (built_repo / section["task_file"]).read_bytes()
    subjects = {s["name"]: s["annotations"]["role"] for s in json.loads((run_dir / "manifest.json").read_text())[
        "subject"]}  # fmt: skip
    assert subjects["data/tasks/heldout.jsonl"] == subjects["data/tasks/next_line.jsonl"] == "task-data"
    assert subjects[f"task_{HELDOUT}.yaml"] == "task-config" and subjects["task_requests.jsonl"] == "metrics"
    replay = [json.loads(line) for line in (run_dir / "task_requests.jsonl").read_text().splitlines()]
    assert {r["task"] for r in replay} == {HELDOUT, NEXT_LINE} and all(r["tokens"] for r in replay)
    assert solomon(built_repo, "verify").returncode == 0


@pytest.mark.parametrize("edit", ["score", "task file", "data file"])
def test_verify_fails_on_an_edited_score_task_file_or_data_file(repo_copy: Path, edit: str) -> None:
    run_dir = latest_run_dir(repo_copy)
    if edit == "score":
        metrics = json.loads((run_dir / "metrics.json").read_text())
        metrics["tasks"][NEXT_LINE]["acc"] = 0.99
        (run_dir / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
        named = "metrics.json"
    elif edit == "task file":
        path = run_dir / f"task_{NEXT_LINE}.yaml"
        path.write_text(path.read_text().replace("target_delimiter", "# target_delimiter"))
        named = path.name
    else:
        path = repo_copy / "data/tasks/next_line.jsonl"
        path.write_text(path.read_text().replace('"label": 0', '"label": 1', 1))
        named = "data/tasks/next_line.jsonl"
    done = solomon(repo_copy, "verify")
    assert done.returncode == 1 and f"{named}: SHA256 mismatch" in done.stdout + done.stderr, done.stdout + done.stderr


def test_the_task_data_is_a_pure_function_of_the_test_split(built_repo: Path, tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    build_task_data(built_repo / "data/corpus", first)
    build_task_data(built_repo / "data/corpus", second)
    for name in ("heldout.jsonl", "next_line.jsonl"):
        assert (
            (first / name).read_bytes()
            == (second / name).read_bytes()
            == (built_repo / "data/tasks" / name).read_bytes()
        )
    documents = [[f"line {d} {i} " + "word " * (i % 5) for i in range(6)] for d in range(5)]
    items = next_line_items(documents)
    assert items == next_line_items(documents)
    for item in items:
        assert len(item["choices"]) == 4 and 0 <= item["label"] < 4
        d, i = (int(x) for x in item["context"].split()[1:3])
        assert item["choices"][item["label"]] == documents[d][i + 1]
    with pytest.raises(SolomonError, match="too few documents or passages for the next_line task"):
        next_line_items([["only one document", "of two lines"]])


def test_a_task_that_needs_the_hub_or_missing_files_is_refused_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks/hub.yaml").write_text("task: wiki\ndataset_path: EleutherAI/wikitext_document_level\n")
    (tmp_path / "tasks/missing.yaml").write_text(
        "task: mine\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: data/mine.jsonl\n"
    )
    (tmp_path / "tasks/nameless.yaml").write_text("dataset_path: json\n")
    (tmp_path / "tasks/broken.yaml").write_text("task: [unclosed\n")
    refusals = {
        "tasks/hub.yaml": "reads the dataset 'EleutherAI/wikitext_document_level' from the Hugging Face hub",
        "tasks/missing.yaml": "reads data/mine.jsonl, which is not there",
        "tasks/nameless.yaml": "names no task",
        "tasks/broken.yaml": "is not valid YAML",
        "tasks/absent.yaml": "is not a task file",
    }
    for spec, message in refusals.items():
        with pytest.raises(SolomonError) as refused:
            task_config(spec, tmp_path)
        assert message in str(refused.value) and "\n" not in str(refused.value), spec
    assert task_config("tasks/missing.yaml", tmp_path, made=("data/mine.jsonl",))[1]["task"] == "mine"


def test_held_out_rolling_bits_per_byte_is_the_evaluate_stages_measured_whole(built_repo: Path) -> None:
    """The evaluate stage scores the split's token stream in windows across documents (the end-of-document tokens
    predicted, at 0 bytes); the rolling task scores each document from its own end-of-document token."""
    model = weights.load(built_repo / "models").eval()
    tokenizer = load_tokenizer(built_repo / "data/tokenizer.json")
    whole = HeldOutScore(token_byte_lengths(tokenizer))
    with torch.no_grad():
        for logits, targets in predictions(model, open_tokens(built_repo / "data/tokens", "test"), 16, None):
            whole.add(logits, targets)
    rolling = json.loads((built_repo / "metrics.json").read_text())["tasks"][HELDOUT]["bits_per_byte"]
    assert abs(rolling - whole.result()["bits_per_byte"]) < 0.01, (rolling, whole.result())


def short_choice_task(repo: Path) -> str:
    """A multiple-choice task whose items fit the tiny model's 32-token context (the built-in next_line's passages
    do not: lm-eval's hf and local-completions models refuse a continuation longer than the window)."""
    rng = random.Random(0)
    lines = [line for d in read_documents(repo / "data/corpus", "test", ["text"]) for line in d["text"].split("\n")]
    words = [line.split() for line in lines if len(line.split()) > 8][:60]
    items = []
    for i, line in enumerate(words):
        others = [words[(i + k) % len(words)][4] for k in (7, 19, 31)]
        label = rng.randrange(4)
        choices = [*others[:label], line[4], *others[label:]]
        items.append({"context": " ".join(line[:4]), "choices": choices, "label": label})
    (repo / "data/short.jsonl").write_text("".join(json.dumps(item) + "\n" for item in items))
    (repo / "tasks/short_choice.yaml").write_text(
        f"task: {SHORT_TASK}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: data/short.jsonl\n"
        "output_type: multiple_choice\ntest_split: test\ndoc_to_text: context\ndoc_to_choice: choices\n"
        "doc_to_target: label\nmetric_list:\n  - metric: acc\n    aggregation: mean\n    higher_is_better: true\n"
    )
    return "tasks/short_choice.yaml"


def same_scores(repo: Path, out: Path, ways: list[str]) -> None:
    """The built-in held-out task and a short multiple-choice one scored in-process (as the evaluate stage does) and
    each of ``ways`` — "hf" (lm-eval's hf model on the HF export), "fp32" and "bf16" (lm-eval's local-completions
    against `solomon serve` computing in it) — by lm-eval's own command line; the figures agree."""
    short = short_choice_task(repo)
    model = weights.load(repo / "models")
    tokenizer = load_tokenizer(repo / "data/tokenizer.json")
    [in_process] = score_tasks([short], repo, model, tokenizer, read_meta(repo / "data/tokens")["eod_id"], 8)
    reference = {
        HELDOUT: json.loads((repo / "metrics.json").read_text())["tasks"][HELDOUT],
        SHORT_TASK: in_process.section,
    }
    block, export, files = model.config.block_size, out / "hf", ["tasks/solomon_heldout.yaml", short]
    assert solomon(repo, "export", "--format", "hf", "--out", str(export)).returncode == 0
    scores = {}
    if "hf" in ways:  # hf counts the model's inputs (block - 1 of them, and the token they predict)
        scores["hf"] = lm_eval_scores(
            repo, out, "hf", f"pretrained={export},max_length={block - 1},dtype=float32", files
        )
    for precision in [way for way in ways if way != "hf"]:
        process, port = start(repo, "--precision", precision, "--slots", "8", "--queue", "8")
        try:
            wait(port, process)  # the API counts one token to generate, dropped
            api = (f"base_url=http://127.0.0.1:{port}/v1/completions,tokenizer={export},"
                   f"tokenizer_backend=huggingface,max_length={block + 1}")  # fmt: skip
            scores[precision] = lm_eval_scores(repo, out / precision, "local-completions", api, files)
        finally:
            stop(process)
    for way, got in scores.items():
        close = 1e-4 if way != "bf16" else 0.01  # bf16: 8 bits of mantissa, the record in fp32
        assert abs(got[HELDOUT]["bits_per_byte"] - reference[HELDOUT]["bits_per_byte"]) < close, (way, got)
        items = round(abs(got[SHORT_TASK]["acc"] - reference[SHORT_TASK]["acc"]) * reference[SHORT_TASK]["n"])
        assert items <= (0 if way != "bf16" else 2), (way, got)  # bf16: a near tie may break the other way


def test_lm_eval_through_solomon_serve_gives_the_scores_the_pipeline_recorded(repo_copy: Path, tmp_path: Path) -> None:
    same_scores(repo_copy, tmp_path, ["fp32"])


@pytest.mark.long
def test_the_same_scores_from_the_hf_export_and_through_a_bf16_server(repo_copy: Path, tmp_path: Path) -> None:
    same_scores(repo_copy, tmp_path, ["hf", "bf16"] if describe().get("bf16_matmul") == "native" else ["hf"])


@pytest.mark.long  # two servers of two runs, each scored: most of a minute
def test_solomon_score_tells_the_runs_server_from_another_runs(repo_copy: Path, retrained) -> None:
    other = retrained({"train": {"seed": 7}})
    process, port = start(repo_copy)
    other_process, other_port = start(other)
    try:
        wait(port, process)
        wait(other_port, other_process)
        earned = solomon(repo_copy, "score", "--url", f"http://127.0.0.1:{port}")
        assert earned.returncode == 0, earned.stdout + earned.stderr
        assert "earns the recorded scores: 32 sequences of 2 tasks" in earned.stdout
        refused = solomon(repo_copy, "score", "--url", f"http://127.0.0.1:{other_port}")
        assert refused.returncode == 1 and refused.stdout.count("\n") == 1, refused.stdout + refused.stderr
        assert "does not earn the recorded scores: task " in refused.stdout
        only = solomon(repo_copy, "score", "--url", f"http://127.0.0.1:{port}", "--task", HELDOUT)
        assert "16 sequences of 1 tasks" in only.stdout, only.stdout + only.stderr
    finally:
        stop(process)
        stop(other_process)
    (latest_run_dir(repo_copy) / "task_requests.jsonl").write_text("")
    tampered = solomon(repo_copy, "score", "--url", "http://127.0.0.1:9")
    assert tampered.returncode == 2 and "does not verify" in tampered.stderr and os.linesep not in tampered.stderr[:-1]


def test_the_promotion_gate_holds_a_task_score_like_a_held_out_metric() -> None:
    from solomon.audit.promote import Refused, check_thresholds
    from solomon.params import PromoteParams

    metrics = {"test": {"bits_per_byte": 1.2}, "tasks": {NEXT_LINE: {"acc": 0.31, "n": 400}}}
    check_thresholds(metrics, PromoteParams(min={f"tasks.{NEXT_LINE}.acc": 0.3}))
    with pytest.raises(Refused, match=rf"^tasks\.{NEXT_LINE}\.acc 0\.31 is below promote\.min 0\.5$"):
        check_thresholds(metrics, PromoteParams(min={f"tasks.{NEXT_LINE}.acc": 0.5}))
    with pytest.raises(Refused, match=r"^tasks\.other\.acc: the run's metrics.json has no such number"):
        check_thresholds(metrics, PromoteParams(min={"tasks.other.acc": 0.5}))
    with pytest.raises(ValueError, match="String should match pattern"):
        PromoteParams.model_validate({"min": {"tasks.acc": 0.5}})
