"""Stage prepare: read corpus.source as a stream, normalise, deduplicate, split → data/corpus/."""

import os

from solomon.lifeline import tether

tether(os.environ)  # first, before the imports below: a launcher gone while this stage was starting stops it here

import argparse
from pathlib import Path

from solomon.data.corpus import prepare
from solomon.data.hooks import crash_point
from solomon.data.progress import wanted
from solomon.params import load_params
from solomon.stage import run_stage


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument(
        "--workers", type=int, default=None, help="worker processes (default: every core, fewer for a small corpus)"
    )
    args = parser.parse_args()
    if args.workers is not None and args.workers < 1:
        parser.error(f"--workers {args.workers}: give 1 or more (or leave it out for every core)")
    summary = prepare(
        load_params().corpus,
        args.out_dir,
        workers=args.workers,
        crash_point=crash_point(os.environ, "prepare"),
        show_progress=wanted(os.environ),
    )
    print(f"prepare: {summary['documents']} documents → {args.out_dir}")


if __name__ == "__main__":
    run_stage(main)
