"""Figures in the docs that are linked to the record they come from, checked against it.

A measured figure is written once as a link to its record, with the value's key as the link's title:
``[**1.1585**](../reports/training/<run>/metrics.json "val.bits_per_byte")``. The figure's text must be the
record's value as shown: rounded to the decimals it shows, a percentage where it ends in ``%`` and the value is a
fraction, minutes and seconds where it reads ``M min S s`` and the value is in seconds. tests/test_docs_figures.py
runs ``check`` over every page, so a figure that no longer says what its record holds fails there, by name.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

LINK = re.compile(r"\[(?P<text>[^\]]*?\d[^\]]*)\]\((?P<target>[^)\s]+\.(?:json|yaml))\s+\"(?P<key>[^\"]+)\"\)")
NUMBER = re.compile(r"[-−]?\d[\d,]*(?:\.\d+)?")
MINUTES = re.compile(r"(\d+) min (\d+) s")


@dataclass(frozen=True)
class Figure:
    page: Path
    line: int
    text: str
    record: Path
    key: str


def figures(page: Path) -> list[Figure]:
    """The linked figures of one Markdown page."""
    found = []
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        for match in LINK.finditer(line):
            record = (page.parent / match["target"]).resolve()
            found.append(Figure(page, number, match["text"], record, match["key"]))
    return found


def value_at(record: Path, key: str) -> object:
    """The value under a dotted key (list items by index) of a JSON or YAML record."""
    data = json.loads(record.read_text()) if record.suffix == ".json" else yaml.safe_load(record.read_text())
    for part in key.split("."):
        if isinstance(data, list) and part.lstrip("-").isdigit():
            data = data[int(part)]
        elif isinstance(data, dict) and part in data:
            data = data[part]
        else:
            raise KeyError(f"no {part!r} on the way to {key!r}")
    return data


def disagreement(figure: Figure) -> str | None:
    """None when the figure says what its record holds, else why not, in one line."""
    where = f"{figure.page.name}:{figure.line}: [{figure.text}]"
    if not figure.record.is_file():
        return f"{where} links {figure.record}, which does not exist"
    try:
        value = value_at(figure.record, figure.key)
    except (KeyError, IndexError, ValueError) as exc:
        return f"{where} names {figure.key!r} in {figure.record.name}: {exc}"
    if not isinstance(value, int | float) or isinstance(value, bool):
        return f"{where}: {figure.key!r} in {figure.record.name} is {value!r}, not a number"
    shown = _shown(figure.text, float(value))
    if shown is None:
        return None
    return f"{where} but {figure.record.name} holds {figure.key} = {value} (shown: {shown})"


def _shown(text: str, value: float) -> str | None:
    """How ``value`` reads at the precision of ``text``, or None when the text reads so."""
    plain = text.replace("*", "").replace("`", "")
    if clock := MINUTES.search(plain):
        seconds = round(value)
        expected = f"{seconds // 60} min {seconds % 60} s"
        return None if clock.group(0) == expected else expected
    number = NUMBER.search(plain)
    assert number is not None  # LINK asks for a digit
    digits = number.group(0).replace(",", "").replace("−", "-")
    if "%" in plain[number.end() :].lstrip()[:1] and abs(value) <= 1:
        value *= 100
    decimals = len(digits.partition(".")[2])
    expected = f"{value:.{decimals}f}"
    if float(digits) == float(expected):
        return None
    return expected
