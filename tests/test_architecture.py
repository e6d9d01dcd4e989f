"""The shape of the code, held by tests: imports run downward between floors, the training loop's collaborators
read no environment, and the train fingerprint covers exactly the code the loop runs."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from solomon.imports import PACKAGE_DIR, _imported_modules, closure, relative_names

# From the ground up; a module may import its own floor and the floors below (see README: Layout).
FLOORS = (
    ("ground", None),  # the top-level modules: params, records, atomic, hashing, errors, rng, runtime, ...
    ("data", "solomon.data"),
    ("model", "solomon.model"),
    ("evaluation", "solomon.evaluation"),
    ("train", "solomon.train"),
    ("tracking", "solomon.tracking"),
    ("audit", "solomon.audit"),
    ("report", "solomon.report"),  # writes the run directory and its manifest
    ("replay", "solomon.replay"),  # re-executes a verified run's stretch: audit and training together
    ("serving", "solomon.serving"),
    ("export", "solomon.export"),  # Hugging Face and GGUF exports of a verified run, and their verification
    ("lineage", "solomon.lineage"),  # the proof of what answers: a server's or an export's chain back to the corpus
)
LAB = "lab"  # the development tooling beside the product package: it may import the product, never the reverse
TOP = "solomon.cli"  # the command line (a package of command modules) sits above every floor


def floor_of(module: str) -> int:
    if module == TOP or module.startswith(f"{TOP}.") or module == "solomon.__main__":  # `python -m solomon`
        return len(FLOORS)
    for index, (_, package) in reversed(list(enumerate(FLOORS))):
        if package and (module == package or module.startswith(f"{package}.")):
            return index
    return 0


def module_name(path: Path) -> str:
    relative = path.relative_to(PACKAGE_DIR.parent).with_suffix("")
    parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
    return ".".join(parts)


MODULES = sorted(PACKAGE_DIR.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.relative_to(PACKAGE_DIR).as_posix())
def test_imports_run_downward(path: Path) -> None:
    here = module_name(path)
    upward = sorted(m for m in _imported_modules(path) if floor_of(m) > floor_of(here))
    assert not upward, f"{here} (floor {FLOORS[min(floor_of(here), len(FLOORS) - 1)][0]}) imports upward: {upward}"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.relative_to(PACKAGE_DIR).as_posix())
def test_the_product_never_imports_the_lab(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
    names += [node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module]
    lab = sorted(name for name in names if name.split(".")[0] == LAB)
    assert not lab, f"{module_name(path)} imports the development tooling: {lab}"


def test_the_audit_tracking_and_report_code_never_reaches_the_training_package() -> None:
    for package in ("report", "audit", "tracking", "serving", "export"):
        for path in (PACKAGE_DIR / package).glob("*.py"):
            reached = relative_names(closure(path))
            assert not [name for name in reached if name.startswith("solomon/train/")], path


# Library code reads no environment variable: entry points (the `solomon` command, the stage scripts) read them
# and pass what they mean in (Hooks.from_environment(os.environ), ProcessGroup.from_environment(n, os.environ),
# LiveTracker(retry_s=...), requirements(environ=...), serve(hooks=...)). These modules are the exceptions,
# each for its reason:
ENVIRONMENT_DOORS = {
    "tracking/store.py": "MLflow is configured by its environment (MLFLOW_TRACKING_URI, MLFLOW_EXPERIMENT_NAME, its "
    "HTTP retries) and DVC tells a stage its experiment the same way: the one door where tracking reads and sets it",
    "tracking/mlflow_server.py": "builds the environment of the `mlflow server` child process",
    "pipeline.py": "builds the environment DVC and the stages it runs inherit",
    "portable.py": "torch, MKL and oneDNN read their instruction-set pins from the environment when they load: the "
    "portable mode sets them by re-executing the process, and checks them, in this one place",
    "train/launch.py": "torchrun's entry point (`python -m solomon.train.launch`): it turns off the agents' shared "
    "TCPStore for the workers (TORCH_DISABLE_SHARE_RDZV_TCP_STORE, pytorch/pytorch#135712) before the agent starts",
    "data/tokenizer.py": "tokenizers takes its thread count only from TOKENIZERS_PARALLELISM: each encoding worker "
    "process sets it, so the workers are the parallelism",
    "machine.py": "the kernel-selection variables torch read at start (ONEDNN_MAX_CPU_ISA, ...) are part of the "
    "machine record",
}


def _environment_reads(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        ast.unparse(node)
        for node in ast.walk(tree)
        if (isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "environb", "putenv"))
        or (isinstance(node, ast.ImportFrom) and node.module == "os" and {a.name for a in node.names} & {"environ"})
    ]


@pytest.mark.parametrize(
    "path",
    sorted(p for p in PACKAGE_DIR.rglob("*.py") if p.relative_to(PACKAGE_DIR).parts[0] != "cli"),
    ids=lambda p: p.relative_to(PACKAGE_DIR).as_posix(),
)
def test_library_code_reads_no_environment_variable(path: Path) -> None:
    """Settings and test hooks reach the library as declared arguments, built by an entry point."""
    name = path.relative_to(PACKAGE_DIR).as_posix()
    reads = _environment_reads(path)
    if name in ENVIRONMENT_DOORS:
        assert reads, f"{name} no longer reads the environment: drop it from ENVIRONMENT_DOORS"
    else:
        assert not reads, f"{name} reads the environment: {reads}; read it in the entry point and pass it in"


def test_the_fingerprint_hashes_the_loop_import_closure() -> None:
    from solomon.train.fingerprint import LOOP, NOT_CODE

    names = relative_names(closure(LOOP, exclude=NOT_CODE))
    assert "solomon/params.py" not in names  # its values are fingerprinted, not its text
    for expected in ("solomon/train/loop.py", "solomon/model/gpt.py", "solomon/data/tokens.py",
                     "solomon/evaluation/heldout.py", "solomon/rng.py"):  # fmt: skip
        assert expected in names
    assert not [name for name in names if name.startswith("solomon/tracking/")]


def test_closure_follows_lazy_imports_and_parent_packages(tmp_path: Path) -> None:
    script = tmp_path / "script.py"
    script.write_text("def main():\n    from solomon.audit.verify import verify\n")
    names = relative_names(closure(script))
    assert {"solomon/audit/__init__.py", "solomon/audit/verify.py", "solomon/audit/manifest.py"} <= set(names)
    assert not [name for name in relative_names(closure(script, exclude=("solomon.audit",)))]


def test_dvc_yaml_code_deps_are_what_solomon_deps_writes() -> None:
    """Each stage's code deps are its script's import closure (lab/stage_deps.py): never edited by hand."""
    from lab import stage_deps

    assert stage_deps.is_fresh(PACKAGE_DIR.parent), "dvc.yaml's code deps are stale: run `python -m lab deps --write`"


def test_stages_after_check_depend_on_their_checked_params_not_on_the_params_code() -> None:
    import yaml

    from solomon.records import checked_params_path

    stages = yaml.safe_load((PACKAGE_DIR.parent / "dvc.yaml").read_text(encoding="utf-8"))["stages"]
    for name, stage in stages.items():
        if name == "check":
            assert "solomon/params.py" in stage["deps"]
            continue
        assert "solomon/params.py" not in stage["deps"], name
        assert checked_params_path(name) in stage["deps"], name
        assert checked_params_path(name) in stages["check"]["outs"], name
        script = PACKAGE_DIR.parent / "stages" / f"{name}.py"
        assert "solomon/params.py" in relative_names(closure(script)), f"{name} reads its params through the model"


def test_the_train_stage_params_are_the_fingerprint_params() -> None:
    """What reruns the train stage (DVC) and what a resume compares (the fingerprint) name the same params."""
    import yaml

    from solomon.train.fingerprint import TRAINING_PARAMS

    stages = yaml.safe_load((PACKAGE_DIR.parent / "dvc.yaml").read_text(encoding="utf-8"))["stages"]
    assert tuple(stages["train"]["params"]) == TRAINING_PARAMS


def test_importing_the_chart_and_docs_code_changes_no_global_matplotlib_state() -> None:
    """Charts draw on figures of their own: importing them picks no backend and sets no rcParams for the process
    (checked in a fresh interpreter, which no other test has imported matplotlib into)."""
    import subprocess
    import sys

    check = (
        "import sys, matplotlib\n"
        "snapshot = lambda: {key: dict.__getitem__(matplotlib.rcParams, key) for key in matplotlib.rcParams.keys()}\n"
        "before = snapshot()\n"
        "import solomon.report.charts, lab.experiments.render, lab.experiments.runner\n"
        "assert snapshot() == before, sorted(k for k, v in snapshot().items() if before[k] != v)\n"
        "assert 'matplotlib.pyplot' not in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", check], cwd=PACKAGE_DIR.parent, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
