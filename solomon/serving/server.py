"""``solomon serve``: one verified run over HTTP (uvicorn), until SIGTERM or SIGINT.

The run is named by its directory or by a registry alias (``models:/<name>@<alias>``, resolved through the
version's ``manifest.sha256`` and ``solomon.run_id`` tags, and verified against that digest). If verification or
loading fails the server stops and the command exits 2 with one line. SIGTERM stops accepting connections, lets
every request in flight (queued ones included) finish, and exits 0.
"""

from __future__ import annotations

import math
import signal
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import uvicorn

from solomon.audit.workspace import IN_CACHE, IN_WORKSPACE
from solomon.errors import SolomonError
from solomon.serving.app import Server, create_app
from solomon.serving.hooks import NO_HOOKS, Hooks
from solomon.serving.limits import DEFAULT_DECODE, DEFAULT_PRECISION, Limits
from solomon.serving.loader import Served, load_verified
from solomon.serving.precision import BF16_FALLBACK, PACKED


@dataclass(frozen=True)
class ModelSource:
    """Where the served model comes from, and how it is loaded: a run directory, or a registry alias (``model``:
    ``models:/<name>@<alias>``); ``expect_digest`` pins the manifest; ``dvc_lock=False``: ``root`` holds only the
    run's files, without a dvc.lock (the serving image)."""

    root: Path
    run_dir: Path | None = None
    model: str | None = None
    expect_digest: str | None = None
    threads: int = 1
    precision: str = DEFAULT_PRECISION  # what the model computes in: fp32 or bf16 (solomon.serving.precision)
    dvc_lock: bool = True  # False: the root holds only the run's files (the serving image), no dvc.lock to compare

    def load(self) -> Served:
        """Verify, then load; a registry alias is resolved to its version's run and verified against its digest."""
        if self.model is None:
            return load_verified(
                self.run_dir, self.root, self.expect_digest, self.threads, dvc_lock=self.dvc_lock,
                precision=self.precision,
            )  # fmt: skip
        from solomon.tracking.registry import resolve  # imports mlflow: only when serving from the registry

        version = resolve(self.model, self.root)
        if self.expect_digest not in (None, version.manifest_sha256):
            raise SolomonError(f"{self.model} is manifest {version.manifest_sha256[:12]}…, not --expect-digest")
        return load_verified(
            version.run_dir, self.root, version.manifest_sha256, self.threads, version.as_dict(), self.dvc_lock,
            self.precision,
        )  # fmt: skip


def serve(
    load_model: Callable[[], Served],
    host: str,
    port: int,
    limits: Limits,
    image_digest: str | None = None,
    hooks: Hooks = NO_HOOKS,
    decode: str = DEFAULT_DECODE,
) -> None:
    """Serve what ``load_model`` loads (``ModelSource.load``: a verified run) until a signal; raises SolomonError
    (one line) when it does not verify or load. ``hooks``: the test hooks the command read from the environment;
    ``decode``: the engine's route (``limits.DECODES``)."""

    def stop(message: str) -> None:  # the model did not verify or load: the listener stops, ``server.error`` says why
        listener.should_exit = True

    _can_listen(host, port)  # before the model loads: uvicorn binds only after its start-up

    server = Server(lambda: _announce(load_model(), host, port), limits, stop, image_digest, hooks, decode)
    config = uvicorn.Config(
        create_app(server), host=host, port=port, log_level="warning", access_log=False, lifespan="on",
        # every request ends within its timeout; a client that stops reading is not waited for much beyond it
        timeout_graceful_shutdown=math.ceil(limits.timeout_s) + 10,
    )  # fmt: skip
    listener = uvicorn.Server(config)
    # uvicorn raises a captured SIGTERM again once it has drained; handled here, the drain ends in exit 0.
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: None)
    try:
        listener.run()
    except SystemExit:  # uvicorn exits when it cannot bind after all (the port taken since the probe)
        if listener.started:
            raise
    finally:
        signal.signal(signal.SIGTERM, previous)
    if server.error:
        raise SolomonError(server.error)
    if not listener.started:
        raise SolomonError(f"could not listen on {host}:{port} (in use, or not an address here): pick another --port")


def _can_listen(host: str, port: int) -> None:
    """Stop in one line when ``host``:``port`` cannot be listened on (no such address here, or the port taken)."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except (socket.gaierror, UnicodeError) as exc:
        raise SolomonError(f"--host {host} is not an address here ({exc}): give one of this machine's") from None
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind(address)
        except OSError as exc:
            raise SolomonError(
                f"could not listen on {host}:{port} ({exc.strerror or exc}): pick another --port or --host"
            ) from None


def _announce(served: Served, host: str, port: int) -> Served:
    print(f"serving {served.run_id} (manifest sha256 {served.manifest_sha256}) on http://{host}:{port}", flush=True)
    places = {entry["verified_in"] for entry in served.files.values()}
    where = IN_CACHE if IN_CACHE in places else IN_WORKSPACE
    for line in served.workspace:
        print(f"note: {line} (the served files verified in the {where})", file=sys.stderr, flush=True)
    if served.precision == "bf16" and not PACKED:
        print(f"note: {BF16_FALLBACK}", file=sys.stderr, flush=True)
    return served
