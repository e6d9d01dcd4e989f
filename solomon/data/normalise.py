"""Text normalisation: Unicode NFC, one newline style, control characters dropped, runs of spaces folded, lines
trimmed, blank runs folded to one blank line.

Written as a few regular-expression passes over the whole text, each skipped when a cheap test finds nothing to
change, so clean text costs little more than a scan (a character-by-character loop in Python was the prepare
stage's bottleneck). The result is the same as the rule read literally (tests/test_normalise.py holds them equal).
"""

from __future__ import annotations

import re
import sys
import unicodedata

# Every character that becomes a space: whitespace (as str.isspace and re's \s read it) and control characters
# (category Cc), the newline aside. Derived from the running Python's Unicode tables, never listed by hand; Cc is
# looked for below U+0100 only because Unicode's stability policy fixes that category to U+0000-001F and U+007F-009F.
_WHITESPACE = set(filter(str.isspace, map(chr, range(sys.maxunicode + 1))))
_CONTROL = {c for c in map(chr, range(0x100)) if unicodedata.category(c) == "Cc"}
_TO_SPACE = "".join(sorted((_WHITESPACE | _CONTROL) - {"\n"}))
_NOT_SPACE = "[" + "".join(re.escape(c) for c in _TO_SPACE if c != " ") + "]"
_FOLD_TEST = re.compile(_NOT_SPACE)  # no space is in it, so scanning for it is fast
_FOLD = re.compile("[" + re.escape(_TO_SPACE) + "]{2,}|" + _NOT_SPACE)
_LINE_EDGES = re.compile(r" \n ?|\n ")
_BLANK_RUNS = re.compile(r"\n{3,}")


def normalise(text: str) -> str:
    """Unicode NFC, one newline style, control characters dropped, runs of spaces folded, lines trimmed."""
    if not text.isascii():
        text = unicodedata.normalize("NFC", text)
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    if "  " in text or _FOLD_TEST.search(text):
        text = _FOLD.sub(" ", text)
    if " \n" in text or "\n " in text:
        text = _LINE_EDGES.sub("\n", text)
    if "\n\n\n" in text:
        text = _BLANK_RUNS.sub("\n\n", text)
    return text.strip(" \n")
