"""`solomon track`: MLflow tracking by hand: sync a run, register its model, a loopback server."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from solomon import records
from solomon.cli.arguments import POSITIVE_INT, add_run_arguments, run_of
from solomon.errors import SolomonError
from solomon.records import PARAMS_FILE

PID_FILE = "mlflow-server.pid"  # of `solomon track server`, read by `solomon track stop`
LOG_FILE = "mlflow-server.log"


def register(commands: argparse._SubParsersAction) -> None:
    track = commands.add_parser("track", help="MLflow tracking").add_subparsers(dest="track_command", required=True)
    _register_sync(track)
    _register_register(track)
    _register_server(track)
    stop = track.add_parser("stop", help="stop the server started by `solomon track server`")
    stop.add_argument("--pid-file", default=PID_FILE, help=f"the PID file `track server` wrote (default: {PID_FILE})")
    stop.set_defaults(func=_stop)


def _register_sync(track: argparse._SubParsersAction) -> None:
    sync = track.add_parser("sync", help="log a run directory to MLflow again, adding only what is missing")
    add_run_arguments(sync)
    sync.add_argument(
        "--model-dir",
        help=f"logged too when it holds this run's weights (default: {records.MODEL_DIR} under --root)",
    )
    sync.set_defaults(func=_sync)


def _sync(args: argparse.Namespace) -> None:
    from solomon.tracking.store import public_uri, redacted_errors
    from solomon.tracking.sync import sync_run

    root = Path(args.root)
    run_dir = run_of(args)
    if not (run_dir / records.RunFiles.RUN_INFO).is_file():
        raise SolomonError(f"{run_dir} has no {records.RunFiles.RUN_INFO}: name a run made by the report stage")
    model_dir = Path(args.model_dir) if args.model_dir else root / records.MODEL_DIR
    with redacted_errors(f"logging {run_dir.name}", root):
        mlflow_run = sync_run(run_dir, root, model_dir=model_dir)
    print(f"{run_dir.name}: MLflow run {mlflow_run} at {public_uri(root)}")


def _key_value(text: str) -> str:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return text


def _register_register(track: argparse._SubParsersAction) -> None:
    register = track.add_parser("register", help="register a synced run's model as a new version; move an alias")
    add_run_arguments(register)
    register.add_argument("--name", help="the registered model's name (default: promote.model_name in params.yaml)")
    register.add_argument("--alias", help="point this alias (e.g. candidate, production) at the new version")
    register.add_argument("--tag", type=_key_value, action="append", default=[], help="KEY=VALUE, repeatable")
    register.set_defaults(func=_register)


def _register(args: argparse.Namespace) -> None:
    from solomon.params import PromoteParams, load_params
    from solomon.tracking.registry import logged_run, register_version, set_alias
    from solomon.tracking.store import redacted_errors

    root = Path(args.root)
    params_path = root / PARAMS_FILE
    name = args.name or (load_params(params_path).promote if params_path.is_file() else PromoteParams()).model_name
    run_id = run_of(args).name  # a run directory is named by its run id
    tags = dict(tag.split("=", 1) for tag in args.tag)
    with redacted_errors(f"registering {run_id}", root):
        version = register_version(logged_run(run_id, root), name, tags, root)
        if args.alias:
            set_alias(name, args.alias, version, root)
    print(f"{name} version {version}" + (f", alias {args.alias}" if args.alias else ""))


def _register_server(track: argparse._SubParsersAction) -> None:
    from solomon.tracking.mlflow_server import SERVER_ARTIFACTS

    server = track.add_parser("server", help="start a loopback MLflow server, recording its PID")
    server.add_argument("--port", type=POSITIVE_INT, default=5000, help="the loopback port (default: 5000)")
    server.add_argument(
        "--backend",
        default=os.environ.get("MLFLOW_BACKEND_STORE_URI"),
        help="backend store URI (default: $MLFLOW_BACKEND_STORE_URI, else the workspace's own store, where the "
        "stages log and `solomon promote` registers; docs/tracking.md)",
    )
    server.add_argument(
        "--artifacts",
        default=os.environ.get("MLFLOW_ARTIFACTS_DESTINATION"),
        help="the artifact root, a directory or s3://<bucket>/<prefix> (default: $MLFLOW_ARTIFACTS_DESTINATION, "
        f"else the workspace store's own, or {SERVER_ARTIFACTS} with --backend; docs/tracking.md)",
    )
    server.add_argument("--pid-file", default=PID_FILE, help=f"where the server's PID is kept (default: {PID_FILE})")
    server.add_argument("--log", default=LOG_FILE, help=f"the server's log (default: {LOG_FILE})")
    server.add_argument(
        "--app-name", choices=["basic-auth"], default=None, help="basic-auth: users and permissions (MLflow auth app)"
    )
    server.set_defaults(func=_start)


def _start(args: argparse.Namespace) -> None:
    from solomon.tracking.mlflow_server import served_store, start_to_pid_file

    backend, artifacts = served_store(args.backend, args.artifacts)
    pid = start_to_pid_file(args.port, backend, artifacts, Path(args.pid_file), Path(args.log), args.app_name)
    print(
        f"mlflow server (pid {pid}) at http://127.0.0.1:{args.port}; export "
        f"MLFLOW_TRACKING_URI=http://127.0.0.1:{args.port}"
    )


def _stop(args: argparse.Namespace) -> None:
    from solomon.tracking.mlflow_server import stop_from_pid_file

    stop_from_pid_file(Path(args.pid_file))
    print("mlflow server stopped")
