"""The README stays short and true, and the pages beside it cannot drift: the README has at most 1,000 words and no
line over 160 characters, and draws the floors tests/test_architecture.py declares; docs/layout.md is exactly what
``lab.layout`` writes from the code now, naming every module, stage script and lab module on its floor; every
KNOWN_ISSUES.md entry is a bullet of at most three lines; no relative link in the README, KNOWN_ISSUES.md or docs/
points at a missing file; docs/params.md names exactly the keys of params.yaml."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel
from test_architecture import FLOORS, TOP, floor_of

from lab.layout import PAGE, layout_page
from solomon.params import Params

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
LAYOUT = ROOT / PAGE
KNOWN_ISSUES = ROOT / "KNOWN_ISSUES.md"
MAX_README_WORDS = 1000
MAX_README_LINE = 160
MAX_ENTRY_LINES = 3  # what, why, what would change it
MAX_KNOWN_ISSUES_LINE = 120

MODULE_PATH = re.compile(r"`((?:solomon|stages|lab)/[\w/]+\.py)`")
# The target of a Markdown link [text](target); URLs and in-page anchors are skipped where it is used.
LINK = re.compile(r"\]\(([^)\s]+)\)")


def section(markdown: str, heading: str) -> str:
    """The text under ``## heading`` up to the next ``##`` heading."""
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", markdown, flags=re.M | re.S)
    assert match, f"no '## {heading}' section"
    return match.group(1)


def test_readme_is_short() -> None:
    text = README.read_text()
    words = len(text.split())
    assert words <= MAX_README_WORDS, f"README.md has {words} words; move detail to docs/ and link it"
    long = [(n, len(line)) for n, line in enumerate(text.splitlines(), 1) if len(line) > MAX_README_LINE]
    assert not long, f"README.md lines over {MAX_README_LINE} characters (line, length): {long}"


def test_readme_draws_the_floors_the_architecture_test_declares() -> None:
    """The README's layout names the floors from the ground up (``ground → data → …``) as the test declares them."""
    drawn = re.search(r"^\s*(ground(?: → \w+)+)", section(README.read_text(), "Layout"), flags=re.M)
    assert drawn, "README.md's layout draws no floors (ground → data → …)"
    declared = [name for name, _ in FLOORS]
    assert drawn.group(1).split(" → ") == declared, f"README.md draws {drawn.group(1)!r}; the floors are {declared}"
    assert "docs/layout.md" in section(README.read_text(), "Layout")


def test_layout_page_is_what_the_generator_writes() -> None:
    assert LAYOUT.read_text() == layout_page(ROOT, FLOORS, TOP), f"{PAGE} is stale: run `python -m lab.layout`"


def layout_rows() -> list[tuple[str, str]]:
    """(floor, module path) of each row of docs/layout.md's table, in order."""
    rows = []
    for line in LAYOUT.read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) > 1:
            rows += [(cells[0], path) for path in MODULE_PATH.findall(cells[1])]
    return rows


def actual_modules() -> set[str]:
    code = {p for top in ("solomon", "lab") for p in (ROOT / top).rglob("*.py") if p.name != "__init__.py"}
    stages = set((ROOT / "stages").glob("*.py"))
    return {p.relative_to(ROOT).as_posix() for p in code | stages}


def test_layout_names_every_module_and_no_other() -> None:
    named, actual = {path for _, path in layout_rows()}, actual_modules()
    assert named == actual, (
        f"{PAGE} is stale: missing {sorted(actual - named)}, names files that do not exist {sorted(named - actual)}"
    )


def test_layout_rows_stand_on_their_floor_from_the_ground_up() -> None:
    """The floor column is the one tests/test_architecture.py enforces, and the rows climb, never descend."""
    names = [name for name, _ in FLOORS] + ["top", "stage", "lab"]
    climbed = 0
    for floor, path in layout_rows():
        if path.startswith("stages/"):
            expected = "stage"
        elif path.startswith("lab/"):
            expected = "lab"
        else:
            expected = names[floor_of(".".join(Path(path).with_suffix("").parts))]
        assert floor == expected, f"{PAGE} puts {path} on floor {floor!r}; it is on {expected!r}"
        assert names.index(floor) >= climbed, f"{PAGE} lists {path} ({floor}) after a higher floor"
        climbed = names.index(floor)


def known_issues_entries() -> list[list[str]]:
    """Each entry of KNOWN_ISSUES.md: a bullet (``- ``) and its continuation lines (indented two spaces), under a
    ``## `` heading. Anything else (a paragraph, a nested list, a table) is an error: an entry is one short bullet."""
    lines = KNOWN_ISSUES.read_text().splitlines()
    assert lines[0].startswith("# "), "KNOWN_ISSUES.md starts with its title"
    entries: list[list[str]] = []
    entries_here: list[str] | None = None
    under_heading = False
    for number, line in enumerate(lines[1:], 2):
        if line.startswith("## "):
            under_heading, entries_here = True, None
        elif not line.strip():
            entries_here = None
        elif line.startswith("- ") and under_heading:
            entries_here = [line]
            entries.append(entries_here)
        elif line.startswith("  ") and not line.startswith("   ") and under_heading and entries_here is not None:
            entries_here.append(line)
        elif not under_heading:
            continue  # the introduction before the first heading
        else:
            raise AssertionError(f"KNOWN_ISSUES.md:{number} is neither a heading nor part of a bullet entry: {line!r}")
    return entries


def test_known_issues_entries_are_short() -> None:
    entries = known_issues_entries()
    assert entries, "KNOWN_ISSUES.md has no entries"
    long = [entry[0][:70] for entry in entries if len(entry) > MAX_ENTRY_LINES]
    assert not long, f"KNOWN_ISSUES.md entries over {MAX_ENTRY_LINES} lines (what, why, what would change it): {long}"
    wide = [line[:70] for entry in entries for line in entry if len(line) > MAX_KNOWN_ISSUES_LINE]
    assert not wide, f"KNOWN_ISSUES.md lines over {MAX_KNOWN_ISSUES_LINE} characters: {wide}"


def test_relative_links_point_at_files() -> None:
    pages = [README, KNOWN_ISSUES, *sorted((ROOT / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        for target in LINK.findall(page.read_text()):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue  # a URL (https:, mailto:) or an anchor in the same page
            path = target.split("#", 1)[0]
            if not (page.parent / path).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, f"relative links to missing files: {broken}"


def param_keys(model: type[BaseModel] = Params, prefix: str = "") -> set[str]:
    """Every key of params.yaml, dotted; a section is a key too (``corpus.card`` documents its fields at once)."""
    keys = set()
    for name, field in model.model_fields.items():
        key = prefix + name
        keys.add(key)
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            keys |= param_keys(field.annotation, key + ".")
    return keys


def test_params_reference_names_every_key() -> None:
    rows = [line for line in (ROOT / "docs" / "params.md").read_text().splitlines() if line.startswith("| `")]
    documented = {re.match(r"\| `([\w.]+)`", row).group(1) for row in rows}
    keys = param_keys()
    sections = {key for key in keys if any(other.startswith(key + ".") for other in keys)}
    covered = {key for key in keys if any(key == d or key.startswith(d + ".") for d in documented)}
    assert not documented - keys, f"docs/params.md documents keys params.yaml does not have: {documented - keys}"
    missing = keys - sections - covered
    assert not missing, f"keys of params.yaml missing from docs/params.md: {sorted(missing)}"
