"""Stage check: params.yaml and the corpus are valid → data/checked.json (the same bytes whenever they are).

The first stage, so that a bad param or a broken corpus stops `dvc repro` / `dvc exp run` with one line before
DVC deletes any other stage's outputs (it deletes a stage's outputs just before running that stage). It validates
the whole params file and reads the corpus as the prepare stage will; its output does not change when the inputs
are valid, so a passing check never reruns anything after it.
"""

import argparse
from pathlib import Path

from solomon.atomic import write_json
from solomon.data.corpus import prepare
from solomon.errors import run_main
from solomon.params import load_params
from solomon.records import PARAMS_FILE


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=Path, help="the marker written when everything is valid")
    args = parser.parse_args()
    params = load_params()
    prepare(params.corpus)  # every corpus error the prepare stage would meet, met here first
    write_json(args.out, {"valid": [PARAMS_FILE, "corpus.source"]})
    print(f"check: {PARAMS_FILE} and corpus.source are valid")


if __name__ == "__main__":
    run_main(main)
