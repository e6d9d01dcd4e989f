"""What every command shares: how a run is named and found, ``--root``, and checked numbers."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path

from solomon import records
from solomon.errors import SolomonError
from solomon.records import PARAMS_FILE

ROOT_HELP = f"the repository root: workspace, DVC cache, {PARAMS_FILE}, {records.LATEST} (default: here)"
RUN_ENV = "SOLOMON_RUN"  # the serving image names its run here
RUN_HELP = (
    f"the run: its id, or its directory's path (<report.root>/<run-id>); default: ${RUN_ENV} if set, else the "
    f"latest run ({records.LATEST}). `solomon runs` lists them"
)


def number(
    kind: type[int] | type[float] = int,
    at_least: float | None = None,
    above: float | None = None,
    at_most: float | None = None,
) -> Callable[[str], int | float]:
    """An argparse ``type`` reading a number of ``kind`` within the bounds, refusing others in one line."""
    noun = "a whole number" if kind is int else "a number"
    if at_least is not None and at_most is not None:
        bound = f"between {at_least} and {at_most}"
    else:
        bound = f"at least {at_least}" if at_least is not None else f"above {above}" if above is not None else ""

    def read(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {noun}") from None
        if (
            (at_least is not None and value < at_least)
            or (above is not None and not value > above)
            or (at_most is not None and value > at_most)
        ):
            raise argparse.ArgumentTypeError(f"{value} is not {bound}")
        return value

    read.__name__ = kind.__name__  # argparse names the type by it
    return read


POSITIVE_INT = number(int, at_least=1)
POSITIVE_FLOAT = number(float, above=0)


def add_root(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--root", default=".", help=ROOT_HELP)


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """--root and the run a command acts on, the same for every command (resolved by ``run_directory``): as an
    argument or as ``--run`` (which scripts and the Makefile use), with the same help."""
    parser.add_argument("run", nargs="?", help=RUN_HELP)
    parser.add_argument("--run", dest="run_option", metavar="RUN", help=RUN_HELP)
    add_root(parser)


def run_directory(root: Path, run: str | None) -> Path:
    """The run directory that ``run`` names in the repository ``root``: a directory path (as given), or a run id
    (a bare name) under report.root; without ``run``, ``$SOLOMON_RUN``, else the latest run (``records.LATEST``
    under ``root``). Every command that acts on a run finds it here, so each names runs the same way and fails
    the same way: one line naming the run and how to list the runs."""
    from solomon.params import runs_root

    listing = f"`solomon runs{'' if root == Path('.') else f' --root {root}'}` lists the runs"
    named_by = "" if run else f" (from ${RUN_ENV})"
    run = run or os.environ.get(RUN_ENV) or None
    if not run:
        return _latest_run(root, listing)
    path = Path(run)
    if not (path.is_dir() or len(path.parts) > 1):
        path = root / runs_root(root) / run
    if not path.is_dir():
        raise SolomonError(
            f"no run {run!r}{named_by}: {path} is not a directory; name a run id or directory; {listing}"
        )
    return path


def _latest_run(root: Path, listing: str) -> Path:
    latest = records.read_latest(root)
    if latest is None:
        raise SolomonError(
            f"no run yet: {root / records.LATEST} not found; run the pipeline first (`make run`, or `make try` "
            "for a one-minute tiny run), or name a run"
        )
    path = root / latest["path"]
    if not path.is_dir():
        raise SolomonError(
            f"the latest run {latest['run_id']} ({records.LATEST}) is not here (no {latest['path']}): "
            f"name another run; {listing}"
        )
    return path


def run_of(args: argparse.Namespace) -> Path:
    """The run a command's arguments name (see ``add_run_arguments``): one of the two forms, or neither."""
    if args.run and args.run_option and args.run != args.run_option:
        raise SolomonError(f"two runs named ({args.run!r} and --run {args.run_option!r}): name one")
    return run_directory(Path(args.root), args.run or args.run_option)


def add_dvc_lock(parser: argparse.ArgumentParser) -> None:
    """The one declaration that --root is no pipeline workspace (the serving image), shared by verify and serve."""
    parser.add_argument(
        "--no-dvc-lock",
        dest="dvc_lock",
        action="store_false",
        help="--root holds only the run's files, without dvc.lock (the serving image): hash them where they are and "
        "compare no dvc.lock (default: a missing dvc.lock is a DIFF, exit status 3 of verify)",
    )
