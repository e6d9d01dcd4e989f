"""`make isa-check`'s parts (lab/isa.py): every op hashes here, the table says what differs, and docs/portable.md's
block is what the newest committed record renders to. (The emulated run itself needs qemu-user: `make isa-check`.)"""

from __future__ import annotations

import json

from lab.isa import END, PAGE, ROOT, START, emit, render, table


def test_every_op_hashes_and_the_same_process_gives_the_same_hashes() -> None:
    first, again = emit(), emit()
    assert first == again and first.pop("capability")
    assert len(first) >= 20 and all(len(digest) == 64 for digest in first.values())


def test_the_table_names_what_pinning_changes_and_what_the_emulator_does_not_reproduce() -> None:
    native, pinned = {"a": "1", "b": "2"}, {"a": "1", "b": "3"}
    emulated = {"AMD": {"a": "9", "b": "3"}, "Intel": {"a": "1", "b": "4"}}
    lines = table({"native": native, "pinned": pinned, "emulated": emulated}).splitlines()
    assert lines[0] == "| op | pinning changes it | pinned = emulated AMD | pinned = emulated Intel |"
    assert lines[2:] == ["| a | no | differs | **equal** |", "| b | yes | **equal** | differs |"]
    same = {"b": "1", "A": "1"}
    assert table({"native": same, "pinned": same, "emulated": {"X": same}}).splitlines()[2].startswith("| A")


def test_the_page_is_what_its_record_renders() -> None:
    record = json.loads(max((ROOT / "reports/bench").glob("isa-*.json")).read_text())
    block = PAGE.read_text(encoding="utf-8").split(START)[1].split(END)[0]
    assert block == f"\n{render(record)}"
