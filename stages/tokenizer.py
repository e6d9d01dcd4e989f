"""Stage tokenizer: train byte-level BPE on the train split, encode every split → data/tokenizer.json, data/tokens/."""

import argparse
from pathlib import Path

from solomon.data.tokenizer import build
from solomon.errors import run_main
from solomon.params import load_params


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("corpus_dir", type=Path)
    parser.add_argument("tokenizer_path", type=Path)
    parser.add_argument("tokens_dir", type=Path)
    args = parser.parse_args()
    meta = build(args.corpus_dir, load_params().tokenizer, args.tokenizer_path, args.tokens_dir)
    print(
        f"tokenizer: vocab {meta['vocab_size']}, tokens "
        + ", ".join(f"{split} {info['tokens']}" for split, info in meta["splits"].items())
    )


if __name__ == "__main__":
    run_main(main)
