"""The ``solomon`` command."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from solomon import __version__
from solomon.errors import run_main


def _smoke(args: argparse.Namespace) -> None:
    from solomon.smoke import smoke

    result = smoke(Path(args.source).resolve(), keep=args.keep)
    print(json.dumps(result, indent=2))


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not at least 1")
    return value


def _bench(args: argparse.Namespace) -> None:
    from solomon.bench import training_throughput
    from solomon.params import load_params

    print(json.dumps(training_throughput(load_params(args.params), steps=args.steps), indent=2))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="solomon", description="Reproducible small-LM training on CPU.")
    parser.add_argument("--version", action="version", version=f"solomon {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    smoke = commands.add_parser("smoke", help="run the whole pipeline on a tiny config in a scratch copy")
    smoke.add_argument("--source", default=".", help="repository to copy (default: the current directory)")
    smoke.add_argument("--keep", action="store_true", help="keep the scratch copy and print its path")
    smoke.set_defaults(func=_smoke)
    bench = commands.add_parser("bench", help="training tokens/s: eager fp32 vs bf16 vs torch.compile")
    bench.add_argument("--params", default="params.yaml")
    bench.add_argument(
        "--steps", type=_positive_int, default=20, help="timed steps per variant (after 3 warm-up steps)"
    )
    bench.set_defaults(func=_bench)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    run_main(lambda: args.func(args))


if __name__ == "__main__":
    main()
