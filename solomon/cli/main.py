"""The top of the ``solomon`` command: its parser, built from one module per command group, and ``main``.

Each command module has ``register(commands)``, which adds its commands, each with its options beside its handler
(``func``); the order of ``GROUPS`` is the order `solomon --help` lists them in.
"""

from __future__ import annotations

import argparse

from solomon import __version__
from solomon.cli import audit, export, lineage, pipeline, review, runs, serve, track
from solomon.errors import run_main

GROUPS = (runs, pipeline, audit, export, serve, lineage, review, track)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="solomon", description="Reproducible small-LM training on CPU.")
    parser.add_argument("--version", action="version", version=f"solomon {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    for group in GROUPS:
        group.register(commands)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    run_main(lambda: args.func(args))


if __name__ == "__main__":
    main()
