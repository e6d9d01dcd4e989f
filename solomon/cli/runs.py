"""`solomon runs`, `solomon report` and `solomon replay`: the runs there are, a run's pages, a stretch re-executed."""

from __future__ import annotations

import argparse
from pathlib import Path

from solomon import records
from solomon.cli.arguments import POSITIVE_FLOAT, POSITIVE_INT, add_root, add_run_arguments, run_of
from solomon.errors import SolomonError

REPLAY_DESCRIPTION = (
    "Verify the run, load its replay anchor (a kept checkpoint) at --from-step, re-execute --steps steps with the "
    "run's hyperparameters and tokens, and compare each step's loss and grad_norm with the run's step log and the "
    "model+optimizer state (and the weight average, where the run keeps one) at the end with the anchor there "
    "(docs/training.md)."
)
REPLAY_EXIT = (
    "exit status: 0 bit-identical; 3 diverged within the tolerance (another machine kind or thread count); 1 "
    "diverged beyond it, or at all for a portable run (train.portable); 2 bad input"
    " (no run, anchor or such stretch; a run that does not verify)"
)


def register(commands: argparse._SubParsersAction) -> None:
    runs = commands.add_parser("runs", help="list the runs (id, directory; the latest marked) that commands can name")
    add_root(runs)
    runs.set_defaults(func=_runs)
    rebuild = commands.add_parser(
        "report", help="rebuild README.md and index.html of a run from its own files; no training"
    )
    add_run_arguments(rebuild)
    rebuild.set_defaults(func=_report)
    replaying = commands.add_parser(
        "replay",
        help="re-execute a stretch of a run from a kept checkpoint; compare with its record (exit 0, 3 or 1)",
        description=REPLAY_DESCRIPTION,
        epilog=REPLAY_EXIT,
    )
    add_run_arguments(replaying)
    replaying.add_argument("--from-step", type=POSITIVE_INT, help="the anchor to start from (default: the first)")
    replaying.add_argument(
        "--steps", type=POSITIVE_INT, help="how many steps (default: to the next anchor, or the end of the log)"
    )
    replaying.add_argument("--threads", type=POSITIVE_INT, help="torch threads (default: the run's train.threads)")
    replaying.add_argument(
        "--tolerance", type=POSITIVE_FLOAT, help="the relative difference still 'within' (default: 1e-3, see docs)"
    )
    replaying.set_defaults(func=_replay)


def _runs(args: argparse.Namespace) -> None:
    from solomon.params import runs_root

    root = Path(args.root)
    base = root / runs_root(root)
    found = sorted(path for path in base.glob("*") if (path / records.RunFiles.RUN_INFO).is_file())
    if not found:
        raise SolomonError(f"no runs in {base}: run the pipeline first (`make run`, or `make try`: a minute)")
    latest = (records.read_latest(root) or {}).get("run_id")
    for path in found:
        print(f"{path.name}\t{path}" + ("\t(latest)" if path.name == latest else ""))


def _report(args: argparse.Namespace) -> None:
    from solomon.report.run import render_pages

    run_dir = run_of(args)
    if not (run_dir / records.RunFiles.MANIFEST).is_file():
        raise SolomonError(f"{run_dir} has no {records.RunFiles.MANIFEST}: name a run made by the report stage")
    render_pages(run_dir)
    pages = " and ".join(str(run_dir / page) for page in records.RunFiles.PAGES)
    print(f"report: {pages} rebuilt from the run's own files")


def _replay(args: argparse.Namespace) -> None:
    from solomon.replay import replay, replay_mode

    run_dir = run_of(args)
    replay_mode(run_dir)  # a portable run replays pinned: this process may be replaced by one that is
    result = replay(run_dir, Path(args.root), args.from_step, args.steps, args.threads, args.tolerance)
    print("\n".join(result.lines()))
    if result.status:
        raise SystemExit(result.status)
