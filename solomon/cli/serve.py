"""`solomon generate`, `solomon serve` and `solomon lineage`: a verified run's model at work, and back to its run."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import fields
from pathlib import Path

from solomon.cli.arguments import (
    POSITIVE_INT,
    add_dvc_lock,
    add_run_arguments,
    number,
    run_of,
)
from solomon.errors import SolomonError
from solomon.records import PARAMS_FILE, RunFiles
from solomon.serving.limits import (
    DEFAULT_PRECISION,
    EXPECT_DIGEST_ENV,
    IMAGE_DIGEST_ENV,
    MAX_SEED,
    MIN_TEMPERATURE,
    PRECISIONS,
    Limits,
)

SEED_LINE = "seed: "  # `solomon generate` writes "seed: <n>" to stderr: --seed <n> gives the same text again


def register(commands: argparse._SubParsersAction) -> None:
    _register_generate(commands)
    _register_serve(commands)
    lineage = commands.add_parser(
        "lineage",
        help="walk from a live server (or an export) to its registry version, manifest, run, weights and corpus",
    )
    start = lineage.add_mutually_exclusive_group(required=True)
    start.add_argument("--url", help="the server, e.g. http://127.0.0.1:8000")
    start.add_argument(
        "--export",
        metavar="DIR",
        help="an export (solomon export, any format) instead: the chain starts with `solomon verify --export DIR`",
    )
    lineage.add_argument(
        "--model",
        help="with --url, the alias the server must serve: models:/<name>@<alias> (default: promote.* in params.yaml)",
    )
    answers = lineage.add_mutually_exclusive_group()
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
    lineage.add_argument(
        "--precision",
        choices=("fp32", "bf16"),
        help="what the server computes in, which sets the answers' tolerance (default: its /v1/provenance, else fp32)",
    )
    lineage.add_argument(
        "--tolerance",
        type=number(float, above=0),
        help="the largest |Δ logprob| the answers may show, instead of --precision's (for a server of another "
        "implementation: measure it, as `make gguf-check` does for llama.cpp)",
    )
    add_run_arguments(lineage)  # with --answers-only: the run the server is challenged against
    lineage.set_defaults(func=_lineage)


def _register_generate(commands: argparse._SubParsersAction) -> None:
    sample = commands.add_parser("generate", help="sample text from a run's model, after verifying its files")
    add_run_arguments(sample)
    sample.add_argument("--prompt", required=True, help="the text to continue")
    sample.add_argument(
        "--max-new-tokens", type=POSITIVE_INT, help="how many tokens at most (default: the run's train.samples)"
    )
    sample.add_argument(
        "--temperature",
        type=number(float, at_least=MIN_TEMPERATURE),
        help=f"at least {MIN_TEMPERATURE:g}; lower is more predictable (default: the run's train.samples)",
    )
    sample.add_argument(
        "--top-k", type=POSITIVE_INT, help="sample among the k likeliest tokens (default: the run's train.samples)"
    )
    sample.add_argument(
        "--seed",
        type=number(int, at_least=0, at_most=MAX_SEED),
        help=f"same seed, same text (default: a fresh one; every run writes '{SEED_LINE}<n>' to stderr)",
    )
    sample.add_argument(
        "--slots",
        type=POSITIVE_INT,
        default=Limits.slots,
        help=f"the decode batch's rows, as `solomon serve --slots`: the same gives the server's text (default: "
        f"{Limits.slots})",
    )
    add_precision(sample)
    sample.set_defaults(func=_generate)


def add_precision(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--precision",
        choices=PRECISIONS,
        default=DEFAULT_PRECISION,
        help="what the model computes in: fp32, as the evaluate stage scored it, or bf16 weights in every linear "
        "layer (faster on a CPU with bf16 kernels, AVX-512 or AMX, many times slower without; other text for the "
        f"same seed: docs/serving.md) (default: {DEFAULT_PRECISION})",
    )


def _generate(args: argparse.Namespace) -> None:
    from solomon.serving.generate import draw_seed, generate_text

    try:
        args.prompt.encode("utf-8")
    except UnicodeEncodeError as exc:  # bytes of the command line that are not UTF-8 arrive as surrogates
        raise SolomonError(f"--prompt is not UTF-8 text (byte {exc.start} of it): give the prompt as UTF-8") from None
    seed = draw_seed() if args.seed is None else args.seed
    text = generate_text(
        run_of(args), args.prompt, Path(args.root), args.max_new_tokens, args.temperature, args.top_k, seed,
        slots=args.slots, precision=args.precision,
    )  # fmt: skip
    print(f"{SEED_LINE}{seed}", file=sys.stderr)  # stdout stays the text alone
    print(text)


def _register_serve(commands: argparse._SubParsersAction) -> None:
    server = commands.add_parser(
        "serve", help="serve a verified run over HTTP: OpenAI-style /v1/completions, /v1/provenance, /readyz"
    )
    add_run_arguments(server)
    server.add_argument("--model", help="a registry alias instead of a run: models:/<name>@<alias>")
    server.add_argument(
        "--expect-digest",
        default=os.environ.get(EXPECT_DIGEST_ENV) or None,
        help=f"the manifest SHA256 the run must have (default: ${EXPECT_DIGEST_ENV}; with --model, its tag)",
    )
    server.add_argument("--host", default="127.0.0.1", help="the address to listen on (default: 127.0.0.1)")
    server.add_argument(
        "--port", type=number(int, at_least=1, at_most=65535), default=8000, help="the port (default: 8000)"
    )
    server.add_argument("--threads", type=POSITIVE_INT, default=1, help="torch threads (default: 1)")
    add_precision(server)
    add_dvc_lock(server)
    server.add_argument(
        "--image-digest",
        default=os.environ.get(IMAGE_DIGEST_ENV) or None,
        help=f"the serving image's digest, reported by /v1/provenance (default: ${IMAGE_DIGEST_ENV})",
    )
    add_limit_options(server)
    server.set_defaults(func=_serve)


def add_limit_options(parser: argparse.ArgumentParser) -> None:
    """One option per field of ``Limits``, named, explained and bounded there: the defaults live only in Limits."""
    for limit in fields(Limits):
        option = limit.metadata["option"] or f"--{limit.name.replace('_', '-')}"
        parser.add_argument(
            option,
            dest=limit.name,
            metavar=option.removeprefix("--").replace("-", "_").upper(),
            type=number(type(limit.default), **limit.metadata["bounds"]),
            default=limit.default,
            help=f"{limit.metadata['help']} (default: {limit.default:g})",
        )


def _serve(args: argparse.Namespace) -> None:
    from solomon.serving.hooks import Hooks
    from solomon.serving.server import ModelSource, serve

    if args.model and (args.run or args.run_option):
        raise SolomonError("give a run or --model, not both")
    run_dir = None if args.model else run_of(args)
    source = ModelSource(
        Path(args.root), run_dir, args.model, args.expect_digest, args.threads, args.precision, args.dvc_lock
    )
    limits = Limits(**{limit.name: getattr(args, limit.name) for limit in fields(Limits)})
    serve(source.load, args.host, args.port, limits, args.image_digest, Hooks.from_environment(os.environ))


def _lineage(args: argparse.Namespace) -> None:
    from solomon.serving.lineage import Broken

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
    from solomon.export.lineage import export_lineage

    return export_lineage(export_dir, root)


def _reference(args: argparse.Namespace, root: Path) -> str:
    from solomon.params import PromoteParams, load_params

    params_path = root / PARAMS_FILE
    policy = load_params(params_path).promote if params_path.is_file() else PromoteParams()
    return args.model or f"models:/{policy.model_name}@{policy.alias}"


def _server_chain(args: argparse.Namespace, root: Path) -> list[tuple[str, str]]:
    from solomon.serving.lineage import lineage

    return lineage(args.url, _reference(args, root), root, args.precision, args.tolerance)


def _answers_chain(args: argparse.Namespace, root: Path) -> list[tuple[str, str]]:
    from solomon.serving.lineage import Broken, answers_link

    if args.run or args.run_option:
        run_dir = run_of(args)
    else:
        from solomon.tracking.registry import resolve  # imports mlflow

        try:
            run_dir = resolve(_reference(args, root), root).run_dir
        except Exception as exc:
            raise Broken("registry", f"{exc} (or name the run: --run)") from None
    return [("run", str(run_dir)), answers_link(args.url, run_dir, root, None, args.precision, args.tolerance)]


def _identify(args: argparse.Namespace, root: Path) -> None:
    from solomon.params import runs_root
    from solomon.serving.lineage import identify

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
