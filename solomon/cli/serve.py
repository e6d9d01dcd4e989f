"""`solomon generate` and `solomon serve`: a verified run's model at work (`solomon lineage` proves what answers:
cli/lineage.py)."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import fields
from pathlib import Path

from solomon import lifeline
from solomon.cli.arguments import (
    POSITIVE_INT,
    add_dvc_lock,
    add_run_arguments,
    number,
    run_of,
)
from solomon.errors import SolomonError
from solomon.serving.limits import (
    DECODES,
    DEFAULT_DECODE,
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
    add_decode(sample)
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


def add_decode(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--decode",
        choices=DECODES,
        default=DEFAULT_DECODE,
        help="how a decode step runs: eager PyTorch, or compiled once per batch size as the engine starts (a C++ "
        "compiler needed; faster per token; its own text for a seed: docs/serving.md) (default: "
        f"{DEFAULT_DECODE})",
    )


def _require_decode(decode: str) -> None:
    """Refuse at once, before any run is found, verified or loaded, a route this machine cannot run."""
    if decode == "compiled":
        from solomon.serving.compiled_decode import require_compiler

        require_compiler()


def _generate(args: argparse.Namespace) -> None:
    from solomon.serving.generate import draw_seed, generate_text

    try:
        args.prompt.encode("utf-8")
    except UnicodeEncodeError as exc:  # bytes of the command line that are not UTF-8 arrive as surrogates
        raise SolomonError(f"--prompt is not UTF-8 text (byte {exc.start} of it): give the prompt as UTF-8") from None
    seed = draw_seed() if args.seed is None else args.seed
    _require_decode(args.decode)
    text = generate_text(
        run_of(args), args.prompt, Path(args.root), args.max_new_tokens, args.temperature, args.top_k, seed,
        slots=args.slots, precision=args.precision, decode=args.decode,
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
    add_decode(server)
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
    _require_decode(args.decode)
    run_dir = None if args.model else run_of(args)
    source = ModelSource(
        Path(args.root), run_dir, args.model, args.expect_digest, args.threads, args.precision, args.dvc_lock
    )
    limits = Limits(**{limit.name: getattr(args, limit.name) for limit in fields(Limits)})
    lifeline.hold()  # under `timeout` or another supervisor that stops only its child: drain and stop with it
    hooks = Hooks.from_environment(os.environ)
    serve(source.load, args.host, args.port, limits, args.image_digest, hooks, args.decode)
