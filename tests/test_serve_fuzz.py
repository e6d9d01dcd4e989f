"""`solomon serve` fuzzed from its own /openapi.json by schemathesis, valid and invalid requests, a bounded number per
operation: none answers 5xx (its `not_a_server_error` check). A real process on 127.0.0.1 over a copy of the tiny
pipeline. It has found a top_p that float32 rounds to 0 (every token cut: 500); a failure prints a curl command
that repeats it."""

from __future__ import annotations

from pathlib import Path

import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.generation import GenerationMode
from serve_helpers import start, stop, wait

EXAMPLES = 150  # per operation: about 30 s for the completions on a loaded 2-core machine, the GETs take one each
# Small bounds, which schemathesis reads from the schema (max_tokens, n): each example generates in milliseconds.
SERVER = ("--slots", "2", "--queue", "2", "--max-tokens", "8", "--max-prompt-tokens", "64")


def test_no_operation_answers_a_server_error(repo_copy: Path) -> None:
    process, port = start(repo_copy, *SERVER)
    failures, operations = [], []
    try:
        wait(port, process)
        schema = schemathesis.openapi.from_url(f"http://127.0.0.1:{port}/openapi.json")
        for result in schema.get_all_operations():
            operation = result.ok()
            operations.append(f"{operation.method.upper()} {operation.path}")

            @given(case=st.one_of(*(operation.as_strategy(mode) for mode in GenerationMode)))
            @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
            def no_server_error(case) -> None:
                case.call_and_validate(checks=[not_a_server_error], timeout=60)

            try:
                no_server_error()
            except Exception as exc:  # schemathesis's failure group: the status, the body and a curl to repeat it
                failures.append(f"{operations[-1]}: {exc}")
    finally:
        stop(process)
    assert {"POST /v1/completions", "GET /metrics", "GET /readyz"} <= set(operations), operations
    assert not failures, "\n".join(failures)
    assert process.returncode == 0, process.stderr.read()
