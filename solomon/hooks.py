"""Test hooks, read one way: a process's hooks are an object its entry point builds once from the environment
(``from_environment``: the variables are the interface tests drive real processes by) and hands in at the edge;
the code they hook never reads the environment. ``hook_variable`` is that one reading: unset is off, and a value
that does not parse is refused in one line that names the variable and its form."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeVar

from solomon.errors import SolomonError

T = TypeVar("T")


def hook_variable(environ: Mapping[str, str], name: str, parse: Callable[[str], T], form: str) -> T | None:
    """``parse`` of the variable ``name`` (None where it is unset or empty); a ValueError from ``parse`` becomes one
    line naming the variable and its ``form``."""
    raw = environ.get(name)
    if not raw:
        return None
    try:
        return parse(raw)
    except ValueError as exc:
        raise SolomonError(f"bad test hook variable {name}={raw!r} ({exc}): set it as {name}={form}") from None
