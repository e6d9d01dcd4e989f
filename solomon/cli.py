"""The ``solomon`` command."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from solomon import __version__, records
from solomon.errors import SolomonError, run_main
from solomon.records import PARAMS_FILE

ROOT_HELP = f"the repository root: workspace, DVC cache, {PARAMS_FILE}, {records.LATEST} (default: here)"
RUN_ENV = "SOLOMON_RUN"  # the serving image names its run here
RUN_HELP = (
    f"the run: its id, or its directory's path (<report.root>/<run-id>); default: ${RUN_ENV} if set, else the "
    f"latest run ({records.LATEST}). `solomon runs` lists them"
)
SEED_LINE = "seed: "  # `solomon generate` writes "seed: <n>" to stderr: --seed <n> gives the same text again
PID_FILE = "mlflow-server.pid"  # of `solomon track server`, read by `solomon track stop`


def _smoke(args: argparse.Namespace) -> None:
    from solomon.tools.smoke import smoke

    keep_run = Path(args.keep_run).resolve() if args.keep_run else None
    result = smoke(Path(args.source).resolve(), keep=args.keep, keep_run=keep_run)
    print(json.dumps(result, indent=2))


def _try(args: argparse.Namespace) -> None:
    import shlex

    from solomon.tools.smoke import experiment_name, try_arguments, try_in_workspace

    name = args.name or experiment_name()
    if args.dry_run:
        print(shlex.join(["dvc", *try_arguments(name)]))
        return
    done = try_in_workspace(Path(args.root), name)
    run_dir = done["run_dir"]
    restore = f"git checkout HEAD -- {' '.join(done['changed'])} && " if done["changed"] else ""
    print(
        f"try: experiment {done['experiment']} in {done['seconds']} s; its run: {run_dir} (open {run_dir}/index.html)\n"
        f"  see it: dvc exp show --only-changed; solomon verify; solomon generate --prompt 'In the beginning'\n"
        f"  go back: {restore}dvc checkout (the experiment "
        f"stays: dvc exp apply {done['experiment']} brings it back)"
    )


def _chaos(args: argparse.Namespace) -> None:
    from solomon.tools.chaos import chaos

    result = chaos(Path(args.source).resolve(), args.trials, args.seed, report=lambda line: print(line, flush=True))
    repaired = f"; {result['lock_repaired']} needed dvc.lock repaired first" if result["lock_repaired"] else ""
    print(f"chaos: {result['identical']}/{result['trials']} trials bit-identical (seed {result['seed']}{repaired})")
    if result["identical"] != result["trials"]:
        raise SystemExit(1)


def _repair_lock(args: argparse.Namespace) -> None:
    from solomon.tools.dvc_lock import repair_lock

    print(repair_lock(Path(args.root)) or "dvc.lock is readable: nothing to repair")


def _review(args: argparse.Namespace) -> None:
    from solomon.tools.review import NotesApi, post_or_update, render_note

    pipeline = os.environ.get("CI_PIPELINE_URL")
    footer = f"<sub>Pipeline {pipeline}; this note is edited in place on every push.</sub>" if pipeline else ""
    body = render_note(Path(args.repo), args.base, args.head, footer)
    if not args.post:
        print(body, end="")
        return
    action, note_id = post_or_update(NotesApi.from_ci_environment(args.token_env), body)
    print(f"review note {note_id} {action}")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not at least 1")
    return value


def _seed(text: str) -> int:
    from solomon.serving.completions import MAX_SEED

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 0 <= value <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"{value} is not between 0 and {MAX_SEED}")
    return value


def _bench(args: argparse.Namespace) -> None:
    from datetime import UTC, datetime

    from tabulate import tabulate

    from solomon.atomic import write_json
    from solomon.params import load_params
    from solomon.tools.bench import stage_overheads, training_throughput

    params = load_params(args.params)
    result = {"measured_utc": datetime.now(UTC).isoformat(timespec="seconds")}
    throughput = result["throughput"] = training_throughput(
        params, steps=args.steps, compile_variant=not args.skip_compile
    )
    rows = [
        [
            name,
            v["tokens_per_s"],
            v["ratio_to_eager_fp32"],
            v["gflops"],
            f"{v['mfu']:.1%} of {v['mfu_of']}",
            v["warmup_s"],
        ]
        for name, v in throughput["variants"].items()
    ]
    peaks, ceilings, ceiling_mfu = (
        throughput[k] for k in ("gemm_peak_gflops", "matmul_ceiling_gflops", "matmul_ceiling_mfu")
    )
    print(f"GEMM peak here: fp32 {peaks['fp32']} GFLOP/s, bf16 {peaks['bf16']} GFLOP/s")
    print(
        f"the model's own matmuls alone: fp32 {ceilings['fp32']} GFLOP/s ({ceiling_mfu['fp32']:.1%} of peak), "
        f"bf16 {ceilings['bf16']} GFLOP/s ({ceiling_mfu['bf16']:.1%} of peak): the MFU ceiling of this model here"
    )
    in_step = throughput["in_step_matmul"]
    if in_step:
        print(
            f"the same matmuls inside the default step (profiled): {in_step['gflops']} GFLOP/s "
            f"({in_step['of_peak']:.1%} of peak), {in_step['ms_per_step']} ms per step"
        )
    print(tabulate(rows, ["variant", "tokens/s", "× eager fp32", "GFLOP/s", "MFU", "warm-up s"], tablefmt="github"))
    print("\nwhere the default path's step time goes (torch.profiler, self CPU time):")
    ops = [
        [p["op"][:60], f"{p['share']:.1%}", p["ms_per_step"], p["calls_per_step"]]
        for p in throughput["default_step_profile"]
    ]
    print(tabulate(ops, ["operator", "share", "ms/step", "calls/step"], tablefmt="github"))
    rss = max(v["peak_rss_mib_so_far"] for v in throughput["variants"].values())
    print(f"peak RSS while training: {rss:.1f} MiB")
    root = Path(".")
    if args.stage_steps and (root / records.TOKENS_DIR / "train.bin").is_file():
        stage = result["stage"] = stage_overheads(root.resolve(), args.stage_steps)
        rows = [[name, stage["seconds"][name], f"{share:.2%}"] for name, share in stage["share_of_loop_wall"].items()]
        rows.append(["all overheads", round(sum(stage["seconds"].values()), 3), f"{stage['overhead_share']:.2%}"])
        print(
            f"\ntrain stage, {stage['steps']} steps (loop {stage['loop_wall_s']} s, {stage['tokens_per_s']} tokens/s):"
        )
        print(tabulate(rows, ["overhead", "seconds", "share of loop wall"], tablefmt="github"))
        print(
            f"resume (start to training again): {stage['resume_s']} s; "
            f"dvc repro with nothing changed: {stage['noop_dvc_repro_s']} s"
        )
    else:
        print(f"train stage not timed: no {records.TOKENS_DIR} here (run `make run` first) or --stage-steps 0")
    if args.serving_clients:
        from solomon.tools.bench import serving_load

        serving = result["serving"] = serving_load(clients=args.serving_clients)
        print(
            f"\nserving ({serving['model']}, {serving['clients']} concurrent clients, {serving['requests']} requests "
            f"of {serving['max_tokens']} tokens, loopback): {serving['requests_per_s']} requests/s, p50 "
            f"{serving['p50_latency_s']} s, p95 {serving['p95_latency_s']} s, {serving['generated_tokens_per_s']} "
            f"generated tokens/s, {serving['errors']} errors"
        )
    out = Path(args.out) / f"{datetime.now(UTC):%Y-%m-%dT%H%M%SZ}.json"
    write_json(out, result)
    print(f"written: {out}")


def run_directory(root: Path, run: str | None) -> Path:
    """The run directory that ``run`` names in the repository ``root``: a directory path (as given), or a run id
    (a bare name) under report.root; without ``run``, ``$SOLOMON_RUN``, else the latest run (``records.LATEST``
    under ``root``). Every command that acts on a run finds it here, so each names runs the same way and fails
    the same way: one line naming the run and how to list the runs."""
    from solomon.params import runs_root

    listing = f"`solomon runs{'' if root == Path('.') else f' --root {root}'}` lists the runs"
    named_by = "" if run else f" (from ${RUN_ENV})"
    run = run or os.environ.get(RUN_ENV) or None
    if not run:
        latest = records.read_latest(root)
        if latest is None:
            raise SolomonError(
                f"no run yet: {root / records.LATEST} not found; run the pipeline first (`make run`, or `make try` "
                "for a one-minute tiny run), or name a run"
            )
        path = root / latest["path"]
        if not path.is_dir():
            raise SolomonError(
                f"the latest run {latest['run_id']} ({records.LATEST}) is not here (no {latest['path']}): "
                f"name another run; {listing}"
            )
        return path
    path = Path(run)
    if not (path.is_dir() or len(path.parts) > 1):
        path = root / runs_root(root) / run
    if not path.is_dir():
        raise SolomonError(
            f"no run {run!r}{named_by}: {path} is not a directory; name a run id or directory; {listing}"
        )
    return path


def _run_of(args: argparse.Namespace) -> Path:
    if args.run and args.run_option and args.run != args.run_option:
        raise SolomonError(f"two runs named ({args.run!r} and --run {args.run_option!r}): name one")
    return run_directory(Path(args.root), args.run or args.run_option)


def _runs(args: argparse.Namespace) -> None:
    from solomon.params import runs_root

    root = Path(args.root)
    base = root / runs_root(root)
    found = sorted(path for path in base.glob("*") if (path / records.RunFiles.RUN_INFO).is_file())
    if not found:
        raise SolomonError(f"no runs in {base}: run the pipeline first (`make run`, or `make try`: a minute)")
    latest = (records.read_latest(root) or {}).get("run_id")
    for path in found:
        print(f"{path.name}\t{path}" + ("\t(latest)" if path.name == latest else ""))


def _verify(args: argparse.Namespace) -> None:
    from solomon.audit.verify import summary, verify

    names = set(args.artifact) if args.artifact else None
    public_key = Path(args.public_key) if args.public_key else None
    result = verify(_run_of(args), Path(args.root), names, args.expect_digest, public_key, dvc_lock=args.dvc_lock)
    for kind, lines in (("FAIL", result.problems), ("DIFF", result.workspace), ("NOTE", result.notes)):
        for line in lines:
            print(f"{kind} {line}")
    print(summary(result))
    if result.status:
        raise SystemExit(result.status)


def _sign(args: argparse.Namespace) -> None:
    from solomon.audit.signing import sign
    from solomon.records import RunFiles

    password = None
    if args.password_env:
        password = os.environ.get(args.password_env)
        if password is None:
            raise SolomonError(f"${args.password_env} is not set: export the key's password there")
    signature = sign(_run_of(args), Path(args.private_key), password)
    promotion = signature.parent / RunFiles.PROMOTION_SIGNATURE
    print(f"signed: {signature}" + (f" and {promotion}" if promotion.is_file() else ""))


def _promote(args: argparse.Namespace) -> None:
    from solomon.audit.promote import Refused, promote, requirements
    from solomon.params import load_params

    root = Path(args.root)
    policy = load_params(args.params or root / PARAMS_FILE).promote
    run_dir = _run_of(args)
    public_key = Path(args.public_key) if args.public_key else None
    required = requirements(policy, run_dir, root, public_key, args.expect_digest)
    try:
        done = promote(run_dir, policy, root, required)
    except Refused as refusal:
        print(f"promote refused: {refusal}")
        raise SystemExit(1) from None
    before = f"from version {done.previous['version']}" if done.previous else "(the first)"
    print(f"promoted: {policy.model_name} version {done.version} is now {policy.alias} {before}; {done.record}")


def _generate(args: argparse.Namespace) -> None:
    from solomon.serving.generate import draw_seed, generate_text

    seed = draw_seed() if args.seed is None else args.seed
    text = generate_text(
        _run_of(args), args.prompt, Path(args.root), args.max_new_tokens, args.temperature, args.top_k, seed
    )
    print(f"{SEED_LINE}{seed}", file=sys.stderr)  # stdout stays the text alone
    print(text)


def _serve(args: argparse.Namespace) -> None:
    from functools import partial

    from solomon.serving.completions import Limits
    from solomon.serving.server import Source, load, serve

    if args.model and (args.run or args.run_option):
        raise SolomonError("give a run or --model, not both")
    root = Path(args.root)
    run_dir = None if args.model else _run_of(args)
    source = Source(root, run_dir, args.model, args.expect_digest, args.threads, args.dvc_lock)
    limits = Limits(args.max_prompt_tokens, args.max_tokens, args.max_body_bytes, args.queue, args.timeout)
    serve(partial(load, source), args.host, args.port, limits, args.image_digest)


def _lineage(args: argparse.Namespace) -> None:
    from solomon.params import PromoteParams, load_params
    from solomon.serving.lineage import Broken, lineage

    root = Path(args.root)
    params_path = root / PARAMS_FILE
    policy = load_params(params_path).promote if params_path.is_file() else PromoteParams()
    reference = args.model or f"models:/{policy.model_name}@{policy.alias}"
    try:
        chain = lineage(args.url, reference, root)
    except Broken as broken:
        print(f"lineage broken at {broken}")
        raise SystemExit(1) from None
    for link, holds in chain:
        print(f"{link:<13}{holds}")
    print("lineage holds: every link verified")


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{value} is not above 0")
    return value


def _report(args: argparse.Namespace) -> None:
    from solomon.report.run import render_pages

    run_dir = _run_of(args)
    if not (run_dir / records.RunFiles.MANIFEST).is_file():
        raise SolomonError(f"{run_dir} has no {records.RunFiles.MANIFEST}: name a run made by the report stage")
    render_pages(run_dir)
    pages = " and ".join(str(run_dir / page) for page in records.RunFiles.PAGES)
    print(f"report: {pages} rebuilt from the run's own files")


def _replay(args: argparse.Namespace) -> None:
    from solomon.tools.replay import replay

    result = replay(_run_of(args), Path(args.root), args.from_step, args.steps, args.threads, args.tolerance)
    print("\n".join(result.lines()))
    if result.status:
        raise SystemExit(result.status)


def _track_sync(args: argparse.Namespace) -> None:
    from solomon.tracking.replay import sync_run
    from solomon.tracking.store import public_uri, redacted_errors

    root = Path(args.root)
    run_dir = _run_of(args)
    if not (run_dir / records.RunFiles.RUN_INFO).is_file():
        raise SolomonError(f"{run_dir} has no {records.RunFiles.RUN_INFO}: name a run made by the report stage")
    model_dir = Path(args.model_dir) if args.model_dir else root / records.MODEL_DIR
    with redacted_errors(f"logging {run_dir.name}", root):
        mlflow_run = sync_run(run_dir, root, model_dir=model_dir)
    print(f"{run_dir.name}: MLflow run {mlflow_run} at {public_uri(root)}")


def _track_register(args: argparse.Namespace) -> None:
    from solomon.params import PromoteParams, load_params
    from solomon.tracking.registry import logged_run, register_version, set_alias
    from solomon.tracking.store import redacted_errors

    root = Path(args.root)
    params_path = root / PARAMS_FILE
    name = args.name or (load_params(params_path).promote if params_path.is_file() else PromoteParams()).model_name
    run_id = _run_of(args).name  # a run directory is named by its run id
    tags = dict(tag.split("=", 1) for tag in args.tag)
    with redacted_errors(f"registering {run_id}", root):
        version = register_version(logged_run(run_id, root), name, tags, root)
        if args.alias:
            set_alias(name, args.alias, version, root)
    print(f"{name} version {version}" + (f", alias {args.alias}" if args.alias else ""))


def _key_value(text: str) -> str:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return text


def _server_start(args: argparse.Namespace) -> None:
    from solomon.tracking.server import start_to_pid_file

    backend = args.backend or f"sqlite:///{Path('mlflow-server.db').resolve()}"
    pid = start_to_pid_file(
        args.port, backend, Path(args.artifacts), Path(args.pid_file), Path(args.log), args.app_name
    )
    print(
        f"mlflow server (pid {pid}) at http://127.0.0.1:{args.port}; export "
        f"MLFLOW_TRACKING_URI=http://127.0.0.1:{args.port}"
    )


def _server_stop(args: argparse.Namespace) -> None:
    from solomon.tracking.server import stop_from_pid_file

    stop_from_pid_file(Path(args.pid_file))
    print("mlflow server stopped")


def _docs(args: argparse.Namespace) -> None:
    import tempfile

    from solomon.tools import experiments

    root = Path(args.root).resolve()
    spec = experiments.load_spec(root / experiments.SPEC)
    pages = args.page or list(spec["pages"])
    unknown = [page for page in pages if page not in spec["pages"]]
    if unknown:
        raise SolomonError(f"no page {unknown[0]!r} in {experiments.SPEC}: choose from {', '.join(spec['pages'])}")
    params = experiments.read_params(root)
    for page in pages:
        if args.docs_command == "run":
            with tempfile.TemporaryDirectory(prefix=f"solomon-docs-{page}-") as scratch:
                measured = experiments.run_page(spec, page, root, Path(scratch) / "repo", root / "docs" / page / "data")
            for run, figures in measured.items():
                rss = f", peak RSS {figures['peak_rss_mib']} MiB" if "peak_rss_mib" in figures else ""
                print(f"{page}/{run}: {figures['wall_s']} s{rss}")
        print(f"docs: {experiments.render_page(spec, page, root / 'docs', params)}")
        for line in experiments.stale_runs(spec, page, root / "docs", params):
            print(f"docs: warning: {line}: rerun `solomon docs run {page}`", file=sys.stderr)


def _run_arguments(parser: argparse.ArgumentParser) -> None:
    """--root and the run a command acts on, the same for every command (resolved by ``run_directory``): as an
    argument or as ``--run`` (which scripts and the Makefile use), with the same help."""
    parser.add_argument("run", nargs="?", help=RUN_HELP)
    parser.add_argument("--run", dest="run_option", metavar="RUN", help=RUN_HELP)
    parser.add_argument("--root", default=".", help=ROOT_HELP)


def _dvc_lock_argument(parser: argparse.ArgumentParser) -> None:
    """The one declaration that --root is no pipeline workspace (the serving image), shared by verify and serve."""
    parser.add_argument(
        "--no-dvc-lock",
        dest="dvc_lock",
        action="store_false",
        help="--root holds only the run's files, without dvc.lock (the serving image): hash them where they are and "
        "compare no dvc.lock (default: a missing dvc.lock is a DIFF, exit status 3 of verify)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="solomon", description="Reproducible small-LM training on CPU.")
    parser.add_argument("--version", action="version", version=f"solomon {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    runs = commands.add_parser("runs", help="list the runs (id, directory; the latest marked) that commands can name")
    runs.add_argument("--root", default=".", help=ROOT_HELP)
    runs.set_defaults(func=_runs)
    trying = commands.add_parser(
        "try",
        help="the tiny config of `make smoke` as a DVC experiment in this workspace (about a minute); prints where "
        "its results are and how to go back",
    )
    trying.add_argument("--root", default=".", help=ROOT_HELP)
    trying.add_argument("--name", help="the experiment's name (default: try-<UTC time>)")
    trying.add_argument(
        "--dry-run", action="store_true", help="print the `dvc exp run` command line instead of running it"
    )
    trying.set_defaults(func=_try)
    smoke = commands.add_parser("smoke", help="run the whole pipeline on a tiny config in a scratch copy")
    smoke.add_argument("--source", default=".", help="repository to copy (default: the current directory)")
    smoke.add_argument("--keep", action="store_true", help="keep the scratch copy and print its path")
    smoke.add_argument("--keep-run", help="copy the smoke run's report directory here (replacing what is there)")
    smoke.set_defaults(func=_smoke)
    chaotic = commands.add_parser(
        "chaos", help="SIGKILL `dvc repro` 1-3 times at random moments per trial (tiny config); compare the bytes"
    )
    chaotic.add_argument("--trials", type=_positive_int, default=20, help="how many trials (default: 20)")
    chaotic.add_argument("--seed", type=int, default=0, help="draws the kill moments: the same seed, the same kills")
    chaotic.add_argument("--source", default=".", help="repository to copy (default: the current directory)")
    chaotic.set_defaults(func=_chaos)
    repair = commands.add_parser(
        "repair-lock",
        help="repair dvc.lock and DVC's rwlock file after a kill during DVC's own write of them (see docs)",
    )
    repair.add_argument("--root", default=".", help=ROOT_HELP)
    repair.set_defaults(func=_repair_lock)
    review = commands.add_parser(
        "review", help="the merge-request note: dvc metrics and params diff of two revisions (--post: to GitLab)"
    )
    review.add_argument("--base", required=True, help="the target branch's revision, e.g. origin/main")
    review.add_argument("--head", default="HEAD", help="the revision under review (default: HEAD)")
    review.add_argument("--repo", default=".", help="the git + DVC repository (default: here)")
    review.add_argument(
        "--post", action="store_true", help="create, or edit in place, the MR note (GitLab CI variables + token)"
    )
    review.add_argument("--token-env", default="SOLOMON_REVIEW_TOKEN", help="variable holding the API token")
    review.set_defaults(func=_review)
    bench = commands.add_parser("bench", help="tokens/s, GFLOP/s and MFU per variant; a real train stage's overheads")
    bench.add_argument("--params", default=PARAMS_FILE, help=f"the params to benchmark (default: {PARAMS_FILE})")
    bench.add_argument(
        "--steps", type=_positive_int, default=20, help="timed steps per variant (after 3 warm-up steps)"
    )
    bench.add_argument("--stage-steps", type=int, default=200, help="steps of the timed real train stage (0: skip it)")
    bench.add_argument("--out", default="reports/bench", help="where the JSON record goes")
    bench.add_argument("--skip-compile", action="store_true", help="leave out the torch.compile variants")
    bench.add_argument(
        "--serving-clients", type=int, default=4, help="concurrent clients of the serving load figure (0: skip it)"
    )
    bench.set_defaults(func=_bench)
    check = commands.add_parser(
        "verify",
        help="prove a run directory is exactly what its manifest records (exit 0, 1 or 3: see `verify --help`)",
        description="Recompute every SHA256 of a run's manifest, where each file is (run directory, workspace, DVC "
        "cache, corpus); require every run-directory file to be a subject or bound otherwise, every role of a run "
        "to be listed, subject names to stay inside the run directory or repository, and the run id of the "
        "manifest, run.json and the directory name to agree; compare the workspace's dvc.lock with the stages the "
        "run recorded. Prints FAIL (the run), DIFF (the workspace) and NOTE lines, then one summary line.",
        epilog="exit status: 0 verified, and the workspace's dvc.lock is the run's (or --no-dvc-lock declares "
        "none); 1 a FAIL: the run is not what its manifest records; 2 bad input (no run directory or manifest); 3 "
        "the run's files all verify, but the workspace's dvc.lock differs from the run's record or is missing (DIFF "
        "lines): outputs it no longer records were verified in the DVC cache, not the workspace",
    )
    _run_arguments(check)
    check.add_argument(
        "--artifact",
        action="append",
        default=[],
        help=f"hash only this subject (repeatable), e.g. {records.WEIGHTS}; the manifest's own checks still run",
    )
    check.add_argument(
        "--expect-digest",
        help="the manifest SHA256 this run must have, from outside the run directory (the registry tag "
        "manifest.sha256, a release record)",
    )
    check.add_argument(
        "--public-key", help="PEM public key: manifest.sig (and promotion.json.sig, if any) must verify with it"
    )
    _dvc_lock_argument(check)
    check.set_defaults(func=_verify)
    signer = commands.add_parser(
        "sign", help="sign a run directory offline with a local EC key (OpenSSF format), and its promotion record"
    )
    _run_arguments(signer)
    signer.add_argument("--private-key", required=True, help="PEM EC private key (e.g. openssl ecparam prime256v1)")
    signer.add_argument("--password-env", help="name of the environment variable holding the key's password")
    signer.set_defaults(func=_sign)
    gate = commands.add_parser(
        "promote", help="verify, check promote.* thresholds and the champion, then register and move the alias"
    )
    _run_arguments(gate)
    gate.add_argument("--params", help=f"where promote.* is read from (default: {PARAMS_FILE} under --root)")
    gate.add_argument(
        "--public-key",
        help="require manifest.sig to verify with this PEM public key (replaces promote.require.signature)",
    )
    gate.add_argument(
        "--expect-digest", help="require this manifest SHA256 (replaces promote.require.digest_file / digest_env)"
    )
    gate.set_defaults(func=_promote)
    rebuild = commands.add_parser(
        "report", help="rebuild README.md and index.html of a run from its own files; no training"
    )
    _run_arguments(rebuild)
    rebuild.set_defaults(func=_report)
    sample = commands.add_parser("generate", help="sample text from a run's model, after verifying its files")
    _run_arguments(sample)
    sample.add_argument("--prompt", required=True, help="the text to continue")
    sample.add_argument(
        "--max-new-tokens", type=_positive_int, help="how many tokens at most (default: the run's train.samples)"
    )
    sample.add_argument(
        "--temperature",
        type=_positive_float,
        help="above 0; lower is more predictable (default: the run's train.samples)",
    )
    sample.add_argument(
        "--top-k", type=_positive_int, help="sample among the k likeliest tokens (default: the run's train.samples)"
    )
    sample.add_argument(
        "--seed",
        type=_seed,
        help=f"same seed, same text (default: a fresh one; every run writes '{SEED_LINE}<n>' to stderr)",
    )
    sample.set_defaults(func=_generate)
    server = commands.add_parser(
        "serve", help="serve a verified run over HTTP: OpenAI-style /v1/completions, /v1/provenance, /readyz"
    )
    _run_arguments(server)
    server.add_argument("--model", help="a registry alias instead of a run: models:/<name>@<alias>")
    server.add_argument(
        "--expect-digest",
        default=os.environ.get("SOLOMON_EXPECT_DIGEST") or None,
        help="the manifest SHA256 the run must have (default: $SOLOMON_EXPECT_DIGEST; with --model, its tag)",
    )
    server.add_argument("--host", default="127.0.0.1", help="the address to listen on (default: 127.0.0.1)")
    server.add_argument("--port", type=_positive_int, default=8000, help="the port (default: 8000)")
    server.add_argument("--threads", type=_positive_int, default=1, help="torch threads (default: 1)")
    _dvc_lock_argument(server)
    server.add_argument(
        "--image-digest",
        default=os.environ.get("SOLOMON_IMAGE_DIGEST") or None,
        help="the serving image's digest, reported by /v1/provenance (default: $SOLOMON_IMAGE_DIGEST)",
    )
    server.add_argument(
        "--max-prompt-tokens",
        type=_positive_int,
        default=256,
        help="the longest prompt a request may send, in tokens (default: 256)",
    )
    server.add_argument("--max-tokens", type=_positive_int, default=256, help="the cap on max_tokens (default: 256)")
    server.add_argument(
        "--max-body-bytes",
        type=_positive_int,
        default=65536,
        help="the largest request body, in bytes (default: 65536)",
    )
    server.add_argument("--queue", type=int, default=8, help="requests waiting beyond the one generating; then 429")
    server.add_argument("--timeout", type=_positive_float, default=60.0, help="seconds per request (default: 60)")
    server.set_defaults(func=_serve)
    lineage = commands.add_parser(
        "lineage", help="walk from a live server to its registry version, manifest, run, weights and corpus"
    )
    lineage.add_argument("--url", required=True, help="the server, e.g. http://127.0.0.1:8000")
    lineage.add_argument(
        "--model", help="the alias the server must serve: models:/<name>@<alias> (default: promote.* in params.yaml)"
    )
    lineage.add_argument("--root", default=".", help=ROOT_HELP)
    lineage.set_defaults(func=_lineage)
    replaying = commands.add_parser(
        "replay",
        help="re-execute a stretch of a run from a kept checkpoint; compare with its record (exit 0, 3 or 1)",
        description="Verify the run, load its replay anchor (a kept checkpoint) at --from-step, re-execute --steps "
        "steps with the run's hyperparameters and tokens, and compare each step's loss and grad_norm with the run's "
        "step log and the model+optimizer state at the end with the anchor there (docs/training.md).",
        epilog="exit status: 0 bit-identical; 3 diverged within the tolerance (another machine kind or thread "
        "count); 1 diverged beyond it; 2 bad input (no run, anchor or such stretch; a run that does not verify)",
    )
    _run_arguments(replaying)
    replaying.add_argument("--from-step", type=_positive_int, help="the anchor to start from (default: the first)")
    replaying.add_argument(
        "--steps", type=_positive_int, help="how many steps (default: to the next anchor, or the end of the log)"
    )
    replaying.add_argument("--threads", type=_positive_int, help="torch threads (default: the run's train.threads)")
    replaying.add_argument(
        "--tolerance", type=_positive_float, help="the relative difference still 'within' (default: 1e-3, see docs)"
    )
    replaying.set_defaults(func=_replay)
    docs = commands.add_parser("docs", help="the experiments behind docs/*.md").add_subparsers(
        dest="docs_command", required=True
    )
    for name, text in (
        ("run", "run a page's `dvc exp run` commands in a scratch copy, keep their results, redraw the page"),
        ("render", "redraw pages (commands, tables, charts) from their checked-in results; no training"),
    ):
        command = docs.add_parser(name, help=text)
        command.add_argument("page", nargs="*", help="pages of docs/experiments.yaml (default: all)")
        command.add_argument("--root", default=".", help=ROOT_HELP)
        command.set_defaults(func=_docs)
    track = commands.add_parser("track", help="MLflow tracking").add_subparsers(dest="track_command", required=True)
    sync = track.add_parser("sync", help="log a run directory to MLflow again, adding only what is missing")
    _run_arguments(sync)
    sync.add_argument(
        "--model-dir",
        help=f"logged too when it holds this run's weights (default: {records.MODEL_DIR} under --root)",
    )
    sync.set_defaults(func=_track_sync)
    register = track.add_parser("register", help="register a synced run's model as a new version; move an alias")
    _run_arguments(register)
    register.add_argument("--name", help="the registered model's name (default: promote.model_name in params.yaml)")
    register.add_argument("--alias", help="point this alias (e.g. candidate, production) at the new version")
    register.add_argument("--tag", type=_key_value, action="append", default=[], help="KEY=VALUE, repeatable")
    register.set_defaults(func=_track_register)
    server = track.add_parser("server", help="start a loopback MLflow server, recording its PID")
    server.add_argument("--port", type=_positive_int, default=5000, help="the loopback port (default: 5000)")
    server.add_argument(
        "--backend",
        default=os.environ.get("MLFLOW_BACKEND_STORE_URI"),
        help="backend store URI (default: $MLFLOW_BACKEND_STORE_URI, else SQLite mlflow-server.db)",
    )
    server.add_argument(
        "--artifacts", default="mlflow-server-artifacts", help="the artifact root (default: mlflow-server-artifacts)"
    )
    server.add_argument("--pid-file", default=PID_FILE, help=f"where the server's PID is kept (default: {PID_FILE})")
    server.add_argument("--log", default="mlflow-server.log", help="the server's log (default: mlflow-server.log)")
    server.add_argument(
        "--app-name", choices=["basic-auth"], default=None, help="basic-auth: users and permissions (MLflow auth app)"
    )
    server.set_defaults(func=_server_start)
    stop = track.add_parser("stop", help="stop the server started by `solomon track server`")
    stop.add_argument("--pid-file", default=PID_FILE, help=f"the PID file `track server` wrote (default: {PID_FILE})")
    stop.set_defaults(func=_server_stop)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    run_main(lambda: args.func(args))


if __name__ == "__main__":
    main()
