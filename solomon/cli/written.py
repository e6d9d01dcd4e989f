"""`solomon params` and `solomon deps`: the files written from the code, never by hand — params.yaml's comments
and docs/params.md from the params models, dvc.yaml's code deps from each stage's import closure."""

from __future__ import annotations

import argparse
from pathlib import Path

from solomon.cli.arguments import add_root


def register(commands: argparse._SubParsersAction) -> None:
    for name, text in (
        ("params", "params.yaml's comments and docs/params.md, rendered from solomon/params.py (values kept)"),
        ("deps", "dvc.yaml's code deps, written from each stage script's import closure"),
    ):
        command = commands.add_parser(name, help=text, description=text)
        add_root(command)
        mode = command.add_mutually_exclusive_group()
        mode.add_argument("--write", action="store_true", help="rewrite what is stale")
        mode.add_argument("--check", action="store_true", help="exit 1 naming what is stale (the default)")
        command.set_defaults(func=_params if name == "params" else _deps)


def _params(args: argparse.Namespace) -> None:
    from solomon.tools import params_files

    root = Path(args.root)
    if args.write:
        changed = params_files.write(root)
        print(f"params: wrote {', '.join(changed)}" if changed else "params: params.yaml and docs/params.md are fresh")
        return
    _report("params", params_files.stale(root))


def _deps(args: argparse.Namespace) -> None:
    from solomon.records import DVC_YAML
    from solomon.tools import stage_deps

    root = Path(args.root)
    if args.write:
        print(f"deps: {'wrote' if stage_deps.write(root) else 'fresh:'} {DVC_YAML}")
        return
    _report("deps", [] if stage_deps.is_fresh(root) else [DVC_YAML])


def _report(command: str, stale: list[str]) -> None:
    if stale:
        raise SystemExit(f"{command}: stale {', '.join(stale)}: run `solomon {command} --write`")
    print(f"{command}: fresh")
