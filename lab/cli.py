"""``python -m lab``: the commands for developing and measuring Solomon — bench (docs/performance.md), docs (the
experiment pages), soak, smoke and chaos (the pipeline and server under load and kills), params and deps (the files
written from the code). Each runs from the repository root, most through a ``make`` target."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path

from lab.stops import LAUNCHERS as STOP_LAUNCHERS
from lab.stops import MOMENTS_S as STOP_MOMENTS
from lab.stops import SIGNALS as STOP_SIGNALS
from lab.stops import STAGES as STOP_STAGES
from solomon import lifeline, stage
from solomon.cli.arguments import POSITIVE_FLOAT, POSITIVE_INT, add_root
from solomon.errors import SolomonError, run_main
from solomon.records import PARAMS_FILE

SOURCE_HELP = "repository to copy (default: the current directory)"


def register(commands: argparse._SubParsersAction) -> None:
    smoke = commands.add_parser("smoke", help="run the whole pipeline on a tiny config in a scratch copy")
    smoke.add_argument("--source", default=".", help=SOURCE_HELP)
    smoke.add_argument("--keep", action="store_true", help="keep the scratch copy and print its path")
    smoke.add_argument("--keep-run", help="copy the smoke run's report directory here (replacing what is there)")
    smoke.set_defaults(func=_smoke)
    chaotic = commands.add_parser(
        "chaos", help="SIGKILL `dvc repro` 1-3 times at random moments per trial (tiny config); compare the bytes"
    )
    chaotic.add_argument("--trials", type=POSITIVE_INT, default=20, help="how many trials (default: 20)")
    chaotic.add_argument("--seed", type=int, default=0, help="draws the kill moments: the same seed, the same kills")
    chaotic.add_argument("--source", default=".", help=SOURCE_HELP)
    chaotic.set_defaults(func=_chaos)
    _register_written(commands)
    bench = commands.add_parser("bench", help="tokens/s, GFLOP/s and MFU per variant; a real train stage's overheads")
    bench.add_argument("--params", default=PARAMS_FILE, help=f"the params to benchmark (default: {PARAMS_FILE})")
    bench.add_argument("--steps", type=POSITIVE_INT, default=20, help="timed steps per variant (after 3 warm-up steps)")
    bench.add_argument("--stage-steps", type=int, default=200, help="steps of the timed real train stage (0: skip it)")
    bench.add_argument("--out", default="reports/bench", help="where the JSON record goes")
    bench.add_argument("--skip-compile", action="store_true", help="leave out the torch.compile variants")
    _register_bench_serving(bench)
    bench.set_defaults(func=_bench)
    _register_soak(commands)
    scores = commands.add_parser(
        "scores", help="a run's benchmark scores in-process, from its HF export and through solomon serve (minutes)"
    )
    scores.add_argument("--run", help="the run directory (default: the latest run)")
    scores.add_argument("--out", default="docs/scores/three-ways.json", help="where the JSON record goes")
    scores.set_defaults(func=_scores)
    stops = commands.add_parser(
        "stops", help="a signal to the pipeline's launcher at chosen moments after a stage's process appears"
    )
    stops.add_argument("--label", required=True, help="what the record is of (before, after)")
    stops.add_argument("--out", required=True, help="where the JSON record goes (docs/stops/<label>.json)")
    stops.add_argument("--launchers", default=",".join(STOP_LAUNCHERS), help="comma-separated")
    stops.add_argument("--stages", default=",".join(STOP_STAGES), help="comma-separated")
    stops.add_argument("--signals", default=",".join(STOP_SIGNALS), help="comma-separated")
    stops.add_argument("--moments", default=",".join(map(str, STOP_MOMENTS)), help="seconds, comma-separated")
    stops.add_argument("--no-resume", action="store_true", help="skip the plain `dvc repro` after each case")
    stops.add_argument("--page", default="docs/resume.md", help="the page whose table of this label is rewritten")
    stops.set_defaults(func=_stops)
    portable = commands.add_parser(
        "portable", help="the tiny config's portable run natively and on emulated CPUs, byte for byte (minutes)"
    )
    portable.add_argument("--write-golden", action="store_true", help="write the native digest to tests/golden/")
    portable.set_defaults(func=_portable)
    docs = commands.add_parser("docs", help="the experiments behind docs/*.md").add_subparsers(
        dest="docs_command", required=True
    )
    for name, text in (
        ("run", "run a page's `dvc exp run` commands in a scratch copy, keep their results, redraw the page"),
        ("render", "redraw pages (commands, tables, charts) from their checked-in results; no training"),
    ):
        command = docs.add_parser(name, help=text)
        command.add_argument("page", nargs="*", help="pages of docs/experiments.yaml (default: all)")
        add_root(command)
        command.set_defaults(func=_docs)
    nanogpt = docs.add_parser(
        "nanogpt",
        help="train nanoGPT (a checkout at the pinned commit) on the tokens for the wall time of the page's Solomon "
        "run (`python -m lab docs run nanogpt` first; its bf16 autocast variant too where this host has native bf16 "
        "matmuls), score it with Solomon's evaluator, redraw docs/nanogpt.md "
        "(minutes)",
    )
    nanogpt.add_argument("--checkout", required=True, type=Path, help="a git checkout of karpathy/nanoGPT")
    add_root(nanogpt)
    nanogpt.set_defaults(func=_docs_nanogpt)


def _register_bench_serving(bench: argparse.ArgumentParser) -> None:
    from lab.bench import PARTS, SERVING_CLIENTS, SERVING_REQUESTS
    from solomon.serving.limits import Limits

    bench.add_argument(
        "--only",
        action="append",
        choices=PARTS,
        help="measure only this part (repeatable; default: all), e.g. `--only serving` (minutes)",
    )
    bench.add_argument(
        "--serving-clients",
        type=int,
        nargs="+",
        default=list(SERVING_CLIENTS),
        help="the engine's concurrent streaming clients, one row each (default: "
        f"{' '.join(map(str, SERVING_CLIENTS))}; 0: skip the serving part)",
    )
    bench.add_argument(
        "--serving-requests",
        type=POSITIVE_INT,
        default=SERVING_REQUESTS,
        help=f"completions per client and client count (default: {SERVING_REQUESTS})",
    )
    bench.add_argument(
        "--serving-threads", type=POSITIVE_INT, default=1, help="torch threads of every serving row (default: 1)"
    )
    bench.add_argument(
        "--slots", type=POSITIVE_INT, default=Limits.slots, help=f"the server's --slots (default: {Limits.slots})"
    )


def _register_soak(commands: argparse._SubParsersAction) -> None:
    from lab import soak

    command = commands.add_parser(
        "soak", help="closed-loop clients against a served model for a while: errors, latency, the server's memory"
    )
    command.add_argument(
        "--seconds", type=POSITIVE_FLOAT, default=soak.SECONDS, help=f"how long, in seconds (default: {soak.SECONDS:g})"
    )
    command.add_argument(
        "--clients",
        type=POSITIVE_INT,
        default=soak.CLIENTS,
        help=f"clients, each sending its next request once the last is answered (default: {soak.CLIENTS})",
    )
    command.add_argument(
        "--max-tokens",
        type=POSITIVE_INT,
        default=soak.MAX_TOKENS,
        help=f"max_tokens of each request (default: {soak.MAX_TOKENS})",
    )
    command.add_argument(
        "--max-growth-mib",
        type=POSITIVE_FLOAT,
        default=soak.MAX_GROWTH_MIB,
        help=f"fail when the server's RSS grows more than this from start to end (default: {soak.MAX_GROWTH_MIB:g})",
    )
    command.set_defaults(func=_soak)


def _soak(args: argparse.Namespace) -> None:
    from lab.soak import problems, soak, summary

    result = soak(args.seconds, args.clients, args.max_tokens, report=lambda line: print(line, flush=True))
    print(summary(result))
    found = problems(result, args.max_growth_mib)
    if found:
        raise SolomonError("soak failed: " + "; ".join(found))
    print("soak: passed")


def _bench(args: argparse.Namespace) -> None:
    from datetime import UTC, datetime

    from lab.bench import PARTS
    from lab.bench.report import measure
    from solomon.atomic import write_json
    from solomon.params import load_params

    clients = tuple(args.serving_clients)
    if any(count < 0 for count in clients) or (0 in clients and len(clients) > 1):
        raise SolomonError(
            f"--serving-clients {' '.join(map(str, clients))}: give client counts above 0, or 0 alone to skip serving"
        )
    serving = None if clients == (0,) else {
        "clients": clients, "requests_per_client": args.serving_requests, "threads": args.serving_threads,
        "slots": args.slots,
    }  # fmt: skip
    parts = tuple(part for part in PARTS if part in (args.only or PARTS))
    params = load_params(args.params) if "throughput" in parts or "families" in parts else None
    result = measure(
        params,
        Path("."),
        args.steps,
        not args.skip_compile,
        args.stage_steps,
        serving,
        report=print,
        parts=parts,
        params_file=args.params,
    )
    out = Path(args.out) / f"{datetime.now(UTC):%Y-%m-%dT%H%M%SZ}.json"
    write_json(out, result)
    print(f"written: {out}")


def _docs_nanogpt(args: argparse.Namespace) -> None:
    import tempfile

    from lab.nanogpt import page
    from lab.nanogpt.run import beside, nanogpt_environment, variants_for
    from solomon.machine import describe

    lifeline.hold()  # nanoGPT's training dies with this command
    root = Path(args.root).resolve()
    solomon = page.solomon_result(root / "docs")
    records = {}
    for variant in variants_for(describe()["bf16_matmul"] == "native"):
        with tempfile.TemporaryDirectory(prefix="solomon-nanogpt-") as scratch:
            env = nanogpt_environment(os.environ)
            records[variant] = beside(solomon, args.checkout.resolve(), root, Path(scratch), env, variant)
        found = records[variant]
        print(f"nanogpt ({variant}): {found['wall_s']} s, val {found['metrics']['val']['bits_per_byte']} bits per byte")
    print(f"docs: {page.save_record(root / 'docs', records)}")
    print(f"docs: {page.render(root / 'docs')}")
    if notice := page.stale(records, solomon):
        print(f"docs: warning: {notice}", file=sys.stderr)


def _docs(args: argparse.Namespace) -> None:
    if args.docs_command == "run":
        stage.raise_on_stop_signals()  # so that a stopped page stops its queue (runner) and removes its scratch copy
        lifeline.hold()  # its `dvc exp run`s and their stages die with this command
    try:
        _docs_pages(args)
    except stage.Stopped as stopped:
        name = signal.Signals(stopped.signum).name
        print(f"error: stopped by {name}: the page's results are left as they were", file=sys.stderr)
        sys.exit(128 + stopped.signum)


def _docs_pages(args: argparse.Namespace) -> None:
    import tempfile

    from lab.experiments.render import render_page
    from lab.experiments.results import data_dir, stale_runs
    from lab.experiments.runner import run_page
    from lab.experiments.spec import SPEC, load_spec, read_params
    from lab.nanogpt import page as nanogpt_page

    root = Path(args.root).resolve()
    spec = load_spec(root / SPEC)
    pages = args.page or list(spec["pages"])
    unknown = [page for page in pages if page not in spec["pages"]]
    if unknown:
        raise SolomonError(f"no page {unknown[0]!r} in {SPEC}: choose from {', '.join(spec['pages'])}")
    params = read_params(root)
    docs = root / SPEC.parent
    for page in pages:
        if args.docs_command == "run":
            with tempfile.TemporaryDirectory(prefix=f"solomon-docs-{page}-") as scratch:
                measured = run_page(spec, page, root, Path(scratch) / "repo", data_dir(docs, page))
            for run, figures in measured.items():
                rss = f", peak RSS {figures['peak_rss_mib']} MiB" if "peak_rss_mib" in figures else ""
                print(f"{page}/{run}: {figures['wall_s']} s{rss}")
        print(f"docs: {render_page(spec, page, docs, params)}")
        if page == nanogpt_page.SOLOMON_RUN[0] and (drawn := nanogpt_page.render(docs)):
            print(f"docs: {drawn}")  # the page drawn beside this one's run; it says so itself when it is stale
        for line in stale_runs(spec, page, docs, params):
            print(f"docs: warning: {line}: rerun `python -m lab docs run {page}`", file=sys.stderr)


def _smoke(args: argparse.Namespace) -> None:
    from lab.smoke import smoke

    keep_run = Path(args.keep_run).resolve() if args.keep_run else None
    result = smoke(Path(args.source).resolve(), keep=args.keep, keep_run=keep_run)
    print(json.dumps(result, indent=2))


def _chaos(args: argparse.Namespace) -> None:
    from lab.chaos import chaos

    result = chaos(Path(args.source).resolve(), args.trials, args.seed, report=lambda line: print(line, flush=True))
    repaired = f"; {result['lock_repaired']} needed dvc.lock repaired first" if result["lock_repaired"] else ""
    print(f"chaos: {result['identical']}/{result['trials']} trials bit-identical (seed {result['seed']}{repaired})")
    if result["identical"] != result["trials"]:
        raise SystemExit(1)


def _register_written(commands: argparse._SubParsersAction) -> None:
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
    from lab import params_files

    root = Path(args.root)
    if args.write:
        changed = params_files.write(root)
        print(f"params: wrote {', '.join(changed)}" if changed else "params: params.yaml and docs/params.md are fresh")
        return
    _report("params", params_files.stale(root))


def _deps(args: argparse.Namespace) -> None:
    from lab import stage_deps
    from solomon.records import DVC_YAML

    root = Path(args.root)
    if args.write:
        print(f"deps: {'wrote' if stage_deps.write(root) else 'fresh:'} {DVC_YAML}")
        return
    _report("deps", [] if stage_deps.is_fresh(root) else [DVC_YAML])


def _report(command: str, stale: list[str]) -> None:
    if stale:
        raise SystemExit(f"{command}: stale {', '.join(stale)}: run `python -m lab {command} --write`")
    print(f"{command}: fresh")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m lab", description=__doc__)
    register(parser.add_subparsers(dest="command", required=True))
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    run_main(lambda: args.func(args))


def _scores(args: argparse.Namespace) -> None:
    from lab.scores import three_ways
    from solomon.atomic import write_json
    from solomon.records import read_latest

    root = Path(".")
    run_dir = Path(args.run) if args.run else root / read_latest(root)["path"]
    record = three_ways(root, run_dir)
    write_json(Path(args.out), record)
    print(json.dumps(record["wall_s"]))


def _portable(args: argparse.Namespace) -> None:
    from lab.portable import main

    main(["--write-golden"] if args.write_golden else [])


def _stops(args: argparse.Namespace) -> None:
    import subprocess
    import tempfile

    from lab.stops import record, render_into, sweep

    with tempfile.TemporaryDirectory(prefix="solomon-stops-", ignore_cleanup_errors=True) as root:
        outcomes = sweep(
            Path(root),
            launchers=args.launchers.split(","),
            stages=args.stages.split(","),
            signals=args.signals.split(","),
            moments=[float(m) for m in args.moments.split(",")],
            resume=not args.no_resume,
        )
    code = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    written = record(outcomes, args.label, code)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(written, indent=1) + "\n")
    print(render_into(Path(args.page), written, Path(args.out)))
