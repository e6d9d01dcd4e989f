"""Checkpoints: a mapping of stateful components saved and restored together, atomically, verified before use.

The loop hands the ``Checkpointer`` its components — model, optimiser, schedule, data order, early stopping,
random state, run log, the weight average where a run keeps one — each with its own ``state_dict`` and
``load_state_dict``; a checkpoint is their states under their names plus the step and the run's fingerprint.
``checkpoints/index.json`` names the training run they belong to (made when the run starts, so a resume, however
often, is the same run) and lists the checkpoints that were completely written, oldest first. A file is written to
a temporary name, fsynced and renamed before the index names it, so a kill at any moment leaves the newest listed
checkpoint whole. Loading checks the SHA256 first and unpickles with ``weights_only=True`` (tensors and plain
containers only), so a tampered file can never run code; a file that fails either check is reported and the
previous one is used. Only this module reads or writes checkpoint files.

Each index entry also holds the SHA256 of the checkpoint's model, optimiser and weight-average state
(``state_digest``: the tensors' bytes, not the file's, whose log rows carry wall-clock speeds), and
``write_anchors`` copies the last checkpoints out as the run's replay anchors (``solomon replay`` re-executes the
stretch between them and compares).
"""

from __future__ import annotations

import hashlib
import json
import pickle
import secrets
import shutil
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import torch

from solomon.atomic import no_crash, staged_dir, tidy, write_json, write_with
from solomon.errors import SolomonError
from solomon.hashing import sha256_file

INDEX_FILE = "index.json"
# Rank 0's mark in the directory at each start of a multi-rank run: a nonce every rank must find (a shared volume).
MARKER_FILE = "rank0-marker.json"
CHECKPOINT_GLOB = "step-*.pt"
# The components a state digest covers: what the next steps compute from (the rest is bookkeeping: logs with
# wall-clock speeds, early-stopping scores of evaluations a replay does not run, the random state reseeded per step).
DIGESTED = ("model", "optimizer", "average")  # average: the weight average, where a run keeps one


class Stateful(Protocol):
    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class TorchRandomState:
    """The process's global torch random state as a checkpoint component."""

    def state_dict(self) -> dict[str, Any]:
        return {"torch": torch.get_rng_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        torch.set_rng_state(state["torch"])


@dataclass(frozen=True)
class Loaded:
    step: int
    path: Path
    state: dict


def _unpickling_reason(exc: Exception) -> str:
    """The one informative line of torch.load's long message (e.g. 'Unsupported global: GLOBAL posix.system')."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    for line in lines:
        if "WeightsUnpickler error:" in line:
            return line.split("WeightsUnpickler error:", 1)[1].strip().split(" was not an allowed")[0]
    return lines[0] if lines else type(exc).__name__


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def checkpoint_name(step: int) -> str:
    return f"step-{step:08d}.pt"


def _feed(hasher: Any, value: Any) -> None:
    """Hash a state canonically: mappings by sorted key, sequences in order, tensors by dtype, shape and bytes."""
    if isinstance(value, torch.Tensor):
        tensor = value.detach().contiguous().cpu()
        hasher.update(f"T{tensor.dtype}{tuple(tensor.shape)}".encode())
        hasher.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    elif isinstance(value, Mapping):
        hasher.update(b"{")
        for key in sorted(value, key=repr):
            hasher.update(repr(key).encode())
            _feed(hasher, value[key])
        hasher.update(b"}")
    elif isinstance(value, list | tuple):
        hasher.update(b"[")
        for item in value:
            _feed(hasher, item)
        hasher.update(b"]")
    else:
        hasher.update(f"{type(value).__name__}:{value!r};".encode())


def state_digest(state: Mapping[str, Any]) -> str:
    """SHA256 of the ``DIGESTED`` components of a state (a checkpoint's, or live ``state_dict``s): equal exactly
    when their tensors are bit-identical and their other values equal."""
    hasher = hashlib.sha256()
    _feed(hasher, {name: state[name] for name in DIGESTED if name in state})
    return hasher.hexdigest()


def load_file(path: Path) -> dict:
    """A checkpoint's state, unpickled with ``weights_only=True``; SolomonError (naming why) when it is not a plain
    tensor checkpoint."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError) as exc:
        raise SolomonError(
            f"checkpoint {path} refused: not a plain tensor checkpoint ({_unpickling_reason(exc)})"
        ) from None


class Checkpointer:
    def __init__(self, directory: Path, keep: int) -> None:
        self.directory = directory
        self.keep = keep

    @property
    def index_path(self) -> Path:
        return self.directory / INDEX_FILE

    def read_index(self) -> dict:
        try:
            index = json.loads(self.index_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {"checkpoints": [], "completed": False}
        except json.JSONDecodeError:
            _warn(f"{self.index_path} is unreadable; ignoring the checkpoints it listed")
            return {"checkpoints": [], "completed": False}
        return index

    def save(
        self,
        step: int,
        components: Mapping[str, Stateful],
        metadata: Mapping[str, Any],
        crash_point: Callable[[str], None] = no_crash,
    ) -> Path:
        """Write the components' states (and ``metadata``: fingerprint, environment) as the checkpoint of
        ``step``; list it in the index, and delete the ones beyond the newest ``keep``. ``crash_point`` runs once
        the file is written under a temporary name ("write"), once it is renamed into place ("index") and once the
        index lists it ("prune"): the test hooks kill the process there."""
        state = {"step": step, **metadata, **{name: component.state_dict() for name, component in components.items()}}
        path = self.directory / checkpoint_name(step)

        def writer(tmp: Path) -> None:
            torch.save(state, tmp)
            crash_point("write")

        write_with(path, writer)
        crash_point("index")
        index = self.read_index()
        entries = [e for e in index["checkpoints"] if e["step"] != step]
        entries.append(
            {"step": step, "file": path.name, "sha256": sha256_file(path), "state_sha256": state_digest(state)}
        )
        entries.sort(key=lambda e: e["step"])
        stale, kept = entries[: -self.keep], entries[-self.keep :]
        write_json(self.index_path, {**index, "checkpoints": kept, "completed": False})
        crash_point("prune")
        for entry in stale:
            (self.directory / entry["file"]).unlink(missing_ok=True)
        return path

    @staticmethod
    def restore(loaded: Loaded, components: Mapping[str, Stateful]) -> None:
        for name, component in components.items():
            component.load_state_dict(loaded.state[name])

    def mark_completed(self, completed: bool = True) -> None:
        write_json(self.index_path, {**self.read_index(), "completed": completed})

    def run_id(self) -> str:
        """The run id of the training run these checkpoints belong to (UTC start time + 8 random hex digits): made
        when a run starts and kept through every resume, until ``clear``. The run directory, the MLflow run and the
        report all carry it."""
        index = self.read_index()
        if not index.get("run_id"):
            index["run_id"] = f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{secrets.token_hex(4)}"  # sortable, unique
            write_json(self.index_path, index)
        return index["run_id"]

    def write_marker(self, nonce: int) -> None:
        write_json(self.directory / MARKER_FILE, {"nonce": nonce})

    def sees_marker(self, nonce: int) -> bool:
        """Whether this process finds the marker with ``nonce`` that rank 0 wrote: the same directory as rank 0's."""
        try:
            return json.loads((self.directory / MARKER_FILE).read_text(encoding="utf-8")).get("nonce") == nonce
        except (OSError, ValueError, AttributeError):
            return False

    def load_latest(self) -> Loaded | None:
        """The newest checkpoint that passes its SHA256 check and loads safely; None when there is none."""
        for entry in reversed(self.read_index()["checkpoints"]):
            path = self.directory / entry["file"]
            if not path.is_file():
                _warn(f"checkpoint {path} is missing; trying the previous one")
                continue
            actual = sha256_file(path)
            if actual != entry["sha256"]:
                _warn(
                    f"checkpoint {path} is corrupt (SHA256 {actual[:12]}…, index says {entry['sha256'][:12]}…); "
                    "using the previous one"
                )
                continue
            try:
                state = load_file(path)
            except SolomonError as refused:
                _warn(f"{refused}; using the previous one")
                continue
            return Loaded(entry["step"], path, state)
        return None

    def write_anchors(self, target: Path, count: int, record: Mapping[str, Any]) -> list[dict]:
        """Copy the newest ``count`` checkpoints to ``target`` (replaced whole, atomically) with an index naming them
        (step, file, SHA256 of the file and of the state) beside ``record``; returns their entries."""
        anchors = self.read_index()["checkpoints"][-count:]
        with staged_dir(target) as tmp:
            for entry in anchors:
                shutil.copyfile(self.directory / entry["file"], tmp / entry["file"])
            write_json(tmp / INDEX_FILE, {**record, "anchors": anchors})
        return anchors

    def remove_partial(self) -> None:
        """Tidy what interrupted writes left: temporary files and directories (``.<name>.*.tmp``), a directory
        swap caught between its two renames (``.<name>.old`` — put back when ``<name>`` is missing), and checkpoint
        files the index does not list (written, but killed before the index named them)."""
        if not self.directory.is_dir():
            return
        for partial in self.directory.glob(".*.tmp"):
            shutil.rmtree(partial) if partial.is_dir() and not partial.is_symlink() else partial.unlink()
        for old in self.directory.glob(".*.old"):
            tidy(old.with_name(old.name[1 : -len(".old")]))
        try:  # an unreadable index lists nothing: then keep every file rather than delete what it may have listed
            listed = {entry["file"] for entry in json.loads(self.index_path.read_text(encoding="utf-8"))["checkpoints"]}
        except FileNotFoundError:
            listed = set()
        except (json.JSONDecodeError, KeyError, TypeError):
            return
        for orphan in self.directory.glob(CHECKPOINT_GLOB):
            if orphan.name not in listed:
                orphan.unlink()

    def clear(self) -> None:
        """Forget every checkpoint (and anything else the run kept here, such as its best model)."""
        shutil.rmtree(self.directory, ignore_errors=True)
