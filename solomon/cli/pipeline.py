"""`solomon try`, `solomon repair-lock`, `solomon push` and `solomon pull`: the pipeline on its tiny config as an
experiment in the workspace, `dvc.lock` after a kill, and a run's files to and from the DVC remote."""

from __future__ import annotations

import argparse
from pathlib import Path

from solomon.cli.arguments import add_root


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
    repair = commands.add_parser(
        "repair-lock",
        help="repair dvc.lock and DVC's rwlock file after a kill during DVC's own write of them (see docs)",
    )
    add_root(repair)
    repair.set_defaults(func=_repair_lock)
    for direction, what in (("push", "send the run's files to"), ("pull", "bring this commit's run files from")):
        transfer = commands.add_parser(
            direction,
            help=f"dvc {direction}: {what} the DVC remote, after asking an S3 remote for its bucket; what goes wrong "
            "(credentials, bucket, endpoint, files the remote lacks) in one line (docs/remote.md)",
        )
        add_root(transfer)
        transfer.add_argument("--remote", help="the DVC remote (default: the repository's default remote)")
        transfer.set_defaults(func=_transfer, direction=direction)


def _try(args: argparse.Namespace) -> None:
    import shlex

    from solomon.tiny import experiment_name, try_arguments, try_in_workspace

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


def _repair_lock(args: argparse.Namespace) -> None:
    from solomon.dvc_lock import repair_lock

    print(repair_lock(Path(args.root)) or "dvc.lock is readable: nothing to repair")


def _transfer(args: argparse.Namespace) -> None:
    from solomon.remote import transfer

    print(f"{args.direction}: {transfer(Path(args.root), args.direction, args.remote)}")
