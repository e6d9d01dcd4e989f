"""No measurements or dates in the product's code: parameter meanings, docstrings, comments and string literals say
what and why; host timings, throughputs, measured shares of a step or a peak, and dates go stale in code (and in
params.yaml and docs/params.md, which copy the meanings), so they live in the docs pages written from measurements
(docs/performance.md, docs/training.md, docs/serving.md, docs/reference-run.md, ...).

Scanned: every .py under the product package ``solomon/``, the pipeline's ``stages/`` and ``lab/`` (the tooling
that measures: its figures go to the pages it writes, not into its own comments); string constants with ``ast``
(docstrings and the literal parts of f-strings: a placeholder such as ``{seconds:.1f} s`` prints a measurement at
run time and is no figure), comments with ``tokenize``.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest
from conftest import ROOT

SCANNED = ("solomon", "stages", "lab")

_NUMBER = r"(?<![\w.{])~?\d[\d,]*(?:\.\d+)?"
_RANGE = rf"{_NUMBER}(?:\s?[-–]\s?\d[\d,]*(?:\.\d+)?)?"
_MONTHS = (
    r"Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|Sep(?:t(?:ember)?)?|Oct(?:ober)?"
    r"|Nov(?:ember)?|Dec(?:ember)?"
)
PATTERNS = {
    "host timing": re.compile(rf"{_RANGE}\s?(?:µs|us|ns|ms|s|secs?|seconds?|mins?|minutes?|h|hrs?|hours?)(?![\w/])"),
    "throughput": re.compile(
        rf"{_RANGE}\s?(?:[KMGT]i?B/s|(?:new\s)?tokens?/s|[GT]?FLOP/s|it/s|steps?/s|requests?/s)", re.IGNORECASE
    ),
    "measured share": re.compile(
        rf"{_RANGE}\s?%\s+(?:(?:slower|faster|cheaper|quicker)\b|of\s+(?:\S+\s+){{0,3}}?\S*(?:step|peak|MFU|CPU|wall))"
        r"|\bMFU\b[^.\n]{0,20}?\d+(?:\.\d+)?\s?%"
    ),
    "measured ratio": re.compile(rf"{_RANGE}\s?[x×]\s+(?:faster|slower|cheaper|quicker)\b"),
    "measured figure": re.compile(r"\bmeasured\b[,:]?\s+(?:(?:on|at)\s+\w+[,:]?\s+)?~?\d"),
    "named host": re.compile(
        r"\b(?:on|of|for) the (?:\w+ ){0,2}?(?:Intel|AMD|Zen ?\d|EPYC|Xeon|Graviton)\b"
        r"(?: \w+){0,2}? (?:host|kind|machine)s?\b"
    ),
    "ISO date": re.compile(r"\b20\d\d-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])"),
    "month-year date": re.compile(rf"\b(?:{_MONTHS})\.?,?\s+20\d\d\b"),
}

# (file, text on the flagged line): settings and formats that read like figures. Each entry is a reason, not a
# figure; the test fails on an entry that no longer matches anything, so the list cannot outgrow the code.
ALLOWED = {
    # MLFLOW_HTTP_REQUEST_TIMEOUT: the timeout Solomon sets (a setting, its value beside it), not a timing
    ("solomon/tracking/store.py", "one retry and 10 s instead of its minutes of retries"),
    # the bench's RSS sampling interval (its ``time.sleep(0.05)``): a setting of the measurement, not a result
    ("lab/bench/data.py", "sampled every 50 ms"),
    # the nanoGPT commit pinned by its hash: the date names which upstream commit it was, it measures nothing
    ("lab/nanogpt/run.py", 'the newest commit of 2026-12-01 ("mention nanochat")'),
}


def findings(source: str) -> list[tuple[int, str, str]]:
    """(line, kind, the text's line it is on) for every figure in ``source``'s string constants and comments."""
    texts: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            texts.append((node.lineno, node.value))
    block: list[tuple[int, str]] = []  # consecutive comment lines read as one text: a figure may wrap
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type != tokenize.COMMENT:
            continue
        if block and token.start[0] != block[-1][0] + 1:
            texts.append((block[0][0], " ".join(text for _, text in block)))
            block = []
        block.append((token.start[0], token.string.lstrip("#").strip()))
    if block:
        texts.append((block[0][0], " ".join(text for _, text in block)))
    found = []
    for line, text in texts:
        for kind, pattern in PATTERNS.items():
            for match in pattern.finditer(text):
                start = text.rfind("\n", 0, match.start()) + 1
                end = text.find("\n", match.end())
                context = text[start : end if end >= 0 else len(text)].strip()
                found.append((line + text.count("\n", 0, match.start()), kind, context))
    return found


def scanned_files() -> list[Path]:
    return sorted(path for root in SCANNED for path in (ROOT / root).rglob("*.py"))


def test_no_host_timings_or_dates_in_code() -> None:
    used, problems = set(), []
    for path in scanned_files():
        name = path.relative_to(ROOT).as_posix()
        for line, kind, context in findings(path.read_text(encoding="utf-8")):
            allowed = {entry for entry in ALLOWED if entry[0] == name and entry[1] in context}
            used |= allowed
            if not allowed:
                problems.append(f"{name}:{line}: {kind}: {context}")
    assert not problems, (
        "measurements or dates in code (say what and why; put the figure in a docs page):\n" + "\n".join(problems)
    )
    assert used == set(ALLOWED), f"allowlist entries that match nothing any more: {sorted(set(ALLOWED) - used)}"


@pytest.mark.parametrize(
    "source",
    [
        '"optimiser steps (about 56 min on the Zen 4 kind at its 1.757 s a step)"',
        '"""the public function costs a quarter (46 against 34 µs a row)"""',
        "x = 1  # imports torch._inductor (1.0 s of every stage's start)",
        '"eager fp32 820.6 tokens/s, 74.1 GFLOP/s"',
        '"the end to end rate, 7.89 MB/s"',
        '"69.1 % of the fp32 peak"',
        "# memory pass per allocation (10-15 % of a profiled bf16\n# step's CPU time)",
        '"BatchedMuon measured 9-18 % slower per optimiser step"',
        '"the default layers ran 1.4–2.1× faster packed"',
        '"(measured: 0.31-0.34 nats below the whole split)"',
        '"the newest commit of 2026-12-01"',
        '"measured in December 2026"',
        '"fp32 GEMMs on the Intel host differ below 16 rows"',
        '"bit for bit on the Intel AMX host it was measured on"',
    ],
)
def test_a_measurement_is_found(source: str) -> None:
    assert findings(source), source


@pytest.mark.parametrize(
    "source",
    [
        'f"{seconds:.1f} s a step"',  # prints a measurement at run time
        'f"{elapsed:.0f} ms, {rate:,.1f} tokens/s"',
        '"%.1f s" % seconds',
        '"seconds to wait for /health before giving up (default: TIMEOUT_S)"',
        '"optimiser steps; docs/reference-run.md gives each host kind\'s time a step"',
        "TOLERANCE = 1e-3  # T to 0.1 %",
        '"does a top-1 probability of 0.3 come true 30 % of the time?"',
        '"rows of logits per chunk: 4 MiB of fp32 for an 8k vocabulary, 2,048 tokens a batch"',
        '"x86_64 AuthenticAMD family 25 model 17, fp32 and bf16"',
        '"an AVX2-only CPU such as AMD Zen 3 runs bf16 matmuls on a scalar path"',
        '"sequences per optimiser step, 16 by default"',
    ],
)
def test_a_setting_or_format_is_not(source: str) -> None:
    assert not findings(source), findings(source)
