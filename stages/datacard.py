"""Stage datacard: statistics and the datasheet → data/datacard.md, data/datacard.json."""

import os

from solomon.lifeline import tether

tether(os.environ)  # first, before the imports below: a launcher gone while this stage was starting stops it here

import argparse
from pathlib import Path

from solomon.data.datacard import build
from solomon.params import load_params
from solomon.stage import run_stage


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    for name in ("corpus_dir", "tokens_dir", "tokenizer_path", "markdown_path", "json_path"):
        parser.add_argument(name, type=Path)
    args = parser.parse_args()
    build(
        load_params().corpus, args.corpus_dir, args.tokens_dir, args.tokenizer_path, args.markdown_path, args.json_path
    )
    print(f"datacard: {args.markdown_path}")


if __name__ == "__main__":
    run_stage(main)
