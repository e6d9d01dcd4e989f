"""The README stays short and true: its layout table names exactly the modules and stage scripts that exist, each
on the floor tests/test_architecture.py enforces; no relative link in it, KNOWN_ISSUES.md or docs/ points at a
missing file; docs/params.md names exactly the keys of params.yaml."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel
from test_architecture import FLOORS, floor_of

from solomon.params import Params

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
MAX_README_LINES = 150

MODULE_PATH = re.compile(r"`((?:solomon|stages)/[\w/]+\.py)`")
# The target of a Markdown link [text](target); URLs and in-page anchors are skipped where it is used.
LINK = re.compile(r"\]\(([^)\s]+)\)")


def section(markdown: str, heading: str) -> str:
    """The text under ``## heading`` up to the next ``##`` heading."""
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", markdown, flags=re.M | re.S)
    assert match, f"README.md has no '## {heading}' section"
    return match.group(1)


def layout_rows() -> list[tuple[str, str]]:
    """(floor, module path) of each row of the layout table, in order."""
    rows = []
    for line in section(README.read_text(), "Layout").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) > 1:
            rows += [(cells[0], path) for path in MODULE_PATH.findall(cells[1])]
    return rows


def layout_modules() -> set[str]:
    return {path for _, path in layout_rows()}


def actual_modules() -> set[str]:
    package = {p for p in (ROOT / "solomon").rglob("*.py") if p.name != "__init__.py"}
    stages = set((ROOT / "stages").glob("*.py"))
    return {p.relative_to(ROOT).as_posix() for p in package | stages}


def test_readme_is_short() -> None:
    lines = len(README.read_text().splitlines())
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines; move detail to docs/"


def test_layout_names_every_module_and_no_other() -> None:
    named, actual = layout_modules(), actual_modules()
    assert named == actual, (
        f"README.md's layout table is stale: missing {sorted(actual - named)}, "
        f"names files that do not exist {sorted(named - actual)}"
    )


def test_relative_links_point_at_files() -> None:
    pages = [README, ROOT / "KNOWN_ISSUES.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        for target in LINK.findall(page.read_text()):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue  # a URL (https:, mailto:) or an anchor in the same page
            path = target.split("#", 1)[0]
            if not (page.parent / path).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, f"relative links to missing files: {broken}"


def test_layout_rows_stand_on_their_floor_from_the_ground_up() -> None:
    """The floor column is the one tests/test_architecture.py enforces, and the rows climb, never descend."""
    names = [name for name, _ in FLOORS] + ["top", "stage"]
    climbed = 0
    for floor, path in layout_rows():
        if path.startswith("stages/"):
            expected = "stage"
        else:
            expected = names[floor_of(".".join(Path(path).with_suffix("").parts))]
        assert floor == expected, f"README.md puts {path} on floor {floor!r}; it is on {expected!r}"
        assert names.index(floor) >= climbed, f"README.md lists {path} ({floor}) after a higher floor"
        climbed = names.index(floor)


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
