"""A figure linked to its record in docs/, README.md or KNOWN_ISSUES.md says what the record holds (lab/figures.py)."""

import json
from pathlib import Path

import pytest

from lab.figures import disagreement, figures

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([*(ROOT / "docs").glob("*.md"), ROOT / "README.md", ROOT / "KNOWN_ISSUES.md"])


def test_every_linked_figure_says_what_its_record_holds() -> None:
    linked = [figure for page in PAGES for figure in figures(page)]
    wrong = [line for figure in linked if (line := disagreement(figure))]
    assert not wrong, "\n".join(wrong)
    pages = {figure.page.name for figure in linked}
    assert {"reference-run.md", "performance.md", "README.md"} <= pages, pages


def test_the_reference_runs_headline_figures_are_linked_to_its_metrics() -> None:
    keys = {f.key for f in figures(ROOT / "docs/reference-run.md") if f.record.name == "metrics.json"}
    assert {"val.bits_per_byte", "test.bits_per_byte", "test.ece", "calibration.temperature"} <= keys, keys


@pytest.fixture
def record(tmp_path: Path) -> Path:
    path = tmp_path / "reports/run.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"val": {"bits_per_byte": 1.15853}, "mfu": 0.2334, "seconds": 2076.4, "steps": [3, 4]}))
    return path


@pytest.mark.parametrize(
    ("text", "key", "fault"),
    [
        ("**1.1585**", "val.bits_per_byte", None),
        ("1.16 bits per byte", "val.bits_per_byte", None),
        ("1.1584", "val.bits_per_byte", "holds val.bits_per_byte = 1.15853 (shown: 1.1585)"),
        ("23.3 %", "mfu", None),
        ("23.4 %", "mfu", "(shown: 23.3)"),
        ("34 min 36 s", "seconds", None),
        ("34 min 37 s", "seconds", "(shown: 34 min 36 s)"),
        ("4", "steps.1", None),
        ("1.2", "val.loss", "names 'val.loss' in run.json: \"no 'loss' on the way to 'val.loss'\""),
        ("2", "val", "is {'bits_per_byte': 1.15853}, not a number"),
    ],
)
def test_a_figure_that_disagrees_with_its_record_is_named(tmp_path: Path, record: Path, text, key, fault) -> None:
    page = tmp_path / "page.md"
    page.write_text(f'Intro.\nThe run reached [{text}](reports/run.json "{key}") on this host.\n')
    (figure,) = figures(page)
    line = disagreement(figure)
    if fault is None:
        assert line is None
    else:
        assert line is not None and line.startswith(f"page.md:2: [{text}]") and line.endswith(fault), line


def test_a_link_to_a_missing_record_is_named(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text('[1.0](gone.json "val")\n')
    (figure,) = figures(page)
    assert "gone.json, which does not exist" in disagreement(figure)
