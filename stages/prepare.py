"""Stage prepare: read corpus.source, normalise, split → data/corpus/."""

import argparse
from pathlib import Path

from solomon.data.corpus import prepare, write_prepared
from solomon.errors import run_main
from solomon.params import load_params


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out_dir", type=Path)
    args = parser.parse_args()
    params = load_params().corpus
    corpus = prepare(params)
    write_prepared(corpus, params, args.out_dir)
    print(f"prepare: {corpus.summary(params)['documents']} documents → {args.out_dir}")


if __name__ == "__main__":
    run_main(main)
