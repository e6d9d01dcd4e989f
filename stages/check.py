"""Stage check: params.yaml and the corpus are valid → data/checked/<stage>.json, the validated params of each
later stage (the same bytes while those values are).

The first stage, so that a bad param or a broken corpus stops `dvc repro` / `dvc exp run` with one line before any
later stage runs. It validates the whole params file (cross-field rules included, so no later stage meets a params
error), each task file of eval.tasks (local data only), and the source's form without reading it all: its files
exist and are readable, the first record of each JSON Lines file has the text field, each Parquet file has the
columns, text files start as UTF-8. A fault further in is met by the prepare stage, which reads the corpus once; the
data stages' outputs persist (dvc.yaml), so a failed stage leaves the previous ones in place. Its command names each
later stage with the params dvc.yaml lists for it (written there by `python -m lab deps --write`, so a changed list
reruns check). Each later stage depends on its own file here instead of on the params code: editing a meaning or a
comment in solomon/params.py reruns this stage alone, while a change in what a stage is given reruns that stage.

It also says, before the data stages run, what the train stage will compute in on this host (``train.precision``
resolved: ``solomon.train.precision``) and about how long its steps will take, from a short measured probe of the
configured step. That line is printed, not written: the validated params stay the same bytes on every host.
"""

import os

from solomon.lifeline import tether

tether(os.environ)  # first, before the imports below: a launcher gone while this stage was starting stops it here

import argparse
from pathlib import Path

from solomon.atomic import write_json
from solomon.data.sources import inspect, locate
from solomon.evaluation.harness import task_configs
from solomon.evaluation.tasks import task_data_files
from solomon.machine import describe
from solomon.params import Params, load_params
from solomon.pipeline import selected, stage_and_params
from solomon.portable import enter_mode
from solomon.records import PARAMS_FILE, TASK_DATA_DIR, checked_params_path
from solomon.stage import run_stage
from solomon.train.precision import resolve, why
from solomon.train.probe import probe_step


def training_estimate(params: Params) -> str:
    """What the train stage will compute in here, and its steps' time from a probe of the configured step."""
    cfg, machine = params.train, describe()
    precision = resolve(cfg.precision, cfg.portable, machine)
    probe = probe_step(params, precision, params.tokenizer.vocab_size)
    minutes = probe.training_seconds(cfg.max_steps) / 60
    reason = why(cfg.precision, cfg.portable, machine)
    return (
        f"check: train.precision {cfg.precision} → {precision} on this host ({reason}; "
        f"{machine['kind']}): a step takes about {probe.seconds_per_step:.3g} s (probe of {len(probe.seconds)}), "
        f"so train.max_steps {cfg.max_steps:,} ≈ {minutes:,.1f} min of training"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "stages",
        nargs="*",
        type=stage_and_params,
        metavar="STAGE:PARAMS",
        help="a later stage and the params it reads as dvc.yaml lists them (train:model,train,lr,eval.batch_size)",
    )
    args = parser.parse_args()
    params = load_params()
    enter_mode(params.train.portable)  # the probe below runs in the train stage's mode (may re-execute this stage)
    inspect(locate(params.corpus), params.corpus)
    task_configs(params.eval.tasks, Path.cwd(), made=task_data_files(TASK_DATA_DIR))  # a task needing the hub stops
    for stage, names in args.stages:
        write_json(checked_params_path(stage), selected(params, names))
    print(f"check: {PARAMS_FILE} and corpus.source are valid; validated params for {len(args.stages)} stages")
    print(training_estimate(params), flush=True)


if __name__ == "__main__":
    run_stage(main)
