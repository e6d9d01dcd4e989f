"""Docs cannot describe a parameter's default otherwise than params.py declares it: every place README.md,
KNOWN_ISSUES.md or a page of docs/ quotes a default in one of the forms below is checked against ``Params()``.

- "`train.max_steps` (1,650)": a key in backticks, then its value in parentheses;
- "`lr.schedule: constant`, the default" or "`lr.schedule: constant` (the default)";
- "`train.label_smoothing` ε (0.15 by default)": a key, a few words, then its value "by default" in parentheses."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from conftest import ROOT

from solomon.params import Params, flatten

KEY = r"(?P<key>[a-z_]+(?:\.[a-z_0-9]+)+)"
QUOTES = (
    re.compile(rf"`{KEY}` \((?P<value>-?[0-9][0-9,.]*(?:e-?[0-9]+)?)\)"),
    re.compile(rf"`{KEY}: (?P<value>[^`]+)`(?:,? \(the default\)|, the default(?! is))"),
    re.compile(rf"`{KEY}`[^`()]{{0,24}}\((?P<value>-?[0-9][0-9,.]*(?:e-?[0-9]+)?) by default\)"),
)
PAGES = [ROOT / "README.md", ROOT / "KNOWN_ISSUES.md", *sorted((ROOT / "docs").glob("*.md"))]
DEFAULTS = {key.removeprefix("params."): value for key, value in flatten(Params().model_dump(), "params").items()}


def quoted_defaults(text: str) -> list[tuple[int, str, str]]:
    """(line, key, value as written) of every default quoted in ``text`` in one of the forms above."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for pattern in QUOTES:
            found += [(number, m["key"], m["value"]) for m in pattern.finditer(line) if m["key"] in DEFAULTS]
    return found


def same(written: str, default: object) -> bool:
    value = yaml.safe_load(written.replace(",", "") if re.fullmatch(r"[0-9,.]+", written) else written)
    if isinstance(default, float) or isinstance(value, float):
        return isinstance(value, int | float) and float(value) == float(default)
    return value == default


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_a_quoted_default_is_params_pys(page: Path) -> None:
    wrong = [
        f"{page.name}:{line}: `{key}` quoted as {value}, params.py's default is {DEFAULTS[key]!r}"
        for line, key, value in quoted_defaults(page.read_text(encoding="utf-8"))
        if not same(value, DEFAULTS[key])
    ]
    assert not wrong, "\n".join(wrong)


def test_the_forms_are_found_and_compared() -> None:
    text = "`train.max_steps` (1,050) and `lr.schedule: noam`, the default; `lr.cooldown: 0` (the default is 0.2)"
    assert quoted_defaults(text) == [(1, "train.max_steps", "1,050"), (1, "lr.schedule", "noam")]
    assert quoted_defaults("with `train.label_smoothing` ε (0.1 by default), with") == [
        (1, "train.label_smoothing", "0.1")
    ]
    assert not same("1,050", DEFAULTS["train.max_steps"]) and same(f"{DEFAULTS['train.max_steps']:,}", 1650)
    assert same("constant", DEFAULTS["lr.schedule"]) and not same("noam", DEFAULTS["lr.schedule"])
