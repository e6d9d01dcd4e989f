"""`solomon lineage`: from a live server (or an export) back to its registry version, manifest, run, weights and
corpus, and the answers it gives checked against a run's verified weights; `solomon score`: whether a live server
earns a run's recorded benchmark scores (solomon/lineage/)."""

from __future__ import annotations

import argparse
from pathlib import Path

from solomon.cli.arguments import add_run_arguments, number, run_of
from solomon.errors import SolomonError
from solomon.records import PARAMS_FILE, RunFiles


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "lineage",
        help="walk from a live server (or an export) to its registry version, manifest, run, weights and corpus",
    )
    start = parser.add_mutually_exclusive_group(required=True)
    start.add_argument("--url", help="the server, e.g. http://127.0.0.1:8000")
    start.add_argument(
        "--export",
        metavar="DIR",
        help="an export (solomon export, any format) instead: the chain starts with `solomon verify --export DIR`",
    )
    parser.add_argument(
        "--model",
        help="with --url, the alias the server must serve: models:/<name>@<alias> (default: promote.* in params.yaml)",
    )
    answers = parser.add_mutually_exclusive_group()
    answers.add_argument(
        "--answers-only",
        action="store_true",
        help="with --url: only challenge the server's answers against a run's verified weights (--run, default: the "
        "alias's run), trusting nothing it says; a URL ending in /invocations is MLflow's (text only)",
    )
    answers.add_argument(
        "--identify",
        action="store_true",
        help="with --url: challenge the server against every run here and name the one whose weights answer",
    )
    add_tolerance_options(parser, "the largest |Δ logprob| the answers may show")
    add_run_arguments(parser)  # with --answers-only: the run the server is challenged against
    parser.set_defaults(func=_lineage)
    _register_score(commands)


def _register_score(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "score",
        help="verify a run, then replay its recorded benchmark requests against a live server: does it earn them?",
        description="Verify the run, then send the sample of each scored task's requests it recorded "
        "(task_requests.jsonl: token ids and the log-likelihood the run's weights earned) to the server's "
        "/v1/completions as lm-eval's local-completions does, and compare each log-likelihood with the record. "
        "Exit 0 when the server earns them, 1 when it does not.",
    )
    parser.add_argument("--url", required=True, help="the server's base, e.g. http://127.0.0.1:8000")
    parser.add_argument("--task", action="append", help="replay only this task's requests (repeatable)")
    add_tolerance_options(parser, "the largest mean |Δ log-likelihood| per token")
    add_run_arguments(parser)
    parser.set_defaults(func=_score)


def add_tolerance_options(parser: argparse.ArgumentParser, bound: str) -> None:
    """--precision (the server's, which sets the tolerance) and --tolerance (``bound``, given instead)."""
    parser.add_argument(
        "--precision",
        choices=("fp32", "bf16"),
        help="what the server computes in, which sets the tolerance (default: its /v1/provenance, else fp32)",
    )
    parser.add_argument(
        "--tolerance",
        type=number(float, above=0),
        help=f"{bound}, instead of --precision's (for a server of another implementation: measure it, as "
        "`make gguf-check` does for llama.cpp)",
    )


def _score(args: argparse.Namespace) -> None:
    from solomon.audit.verify import require_verified
    from solomon.lineage.client import Broken, Completions, claimed_precision
    from solomon.lineage.scores import read_requests, replay

    root, run_dir = Path(args.root), run_of(args)
    require_verified(run_dir, root, f"{run_dir} does not verify, so its recorded scores prove nothing")
    requests = read_requests(run_dir, args.task)
    base = args.url.rstrip("/")
    precision = args.precision or claimed_precision(base)
    try:
        verdict = replay(requests, Completions(f"{base}/v1/completions"), precision, args.tolerance)
    except Broken as broken:
        print(f"score broken at {broken}")
        raise SystemExit(1) from None
    except (TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:  # what a server sent, mis-shaped
        print(f"score: {base}/v1/completions answered choices of another shape ({exc})")
        raise SystemExit(1) from None
    print(f"score: {base} {verdict.line()}; run {run_dir.name}")
    if not verdict.holds:
        raise SystemExit(1)


def _lineage(args: argparse.Namespace) -> None:
    from solomon.lineage.client import Broken

    root = Path(args.root)
    if args.export and args.model:
        raise SolomonError("--model names the alias a server must serve: give it with --url, not --export")
    if args.export and (args.answers_only or args.identify):
        raise SolomonError("--answers-only and --identify challenge a live server: give them with --url")
    named = args.run or args.run_option
    if named and not args.answers_only:
        raise SolomonError("a run is named only with --answers-only (the run it challenges the server against)")
    if args.identify:
        _identify(args, root)
        return
    try:
        if args.export:
            chain = _export_chain(Path(args.export), root)
        elif args.answers_only:
            chain = _answers_chain(args, root)
        else:
            chain = _server_chain(args, root)
    except Broken as broken:
        print(f"lineage broken at {broken}")
        raise SystemExit(1) from None
    for link, holds in chain:
        print(f"{link:<13}{holds}")
    print("lineage holds: every link verified")


def _export_chain(export_dir: Path, root: Path) -> list[tuple[str, str]]:
    from solomon.lineage.chain import export_chain

    return export_chain(export_dir, root)


def _reference(args: argparse.Namespace, root: Path) -> str:
    from solomon.params import PromoteParams, load_params

    params_path = root / PARAMS_FILE
    policy = load_params(params_path).promote if params_path.is_file() else PromoteParams()
    return args.model or f"models:/{policy.model_name}@{policy.alias}"


def _server_chain(args: argparse.Namespace, root: Path) -> list[tuple[str, str]]:
    from solomon.lineage.chain import server_chain

    return server_chain(args.url, _reference(args, root), root, args.precision, args.tolerance)


def _answers_chain(args: argparse.Namespace, root: Path) -> list[tuple[str, str]]:
    from solomon.lineage.challenge import answers_link, load_run
    from solomon.lineage.client import Broken

    if args.run or args.run_option:
        run_dir = run_of(args)
    else:
        from solomon.tracking.registry import resolve  # imports mlflow

        try:
            run_dir = resolve(_reference(args, root), root).run_dir
        except Exception as exc:
            raise Broken("registry", f"{exc} (or name the run: --run)") from None
    return [("run", str(run_dir)), answers_link(args.url, load_run(run_dir, root), args.precision, args.tolerance)]


def _identify(args: argparse.Namespace, root: Path) -> None:
    from solomon.lineage.challenge import identify
    from solomon.params import runs_root

    base = root / runs_root(root)
    candidates = sorted(path for path in base.glob("*") if (path / RunFiles.MANIFEST).is_file())
    if not candidates:
        raise SolomonError(f"no runs in {base} to try: run the pipeline first, or give --root")
    table = identify(args.url, candidates, root, args.precision, args.tolerance)
    for run, verdict in table:
        print(f"{run:<28}{verdict}")
    holding = [run for run, verdict in table if verdict.startswith("holds")]
    if len(holding) != 1:
        print(f"identify: {'none' if not holding else 'several: ' + ', '.join(holding)} of {len(table)} runs answers")
        raise SystemExit(1)
    print(f"identify: {holding[0]} answers")
