"""Stage tokenizer: train byte-level BPE on a sample of the train split, encode every split → data/tokenizer.json,
data/tokens/."""

import os

from solomon.lifeline import tether

tether(os.environ)  # first, before the imports below: a launcher gone while this stage was starting stops it here

import argparse
from pathlib import Path

from solomon.data.hooks import crash_point
from solomon.data.progress import wanted
from solomon.data.tokenizer import build
from solomon.params import load_params
from solomon.stage import run_stage


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("corpus_dir", type=Path)
    parser.add_argument("tokenizer_path", type=Path)
    parser.add_argument("tokens_dir", type=Path)
    parser.add_argument(
        "--workers", type=int, default=None, help="worker processes (default: every core, fewer for a small corpus)"
    )
    args = parser.parse_args()
    if args.workers is not None and args.workers < 1:
        parser.error(f"--workers {args.workers}: give 1 or more (or leave it out for every core)")
    meta = build(
        args.corpus_dir,
        load_params().tokenizer,
        args.tokenizer_path,
        args.tokens_dir,
        args.workers,
        crash_point=crash_point(os.environ, "tokenizer"),
        show_progress=wanted(os.environ),
    )
    print(
        f"tokenizer: vocab {meta['vocab_size']}, trained on {meta['sample']['documents']} documents, tokens "
        + ", ".join(f"{split} {info['tokens']}" for split, info in meta["splits"].items())
    )


if __name__ == "__main__":
    run_stage(main)
