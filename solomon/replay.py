"""``solomon replay``: re-execute a stretch of a recorded run from one of its replay anchors and compare it with
the record — each step's loss and gradient norm with the run's step log, and the model and optimiser state at the
end of the stretch with the anchor there — in minutes, not the run's hour.

Everything read is verified first (``solomon verify``'s result names where each file is: workspace, or DVC cache
once the workspace has moved on): the run's hyperparameters and step log, the token files, the anchors. The steps
run through the training loop's own ``run_step``, so a replay computes exactly what training computed; only
``--threads`` may be changed, to see what another setting does.

Verdicts, each with its exit status:
- ``IDENTICAL`` (0): every replayed loss and gradient norm logs exactly as recorded, and the state at the end
  of the stretch has the anchor's SHA256 (when an anchor is there);
- ``WITHIN`` (3): they differ, by at most ``TOLERANCE`` relative — what another machine kind, thread count or
  kernel library does to bf16 sums (see ``TOLERANCE``);
- ``DIFFERENT`` (1): beyond it: other data, hyperparameters or code than the record, or a broken kernel.
  A portable run (``train.portable``) is promised the same bytes on any x86-64 host with AVX2, so for it any
  difference is ``DIFFERENT``: there is no tolerance (docs/portable.md).
Bad input — no such run, anchor or stretch, a run that does not verify — exits 2, as everywhere.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from solomon import records
from solomon.audit.verify import require_verified
from solomon.data.tokens import META_FILE, open_tokens, read_meta
from solomon.errors import SolomonError
from solomon.machine import describe
from solomon.params import load_params
from solomon.portable import enter_mode
from solomon.records import RunFiles
from solomon.runtime import configure_torch
from solomon.train.checkpoint import DIGESTED, INDEX_FILE, Checkpointer, Loaded, load_file, state_digest
from solomon.train.fingerprint import fingerprint, first_difference
from solomon.train.loop import TrainPaths, build_components, run_step
from solomon.train.precision import Precision, autocast_for

# Relative difference allowed between a replayed and a recorded loss or gradient norm. bf16 autocast rounds every
# matmul input to 8 significant bits, so kernels that sum in another order drift apart from the first step, but
# slowly; a real change (a slightly higher peak rate, label smoothing, another seed) moves them much further. The
# tolerance sits between the two, as measured in docs/training.md ("The tolerance"). Drift grows with the stretch:
# the tolerance is meant for one checkpoint interval, the default.
TOLERANCE = 1e-3
COMPARED = ("loss", "grad_norm")
IDENTICAL, DIFFERENT, WITHIN = 0, 1, 3


@dataclass
class Replayed:
    run_id: str
    anchor: int  # the step the replay started from (the anchor's)
    end: int  # the last step replayed (1-based, as logged)
    recorded_on: list[str]  # the machine kinds that trained these steps, with their step ranges
    replayed_on: str
    recorded_settings: str
    replayed_settings: str
    tolerance: float
    exact: bool = False  # a portable run: any difference is DIFFERENT
    first_difference: int | None = None  # the first step whose loss or gradient norm logs differently
    largest: tuple[float, str, int] = (0.0, "loss", 0)  # (relative difference, column, step)
    state: tuple[str, str] | None = None  # (recorded, replayed) SHA256 of the state at ``end``
    digested: tuple[str, ...] = ("model", "optimizer")  # the components that state covers (``DIGESTED``'s present)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def state_differs(self) -> bool:
        return self.state is not None and self.state[0] != self.state[1]

    @property
    def status(self) -> int:
        if self.first_difference is None and not self.state_differs:
            return IDENTICAL
        if self.exact:
            return DIFFERENT
        return WITHIN if self.largest[0] <= self.tolerance else DIFFERENT

    def lines(self) -> list[str]:
        steps = self.end - self.anchor
        state = f"the {'+'.join(self.digested)} state at step {self.end}"
        out = [
            f"replay of {self.run_id}: steps {self.anchor + 1}-{self.end} from the anchor at step {self.anchor} "
            f"({steps} steps, {self.seconds:.1f} s)",
            f"recorded on: {'; '.join(self.recorded_on)}; {self.recorded_settings}",
            f"replayed on: {self.replayed_on}; {self.replayed_settings}",
            *(f"note: {note}" for note in self.notes),
        ]
        if self.status == IDENTICAL:
            checked = f", and {state} (SHA256 {self.state[0][:12]}…)" if self.state else ""
            out.append(f"bit-identical: {steps} steps' loss and grad_norm as logged{checked}")
            return out
        relative, column, step = self.largest
        if self.exact:
            where = f"at step {self.first_difference}" if self.first_difference else f"in {state} only"
            out.append(
                f"diverged {where}: largest relative difference {relative:.3g} ({column}, step {step}); a portable "
                "run must replay bit-identically on any x86-64 host with AVX2 (docs/portable.md)"
            )
            return out
        if not self.first_difference:  # every value logs alike; only the state's last bits differ
            out.append(f"diverged in {state} only: largest relative difference 0 as logged; within the tolerance")
            return out
        where = f"at step {self.first_difference}"
        verdict = "within" if self.status == WITHIN else "beyond"
        state_note = f"; {state} differs" if self.state_differs else ""
        out.append(
            f"diverged {where}: largest relative difference {relative:.3g} ({column}, step {step}){state_note}; "
            f"{verdict} the tolerance {self.tolerance:g}"
        )
        return out


def _span_text(span: dict) -> str:
    first, last = span["steps"]
    return f"{span['kind']} (steps {first}-{last})"


def _tokens_dir(files: dict[str, Path], into: Path) -> Path:
    """A token directory of links to the verified token files (they may be DVC cache objects, named by MD5)."""
    for name in ("train.bin", "val.bin", META_FILE):
        found = files.get(f"{records.TOKENS_DIR}/{name}")
        if found is None:
            raise SolomonError(f"the run's manifest lists no {records.TOKENS_DIR}/{name}: it cannot be replayed")
        (into / name).symlink_to(found.resolve())
    return into


def _stretch(anchors: dict[int, dict], logged: int, from_step: int | None, steps: int | None) -> tuple[int, int]:
    """(the anchor to start from, the last step to replay)."""
    start = min(anchors) if from_step is None else from_step
    if start not in anchors:
        listed = ", ".join(map(str, sorted(anchors)))
        raise SolomonError(f"--from-step {start}: no anchor there; the run kept anchors at steps {listed}")
    if start >= logged:
        raise SolomonError(
            f"the anchor at step {start} is the end of the run ({logged} steps): replay from an earlier one"
        )
    later = [step for step in sorted(anchors) if step > start]
    end = start + steps if steps is not None else (later[0] if later else logged)
    if end > logged:
        raise SolomonError(f"--steps {steps}: the run logged {logged - start} steps after step {start}")
    return start, end


def replay_mode(run_dir: Path) -> None:
    """Enter the run's mode (``solomon.portable``) before anything computes: a portable run's replay runs pinned,
    which may replace this process. ``replay`` verifies the run; this reads only its ``train.portable``."""
    try:
        portable = load_params(run_dir / RunFiles.HYPERPARAMETERS, recorded=True).train.portable
    except (SolomonError, OSError):
        return  # ``replay`` refuses such a run with its reason
    enter_mode(portable)


def recorded_precision(saved_fingerprint: dict, setting: str, run_id: str) -> Precision:
    """The precision the run computed in, as its anchor's fingerprint records it (a run from before ``auto`` computed
    in its explicit setting): a replay computes in it whatever this host would choose for ``auto``."""
    recorded = saved_fingerprint.get("environment.precision", None if setting == "auto" else setting)
    if recorded not in ("bf16", "fp32"):
        raise SolomonError(
            f"run {run_id}'s anchor does not record the precision train.precision: {setting} resolved to: it cannot "
            "be replayed, only retrained"
        )
    return recorded


def replay(
    run_dir: Path,
    root: Path = Path("."),
    from_step: int | None = None,
    steps: int | None = None,
    threads: int | None = None,
    tolerance: float | None = None,
) -> Replayed:
    """Replay ``steps`` steps (default: to the next anchor, or to the end of the log) of the run in ``run_dir``
    from its anchor at ``from_step`` (default: its first), with ``threads`` (default: the run's)."""
    started = time.perf_counter()
    result = require_verified(run_dir, root, f"refusing to replay {run_dir}")
    files = result.files
    index_path = files.get(f"{records.ANCHORS_DIR}/{INDEX_FILE}")
    if index_path is None:
        raise SolomonError(
            f"run {result.run_id} kept no replay anchors (trained before Solomon kept them, or without the train "
            "stage's --anchors): it cannot be replayed, only retrained"
        )
    index = records.read_json(index_path)
    anchors = {entry["step"]: entry for entry in index["anchors"]}
    params = load_params(files[RunFiles.HYPERPARAMETERS], recorded=True)
    cfg = params.train
    if cfg.nproc > 1:
        raise SolomonError(
            f"run {result.run_id} trained as {cfg.nproc} ranks: replay re-executes one-process runs only"
        )
    logged = {int(row["step"]): row for row in records.read_steps(files[RunFiles.STEP_LOG])}
    start, end = _stretch(anchors, max(logged, default=0), from_step, steps)
    anchor_file = files[f"{records.ANCHORS_DIR}/{anchors[start]['file']}"]

    threads = threads or cfg.threads
    configure_torch(threads, compiled=cfg.compile, portable=cfg.portable)
    machine = describe()
    state = load_file(anchor_file)
    precision = recorded_precision(state["fingerprint"], cfg.precision, result.run_id)
    spans = [s for s in index.get("machine_kinds", []) if s["steps"][1] > start and s["steps"][0] <= end]
    done = Replayed(
        run_id=result.run_id,
        anchor=start,
        end=end,
        recorded_on=[_span_text(span) for span in spans] or ["(not recorded)"],
        replayed_on=machine["kind"],
        recorded_settings=f"threads {cfg.threads}, {precision}{', portable' if cfg.portable else ''}",
        replayed_settings=f"threads {threads}, {precision}{', portable' if cfg.portable else ''}",
        tolerance=0.0 if cfg.portable else tolerance or TOLERANCE,
        exact=cfg.portable,
    )
    with tempfile.TemporaryDirectory(prefix="solomon-replay-") as scratch:
        tokens_dir = _tokens_dir(files, Path(scratch))
        current = fingerprint(params, tokens_dir, files[records.TOKENIZER], precision)
        if difference := first_difference(state["fingerprint"], current):
            key, old, new = difference
            done.notes.append(f"{key} differs from the run's ({old!r} → {new!r}): the replay runs what is here")
        paths = TrainPaths(tokens_dir, files[records.TOKENIZER], *(Path(scratch) / "unused" for _ in range(5)))
        tokens = open_tokens(tokens_dir, "train")
        vocab_size = read_meta(tokens_dir)["vocab_size"]
        parts = build_components(params, paths, len(tokens), vocab_size, 1, machine, precision)
        Checkpointer.restore(Loaded(start, anchor_file, state), parts.by_name())
        step_model = torch.compile(parts.model) if cfg.compile else parts.model
        autocast = autocast_for(precision)
        parts.model.train()
        for step in range(start, end):
            loss, grad_norm, _ = run_step(parts, params, tokens, step, 0, step_model, autocast)
            recorded = logged[step + 1]
            for column, value in zip(COMPARED, (loss, grad_norm), strict=True):
                replayed, expected = records.as_logged(value), recorded[column]
                if replayed != expected and done.first_difference is None:
                    done.first_difference = step + 1
                relative = abs(replayed - expected) / max(abs(expected), 1e-12)
                if relative > done.largest[0]:
                    done.largest = (relative, column, step + 1)
    if end in anchors and anchors[end].get("state_sha256"):
        live = {name: component.state_dict() for name, component in parts.by_name().items() if name in DIGESTED}
        done.state = (anchors[end]["state_sha256"], state_digest(live))
        done.digested = tuple(live)
    done.seconds = time.perf_counter() - started
    return done
