"""`solomon try`, `solomon smoke`, `solomon chaos` and `solomon repair-lock`: the pipeline on its tiny config, in
the workspace or a scratch copy, killed at random, and `dvc.lock` after a kill."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from solomon.cli.arguments import POSITIVE_INT, add_root

SOURCE_HELP = "repository to copy (default: the current directory)"


def register(commands: argparse._SubParsersAction) -> None:
    trying = commands.add_parser(
        "try",
        help="the tiny config of `make smoke` as a DVC experiment in this workspace (about a minute); prints where "
        "its results are and how to go back",
    )
    add_root(trying)
    trying.add_argument("--name", help="the experiment's name (default: try-<UTC time>)")
    trying.add_argument(
        "--dry-run", action="store_true", help="print the `dvc exp run` command line instead of running it"
    )
    trying.set_defaults(func=_try)
    smoke = commands.add_parser("smoke", help="run the whole pipeline on a tiny config in a scratch copy")
    smoke.add_argument("--source", default=".", help=SOURCE_HELP)
    smoke.add_argument("--keep", action="store_true", help="keep the scratch copy and print its path")
    smoke.add_argument("--keep-run", help="copy the smoke run's report directory here (replacing what is there)")
    smoke.set_defaults(func=_smoke)
    chaotic = commands.add_parser(
        "chaos", help="SIGKILL `dvc repro` 1-3 times at random moments per trial (tiny config); compare the bytes"
    )
    chaotic.add_argument("--trials", type=POSITIVE_INT, default=20, help="how many trials (default: 20)")
    chaotic.add_argument("--seed", type=int, default=0, help="draws the kill moments: the same seed, the same kills")
    chaotic.add_argument("--source", default=".", help=SOURCE_HELP)
    chaotic.set_defaults(func=_chaos)
    repair = commands.add_parser(
        "repair-lock",
        help="repair dvc.lock and DVC's rwlock file after a kill during DVC's own write of them (see docs)",
    )
    add_root(repair)
    repair.set_defaults(func=_repair_lock)


def _try(args: argparse.Namespace) -> None:
    import shlex

    from solomon.tools.smoke import experiment_name, try_arguments, try_in_workspace

    name = args.name or experiment_name()
    if args.dry_run:
        print(shlex.join(["dvc", *try_arguments(name)]))
        return
    done = try_in_workspace(Path(args.root), name)
    run_dir = done["run_dir"]
    restore = f"git checkout HEAD -- {' '.join(done['changed'])} && " if done["changed"] else ""
    print(
        f"try: experiment {done['experiment']} in {done['seconds']} s; its run: {run_dir} (open {run_dir}/index.html)\n"
        f"  see it: dvc exp show --only-changed; solomon verify; solomon generate --prompt 'In the beginning'\n"
        f"  go back: {restore}dvc checkout (the experiment "
        f"stays: dvc exp apply {done['experiment']} brings it back)"
    )


def _smoke(args: argparse.Namespace) -> None:
    from solomon.tools.smoke import smoke

    keep_run = Path(args.keep_run).resolve() if args.keep_run else None
    result = smoke(Path(args.source).resolve(), keep=args.keep, keep_run=keep_run)
    print(json.dumps(result, indent=2))


def _chaos(args: argparse.Namespace) -> None:
    from solomon.tools.chaos import chaos

    result = chaos(Path(args.source).resolve(), args.trials, args.seed, report=lambda line: print(line, flush=True))
    repaired = f"; {result['lock_repaired']} needed dvc.lock repaired first" if result["lock_repaired"] else ""
    print(f"chaos: {result['identical']}/{result['trials']} trials bit-identical (seed {result['seed']}{repaired})")
    if result["identical"] != result["trials"]:
        raise SystemExit(1)


def _repair_lock(args: argparse.Namespace) -> None:
    from solomon.tools.dvc_lock import repair_lock

    print(repair_lock(Path(args.root)) or "dvc.lock is readable: nothing to repair")
