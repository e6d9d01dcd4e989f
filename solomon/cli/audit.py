"""`solomon verify`, `solomon sign` and `solomon promote`: the audit chain of a run (docs/audit.md)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from solomon import records
from solomon.cli.arguments import add_dvc_lock, add_run_arguments, run_of
from solomon.errors import SolomonError
from solomon.records import PARAMS_FILE

VERIFY_DESCRIPTION = (
    "Recompute every SHA256 of a run's manifest, where each file is (run directory, workspace, DVC cache, corpus); "
    "require every run-directory file to be a subject or bound otherwise, every role of a run to be listed, subject "
    "names to stay inside the run directory or repository, and the run id of the manifest, run.json and the "
    "directory name to agree; compare the workspace's dvc.lock with the stages the run recorded. Prints FAIL (the "
    "run), DIFF (the workspace) and NOTE lines, then one summary line."
)
VERIFY_EXIT = (
    "exit status: 0 verified, and the workspace's dvc.lock is the run's (or --no-dvc-lock declares none); 1 a "
    "FAIL: the run is not what its manifest records; 2 bad input (no run directory or manifest); 3 the run's files "
    "all verify, but the workspace's dvc.lock differs from the run's record or is missing (DIFF lines): outputs it "
    "no longer records were verified in the DVC cache, not the workspace"
)


def register(commands: argparse._SubParsersAction) -> None:
    _register_verify(commands)
    signer = commands.add_parser(
        "sign", help="sign a run directory offline with a local EC key (OpenSSF format), and its promotion record"
    )
    add_run_arguments(signer)
    signer.add_argument("--private-key", required=True, help="PEM EC private key (e.g. openssl ecparam prime256v1)")
    signer.add_argument("--password-env", help="name of the environment variable holding the key's password")
    signer.set_defaults(func=_sign)
    gate = commands.add_parser(
        "promote", help="verify, check promote.* thresholds and the champion, then register and move the alias"
    )
    add_run_arguments(gate)
    gate.add_argument("--params", help=f"where promote.* is read from (default: {PARAMS_FILE} under --root)")
    gate.add_argument(
        "--public-key",
        help="require manifest.sig to verify with this PEM public key (replaces promote.require.signature)",
    )
    gate.add_argument(
        "--expect-digest", help="require this manifest SHA256 (replaces promote.require.digest_file / digest_env)"
    )
    gate.set_defaults(func=_promote)


def _register_verify(commands: argparse._SubParsersAction) -> None:
    check = commands.add_parser(
        "verify",
        help="prove a run directory is exactly what its manifest records (exit 0, 1 or 3: see `verify --help`)",
        description=VERIFY_DESCRIPTION,
        epilog=VERIFY_EXIT,
    )
    add_run_arguments(check)
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
    check.add_argument(
        "--export",
        metavar="DIR",
        help="prove an export (solomon export) is its run's model instead: the run it names verifies, every file "
        "has its recorded SHA256, and every tensor maps back to the run's weights bit for bit (mlflow: MLmodel is "
        "the run's field by field, the weights, model config and tokenizer inside have the manifest's SHA256)",
    )
    add_dvc_lock(check)
    check.set_defaults(func=_verify)


def _verify(args: argparse.Namespace) -> None:
    from solomon.audit.verify import summary, verify

    if args.export:
        if args.run or args.run_option:
            raise SolomonError("give a run or --export, not both: an export names its run in provenance.json")
        from solomon.export.check import verify_export

        print(verify_export(Path(args.export), Path(args.root)))
        return
    names = set(args.artifact) if args.artifact else None
    public_key = Path(args.public_key) if args.public_key else None
    result = verify(run_of(args), Path(args.root), names, args.expect_digest, public_key, dvc_lock=args.dvc_lock)
    for kind, lines in (("FAIL", result.problems), ("DIFF", result.workspace), ("NOTE", result.notes)):
        for line in lines:
            print(f"{kind} {line}")
    print(summary(result))
    if result.status:
        raise SystemExit(result.status)


def _sign(args: argparse.Namespace) -> None:
    from solomon.audit.signing import sign

    password = None
    if args.password_env:
        password = os.environ.get(args.password_env)
        if password is None:
            raise SolomonError(f"${args.password_env} is not set: export the key's password there")
    signature = sign(run_of(args), Path(args.private_key), password)
    promotion = signature.parent / records.RunFiles.PROMOTION_SIGNATURE
    print(f"signed: {signature}" + (f" and {promotion}" if promotion.is_file() else ""))


def _promote(args: argparse.Namespace) -> None:
    from solomon.audit.promote import Refused, promote, requirements
    from solomon.params import load_params

    root = Path(args.root)
    policy = load_params(args.params or root / PARAMS_FILE).promote
    run_dir = run_of(args)
    public_key = Path(args.public_key) if args.public_key else None
    required = requirements(policy, run_dir, root, os.environ, public_key, args.expect_digest)
    try:
        done = promote(run_dir, policy, root, required)
    except Refused as refusal:
        print(f"promote refused: {refusal}")
        raise SystemExit(1) from None
    before = f"from version {done.previous['version']}" if done.previous else "(the first)"
    print(f"promoted: {policy.model_name} version {done.version} is now {policy.alias} {before}; {done.record}")
