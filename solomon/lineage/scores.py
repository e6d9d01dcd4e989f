"""Whether a live server earns a run's recorded benchmark scores.

The evaluate stage keeps, for each task, a sample of the sequences lm-eval scored (their token ids, how many are
context, and the log-likelihood the run's own model gave the continuation: ``task_requests.jsonl`` in the run
directory, a manifest subject). ``replay`` sends them to a server's ``/v1/completions`` as lm-eval's
``local-completions`` does (token ids, ``echo`` with ``logprobs``, one token generated and dropped), a few prompts
a request, and compares each continuation's summed log-probability with the record. The bound is on the mean
|Δ| per scored token: a server of the same weights differs only by rounding (fp32: kernels and batch shapes; bf16:
8 bits of mantissa), a server of other weights by far more on every token.

The replay proves the sampled sequences, not the whole score: a server that answered those alone correctly would
pass (docs/scores.md says what a recorded score proves and what it cannot).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from solomon.errors import SolomonError
from solomon.records import RunFiles

# mean |Δ log-likelihood| per scored token a server may show against the record, by the precision it computes in
TOLERANCES = {
    "fp32": (1e-4, "fp32 on both sides: kernels and batch shapes differ only in the last bits"),
    "bf16": (0.02, "the server computes in bf16 (8 bits of mantissa), the record was made in fp32"),
}
PROMPTS_PER_REQUEST = 4


@dataclass
class ScoreVerdict:
    tolerance: float
    why: str
    compared: int = 0
    tokens: int = 0
    worst: float = 0.0  # the largest mean |Δ| per token of one sequence
    tasks: set[str] = field(default_factory=set)
    failure: str | None = None

    @property
    def holds(self) -> bool:
        return self.failure is None and self.compared > 0

    def line(self) -> str:
        if self.failure:
            return f"does not earn the recorded scores: {self.failure}"
        return (
            f"earns the recorded scores: {self.compared} sequences of {len(self.tasks)} tasks "
            f"({self.tokens:,} tokens), "
            f"largest mean |Δ log-likelihood| per token {self.worst:.2g} ≤ {self.tolerance:g} ({self.why})"
        )


def read_requests(run_dir: Path, tasks: list[str] | None = None) -> list[dict]:
    """The run's recorded sample (of ``tasks`` only, when given), refused in one line where there is none."""
    path = run_dir / RunFiles.TASK_REQUESTS
    if not path.is_file():
        raise SolomonError(f"{run_dir} records no task requests (scored before benchmark tasks existed): rerun its "
                           "evaluate stage with `dvc repro evaluate`")  # fmt: skip
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]
    chosen = [r for r in records if tasks is None or r["task"] in tasks]
    if not chosen:
        named = f" of {', '.join(tasks)}" if tasks else ""
        known = ", ".join(sorted({r["task"] for r in records})) or "none"
        raise SolomonError(f"{path} holds no requests{named} (its tasks: {known})")
    return chosen


def replay(
    requests: list[dict], ask: Callable[[dict], dict], precision: str = "fp32", tolerance: float | None = None
) -> ScoreVerdict:
    """Each recorded sequence put to ``ask`` (posts a completions body, returns the answer) and compared."""
    limit, why = (tolerance, "given") if tolerance is not None else TOLERANCES[precision]
    verdict = ScoreVerdict(limit, why)
    for start in range(0, len(requests), PROMPTS_PER_REQUEST):
        batch = requests[start : start + PROMPTS_PER_REQUEST]
        body = {
            "prompt": [r["tokens"] for r in batch], "max_tokens": 1, "temperature": 0, "logprobs": 1, "echo": True,
            "seed": 0,
        }  # fmt: skip
        choices = sorted(ask(body)["choices"], key=lambda choice: choice["index"])
        if len(choices) != len(batch):
            verdict.failure = f"{len(batch)} prompts sent, {len(choices)} choices answered"
            return verdict
        for record, choice in zip(batch, choices, strict=True):
            logprobs = (choice.get("logprobs") or {}).get("token_logprobs")
            scored = len(record["tokens"]) - record["context"]
            earned = logprobs[record["context"] : len(record["tokens"])] if isinstance(logprobs, list) else []
            if len(earned) != scored or any(not isinstance(v, int | float) for v in earned):
                verdict.failure = (
                    f"task {record['task']}: the server gave no log-probability for each prompt token (echo with "
                    "logprobs): it cannot be checked"
                )
                return verdict
            delta = abs(sum(earned) - record["loglikelihood"]) / scored
            verdict.compared, verdict.tokens = verdict.compared + 1, verdict.tokens + scored
            verdict.tasks.add(record["task"])
            verdict.worst = max(verdict.worst, delta)
            if delta > limit:
                verdict.failure = (
                    f"task {record['task']}, sequence {start + batch.index(record)}: the server's log-likelihood "
                    f"{sum(earned):.4f} against the recorded {record['loglikelihood']:.4f} over {scored} tokens "
                    f"(mean |Δ| per token {delta:.3g} > {limit:g}, {why})"
                )
                return verdict
    return verdict
