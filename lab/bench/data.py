"""`make bench-data`: the data stages (check → prepare → tokenizer → datacard) on deterministic synthetic corpora of
several sizes, each stage a real process; per stage its wall time, MB/s of corpus and the peak RSS of its process
tree (workers included), the scaling exponents of time and memory in size, and beside them the limit that matters:
``tokenizers``' own ``encode_batch`` rate on the same text on every core, in the same run.

    python -m lab.bench.data --sizes 50,500,2000 [--scratch DIR] [--out reports/bench]
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import psutil
import yaml

from lab.scratch import merge
from solomon.atomic import write_json
from solomon.data.corpus import read_documents
from solomon.data.tokens import load_tokenizer
from solomon.machine import describe
from solomon.params import read_yaml
from solomon.pipeline import pipeline_env, stage_command
from solomon.records import PARAMS_FILE

ROOT = Path(__file__).resolve().parents[2]
STAGES = ("check", "prepare", "tokenizer", "datacard")
ENCODER_SAMPLE_BYTES = 48_000_000  # text the encoder's own rate is timed on
SEED = 20261202


def synthetic_corpus(path: Path, megabytes: int, seed: int = SEED) -> int:
    """A JSON Lines file of about ``megabytes`` MB of unique documents: a numbered title, then sentences of words
    drawn from a Zipf-like vocabulary of 30,000 made-up words. The same bytes for the same size and seed."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    vocab = np.array(["".join(rng.choice(letters, rng.integers(2, 11))) for _ in range(30_000)], dtype=object)
    weights = 1.0 / np.arange(1, vocab.size + 1) ** 1.1
    weights /= weights.sum()
    target = megabytes * 1_000_000
    written = number = 0
    with open(path, "w", encoding="utf-8") as handle:
        while written < target:
            lengths = rng.integers(40, 600, size=256)
            words = vocab[rng.choice(vocab.size, size=int(lengths.sum()), p=weights)]
            lines = []
            start = 0
            for n in lengths.tolist():
                body = " ".join(words[start : start + n].tolist())
                start += n
                lines.append(json.dumps({"text": f"Document {number}.\n{body}."}) + "\n")
                number += 1
            block = "".join(lines)
            handle.write(block)
            written += len(block.encode("utf-8"))
    return path.stat().st_size


def run_measured(command: list[str], cwd: Path) -> tuple[float, int]:
    """Wall seconds and the peak RSS (bytes) of the process and its children, sampled every 50 ms."""
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=cwd, env=pipeline_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    watched = psutil.Process(process.pid)
    peak = 0
    while process.poll() is None:
        try:
            tree = [watched, *watched.children(recursive=True)]
            peak = max(peak, sum(p.memory_info().rss for p in tree if p.is_running()))
        except psutil.Error:
            pass
        time.sleep(0.05)
    wall = time.perf_counter() - started
    _, err = process.communicate()
    if process.returncode:
        raise SystemExit(f"{' '.join(command)} failed: {err.decode()[-2000:]}")
    return wall, peak


def encoder_rate(work: Path) -> dict:
    """``encode_batch`` of the stage's own tokenizer on the train split's first ENCODER_SAMPLE_BYTES, every core
    (tokenizers' thread pool), text already in memory: what encoding alone costs (the better of two passes)."""
    tokenizer = load_tokenizer(work / "data/tokenizer.json")
    texts, size = [], 0
    for doc in read_documents(work / "data/corpus", "train", ["text"]):
        texts.append(doc["text"])
        size += len(doc["text"].encode("utf-8"))
        if size >= ENCODER_SAMPLE_BYTES:
            break
    tokenizer.encode_batch(texts[:64], add_special_tokens=False)  # warm the thread pool
    seconds = math.inf
    for _ in range(2):  # the better of two: the second runs with the tokenizer's word cache warm, as the stage does
        started = time.perf_counter()
        tokenizer.encode_batch(texts, add_special_tokens=False)
        seconds = min(seconds, time.perf_counter() - started)
    return {"bytes": size, "seconds": round(seconds, 3), "mb_per_s": round(size / seconds / 1e6, 2)}


def measure_size(megabytes: int, scratch: Path) -> dict:
    work = scratch / f"corpus-{megabytes}mb"
    shutil.rmtree(work, ignore_errors=True)
    (work / "corpus").mkdir(parents=True)
    size = synthetic_corpus(work / "corpus/synthetic.jsonl", megabytes)
    params = merge(read_yaml(ROOT / PARAMS_FILE), {"corpus": {"source": "corpus/synthetic.jsonl"}})
    (work / PARAMS_FILE).write_text(yaml.safe_dump(params))
    row: dict = {"megabytes": megabytes, "corpus_bytes": size, "stages": {}}
    for stage in STAGES:
        command = stage_command(ROOT, stage)
        wall, peak = run_measured(command, work)
        row["stages"][stage] = {"seconds": round(wall, 2), "mb_per_s": round(size / wall / 1e6, 2), "peak_rss": peak}
        print(f"  {megabytes} MB {stage}: {wall:.1f} s, {size / wall / 1e6:.2f} MB/s, peak {peak / 2**30:.2f} GiB")
    total = sum(s["seconds"] for s in row["stages"].values())
    row["end_to_end"] = {
        "seconds": round(total, 2),
        "mb_per_s": round(size / total / 1e6, 2),
        "peak_rss": max(s["peak_rss"] for s in row["stages"].values()),
    }
    row["encoder"] = encoder_rate(work)
    row["end_to_end"]["of_encoder"] = round(row["end_to_end"]["mb_per_s"] / row["encoder"]["mb_per_s"], 3)
    meta = json.loads((work / "data/tokens/meta.json").read_text())
    row["tokens"] = {split: info["tokens"] for split, info in meta["splits"].items()}
    row["sample"] = meta["sample"]
    shutil.rmtree(work, ignore_errors=True)
    return row


def exponent(rows: list[dict], value) -> float | None:
    """The slope of log(value) against log(size) between the smallest and the largest corpus."""
    if len(rows) < 2:
        return None
    first, last = rows[0], rows[-1]
    return round(math.log(value(last) / value(first)) / math.log(last["corpus_bytes"] / first["corpus_bytes"]), 3)


def table(rows: list[dict]) -> str:
    from tabulate import tabulate

    lines = []
    for row in rows:
        for stage, s in [*row["stages"].items(), ("end to end", row["end_to_end"])]:
            lines.append([row["megabytes"], stage, s["seconds"], s["mb_per_s"], round(s["peak_rss"] / 2**30, 2)])
        lines.append(
            [row["megabytes"], "encode_batch alone", row["encoder"]["seconds"], row["encoder"]["mb_per_s"], ""]
        )
    return tabulate(lines, ["corpus MB", "stage", "seconds", "MB/s", "peak RSS GiB"], "github")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="50,500,2000", help="corpus sizes in MB, comma-separated")
    parser.add_argument("--scratch", type=Path, default=None, help="where the corpora are made (default: a temp dir)")
    parser.add_argument("--out", type=Path, default=Path("reports/bench"), help="where the JSON record goes")
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    scratch = args.scratch or Path(tempfile.mkdtemp(prefix="solomon-bench-data-"))
    machine = describe()
    print(f"host: {machine.get('kind', machine)}", file=sys.stderr)
    rows = [measure_size(size, scratch) for size in sizes]
    record = {
        "time": datetime.now(UTC).strftime("%Y-%m-%dT%H%M%SZ"),
        "machine": machine,
        "rows": rows,
        "scaling": {
            "time": exponent(rows, lambda r: r["end_to_end"]["seconds"]),
            "peak_rss": exponent(rows, lambda r: r["end_to_end"]["peak_rss"]),
        },
    }
    print(table(rows))
    print(f"scaling exponent in size: time {record['scaling']['time']}, peak RSS {record['scaling']['peak_rss']}")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"data-{record['time']}.json"
    write_json(path, record)
    print(f"record: {path}")


if __name__ == "__main__":
    main()
