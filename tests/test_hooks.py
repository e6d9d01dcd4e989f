"""Every process's test hooks are read from the environment one way (solomon/hooks.py): unset is off, a set value
is parsed once where the process starts, and a malformed one is refused in one line naming the variable and its
form — the data stages' and the server's as the train stage's."""

from __future__ import annotations

from pathlib import Path

import pytest

from solomon.atomic import no_crash
from solomon.data import hooks as data_hooks
from solomon.errors import SolomonError
from solomon.serving import hooks as serving_hooks


def test_the_data_stages_crash_point_is_off_unless_named_and_refuses_a_malformed_one() -> None:
    assert data_hooks.crash_point({}, "prepare") is no_crash
    assert data_hooks.crash_point({data_hooks.CRASH_AT: "tokenizer:swap"}, "prepare") is no_crash
    assert data_hooks.crash_point({data_hooks.CRASH_AT: "prepare:swap"}, "prepare") is not no_crash
    for bad in ("prepare", "prepare:midway"):
        with pytest.raises(SolomonError, match=rf"bad test hook variable SOLOMON_DATA_CRASH_AT='{bad}'.*<stage>:"):
            data_hooks.crash_point({data_hooks.CRASH_AT: bad}, "prepare")


def test_the_servers_hooks_are_read_the_same_way(tmp_path: Path) -> None:
    assert serving_hooks.Hooks.from_environment({}) == serving_hooks.NO_HOOKS
    held = serving_hooks.Hooks.from_environment({serving_hooks.HOLD_UNTIL: str(tmp_path / "go")})
    assert held.hold_until == tmp_path / "go"
