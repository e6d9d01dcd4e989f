"""`make test-long` (CI's test-long job): a couple of trials of random SIGKILLs of `dvc repro`, each compared byte
for byte."""

from __future__ import annotations

import pytest
from conftest import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.long]  # about 90 s


def test_random_kills_of_dvc_repro_resume_to_the_same_bytes() -> None:
    from lab.chaos import chaos

    lines: list[str] = []
    result = chaos(ROOT, trials=2, seed=7, report=lines.append)
    assert len(lines) == 2 and all("kill(s) at" in line for line in lines)
    assert sum(len(r["kills_after_s"]) for r in result["results"]) >= 1, "no kill landed: nothing was tested"
    assert result["identical"] == 2, lines
    assert result["lock_repaired"] == sum(r["lock_repaired"] for r in result["results"])
