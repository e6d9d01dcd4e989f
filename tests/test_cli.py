"""The `solomon` command without surprises: every option explained, one way to name a run (resolved by one
function, failing in one line that says how to list the runs), bad params as one line naming the dotted param,
`solomon try`'s DVC command line; then, on the built pipeline, generate's seeds and `solomon try` for real."""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, dvc

from lab.cli import build_parser as lab_parser
from lab.cli import main as lab_main
from lab.scratch import merge
from solomon.cli import build_parser, main
from solomon.cli.arguments import RUN_ENV, RUN_HELP, run_directory
from solomon.cli.serve import SEED_LINE
from solomon.errors import SolomonError
from solomon.params import Params, flatten, load_params
from solomon.pipeline import pipeline_env
from solomon.records import LATEST, PARAMS_FILE
from solomon.serving.limits import Limits
from solomon.tiny import TINY_OVERRIDES, try_arguments, try_in_workspace

SOLOMON = str(Path(sys.executable).parent / "solomon")
# Every command that acts on one run; a new one belongs here (and gets the same run arguments).
RUN_COMMANDS = {
    "export",
    "verify",
    "sign",
    "promote",
    "report",
    "generate",
    "serve",
    "replay",
    "lineage",
    "score",
    "track sync",
    "track register",
}


def commands(parser: argparse.ArgumentParser, prefix: str = "") -> dict[str, argparse.ArgumentParser]:
    """Every (sub)command's parser by its name, e.g. "track sync"."""
    found = {prefix.strip(): parser}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found |= commands(sub, f"{prefix}{name} ")
    return found


def test_every_option_and_command_has_help() -> None:
    missing = []
    for name, parser in commands(build_parser()).items():
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                missing += [f"{name} {choice.dest}" for choice in action._choices_actions if not choice.help]
            elif not action.help or not action.help.strip():
                missing.append(f"{name or 'solomon'} {'/'.join(action.option_strings) or action.dest}")
    assert not missing, f"options without help: {missing}"


def test_every_command_that_takes_a_run_names_it_the_same_way() -> None:
    taking = {}
    for name, parser in commands(build_parser()).items():
        runs = [action for action in parser._actions if action.dest in ("run", "run_option")]
        if runs:
            taking[name] = {(tuple(action.option_strings), action.help) for action in runs}
    assert set(taking) == RUN_COMMANDS
    expected = {((), RUN_HELP), (("--run",), RUN_HELP)}
    assert {name: forms for name, forms in taking.items() if forms != expected} == {}


def test_every_serve_limit_is_an_option_whose_default_is_the_limits_own() -> None:
    """`solomon serve`'s limit options are made from the fields of Limits: one each, their defaults Limits' own."""
    serve = commands(build_parser())["serve"]
    options = {action.dest: action for action in serve._actions}
    for limit in dataclasses.fields(Limits):
        assert limit.name in options, f"Limits.{limit.name} has no option"
        assert options[limit.name].default == limit.default == getattr(Limits(), limit.name)
        assert f"(default: {limit.default:g})" in options[limit.name].help
    args = serve.parse_args([])
    assert Limits(**{limit.name: getattr(args, limit.name) for limit in dataclasses.fields(Limits)}) == Limits()
    timeout = serve.parse_args(["--timeout", "2.5", "--queue", "0"])
    assert (timeout.timeout_s, timeout.queue) == (2.5, 0)


def test_building_the_parser_imports_neither_torch_nor_mlflow() -> None:
    """Every command, `--help` included, builds the whole parser: it stays light, each handler imports its own."""
    code = "import sys; from solomon.cli import build_parser; build_parser(); print(*sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    heavy = {"torch", "mlflow", "fastapi", "tokenizers", "dvc"}
    assert not heavy & set(done.stdout.split()), heavy & set(done.stdout.split())


@pytest.mark.parametrize(
    ("args", "refusal"),
    [
        (["serve", "--queue", "-1"], "argument --queue: -1 is not at least 0"),
        (["serve", "--timeout", "0"], "argument --timeout: 0.0 is not above 0"),
        (["serve", "--max-tokens", "many"], "argument --max-tokens: 'many' is not a whole number"),
        (["generate", "--prompt", "a", "--seed", str(2**63)], f"--seed: {2**63} is not between 0 and {2**63 - 1}"),
        (["generate", "--prompt", "a", "--temperature", "x"], "argument --temperature: 'x' is not a number"),
        (["generate", "--prompt", "a", "--temperature", "1e-300"], "--temperature: 1e-300 is not at least 0.01"),
    ],
)
def test_a_number_out_of_bounds_is_refused_in_one_line_naming_the_bound(args, refusal, capsys) -> None:
    with pytest.raises(SystemExit) as refused:
        build_parser().parse_args(args)
    assert refused.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(refusal)


@pytest.mark.slow  # two `solomon` processes, each importing torch
@pytest.mark.parametrize("command", [["serve"], ["generate", "--prompt", "a"]], ids=["serve", "generate"])
def test_the_compiled_route_without_a_cpp_compiler_is_refused_in_one_line_before_anything_loads(
    command: list[str], tmp_path: Path
) -> None:
    done = subprocess.run(
        [str(Path(sys.executable).parent / "solomon"), *command, "--decode", "compiled"],
        cwd=tmp_path, env=os.environ | {"CXX": str(tmp_path / "no-compiler")}, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 2 and done.stdout == "", done.stdout + done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith("error: --decode compiled needs torch's compiler and a C++ compiler (") and line.endswith(
        "install g++ (or set CXX to one), or serve with --decode eager"
    )


def test_a_lab_command_refuses_a_number_out_of_bounds_in_one_line(capsys) -> None:
    with pytest.raises(SystemExit) as refused:
        lab_parser().parse_args(["chaos", "--trials", "0"])
    assert refused.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith("argument --trials: 0 is not at least 1")


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A repository with two run directories (the second the latest) and no params.yaml (default report.root)."""
    monkeypatch.delenv(RUN_ENV, raising=False)
    for run_id in ("20260101T000000Z-aaaa", "20260102T000000Z-bbbb"):
        (tmp_path / "reports/training" / run_id).mkdir(parents=True)
        (tmp_path / "reports/training" / run_id / "run.json").write_text("{}")
    (tmp_path / LATEST).write_text(
        '{"run_id": "20260102T000000Z-bbbb", "path": "reports/training/20260102T000000Z-bbbb"}'
    )
    return tmp_path


def test_a_run_is_named_by_id_or_path_else_the_environment_else_the_latest(repo, monkeypatch) -> None:
    first, second = repo / "reports/training/20260101T000000Z-aaaa", repo / "reports/training/20260102T000000Z-bbbb"
    assert run_directory(repo, None) == second
    assert run_directory(repo, first.name) == first
    assert run_directory(repo, str(first)) == first
    monkeypatch.setenv(RUN_ENV, first.name)
    assert run_directory(repo, None) == first
    assert run_directory(repo, second.name) == second  # a named run wins over the environment


@pytest.mark.parametrize(
    ("setup", "run", "expected"),
    [
        (None, "20260103T000000Z-cccc", "no run '20260103T000000Z-cccc': "),
        (None, "elsewhere/run", "no run 'elsewhere/run': "),
        ("env", None, "no run 'gone' (from $SOLOMON_RUN): "),
        ("latest-gone", None, "the latest run 20260102T000000Z-bbbb (reports/latest.json) is not here"),
        ("no-latest", None, "no run yet: "),
    ],
)
def test_a_run_that_is_not_there_fails_in_one_line_saying_how_to_list_runs(repo, monkeypatch, setup, run, expected):
    import shutil

    if setup == "env":
        monkeypatch.setenv(RUN_ENV, "gone")
    elif setup == "latest-gone":
        shutil.rmtree(repo / "reports/training/20260102T000000Z-bbbb")
    elif setup == "no-latest":
        (repo / LATEST).unlink()
    with pytest.raises(SolomonError) as error:
        run_directory(repo, run)
    message = str(error.value)
    # short but for the paths it names (the temporary directory's name varies in length)
    assert message.startswith(expected) and "\n" not in message and len(message.replace(str(repo), "<repo>")) < 250
    assert f"solomon runs --root {repo}" in message or setup == "no-latest"


def test_runs_lists_the_runs_marking_the_latest_and_a_second_run_name_is_refused(repo, capsys) -> None:
    main(["runs", "--root", str(repo)])
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("\t")[0] for line in lines] == ["20260101T000000Z-aaaa", "20260102T000000Z-bbbb"]
    assert lines[1].endswith("\t(latest)") and not lines[0].endswith("(latest)")
    with pytest.raises(SystemExit) as refused:
        main(["report", "20260101T000000Z-aaaa", "--run", "20260102T000000Z-bbbb", "--root", str(repo)])
    assert refused.value.code == 2
    assert "two runs named" in capsys.readouterr().err


def test_the_makefile_run_plumbing_parses(tmp_path: Path) -> None:
    """`make report RUN=…` and `make serve RUN=…` pass the run as `--run`; both forms reach the same argument."""
    for target in ("report", "serve"):
        done = subprocess.run(
            ["make", "-n", "--no-print-directory", target, "RUN=20260101T000000Z-aaaa"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
        line = next(line for line in done.stdout.splitlines() if f"/solomon {target}" in line)
        args = build_parser().parse_args(shlex.split(line)[1:])
        assert (args.run, args.run_option) == (None, "20260101T000000Z-aaaa")


BAD_PARAMS = [  # (overrides on params.yaml, the dotted param its one-line error must name)
    ({"train": {"max_steps": "ten"}}, "train.max_steps"),  # wrong type
    ({"train": {"max_steps": True}}, "train.max_steps"),  # a YAML boolean is no number
    ({"tokenizer": {"vocab_size": 10}}, "tokenizer.vocab_size"),  # out of range
    ({"lr": {"warmup": -5}}, "lr.warmup"),  # negative
    ({"train": {"bogus": 1}}, "train.bogus"),  # unknown key
    ({"train": {"early_stopping": {"patiense": 3}}}, "train.early_stopping.patiense"),
    ({"model": {"n_layer": None}}, "model.n_layer"),  # null where a value is required
    ({"train": {"batch_size": 16, "accum_steps": 3}}, "train.accum_steps"),  # a bad pair
    ({"model": {"n_embd": 100, "n_head": 3}}, "model.n_head"),
    ({"corpus": {"split": {"val": 0}}}, "corpus.split.val"),  # zero split
    ({"corpus": {"split": {"val": 0.4, "test": 0.2}}}, "corpus.split.test"),
    ({"promote": {"require": {"digest_file": "d", "digest_env": "D"}}}, "promote.require.digest_env"),
    ({"train": {"samples": {"prompts": "In the beginning"}}}, "train.samples.prompts"),
    ({"eval": {"max_tokens": "all"}}, "eval.max_tokens"),
]


@pytest.mark.parametrize(("overrides", "param"), BAD_PARAMS, ids=[param for _, param in BAD_PARAMS])
def test_bad_params_fail_in_one_short_line_naming_the_dotted_param(tmp_path, monkeypatch, overrides, param) -> None:
    defaults = yaml.safe_load((ROOT / PARAMS_FILE).read_text(encoding="utf-8"))
    monkeypatch.chdir(tmp_path)
    Path(PARAMS_FILE).write_text(yaml.safe_dump(merge(defaults, overrides)), encoding="utf-8")
    with pytest.raises(SolomonError) as error:
        load_params(PARAMS_FILE)
    line = f"error: {error.value}"  # as every command and stage prints it
    assert "\n" not in line and len(line) < 200, line
    assert re.search(rf"'{re.escape(param)}'", line), line


def test_a_solomon_command_on_bad_params_prints_one_line_and_exits_2(tmp_path: Path) -> None:
    params = yaml.safe_load((ROOT / PARAMS_FILE).read_text(encoding="utf-8"))
    (tmp_path / PARAMS_FILE).write_text(yaml.safe_dump(merge(params, {"train": {"accum_steps": 3}})))
    done = subprocess.run([SOLOMON, "runs"], cwd=tmp_path, capture_output=True, text=True, env=pipeline_env())
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("error: bad params.yaml: 'train.accum_steps': accum_steps × nproc (3 × 1) must")
    assert len(done.stderr.splitlines()) == 1


def test_try_sets_exactly_the_tiny_config_as_one_named_experiment() -> None:
    args = try_arguments("try-x")
    assert args[:4] == ["exp", "run", "-n", "try-x"]
    sets = args[4:]
    assert sets[::2] == ["-S"] * (len(sets) // 2)
    applied = {key: yaml.safe_load(value) for key, value in (s.split("=", 1) for s in sets[1::2])}
    assert applied == flatten(TINY_OVERRIDES)  # the one tiny config, the one `make smoke` and the tests use
    defaults = yaml.safe_load((ROOT / PARAMS_FILE).read_text(encoding="utf-8"))
    Params.model_validate(merge(defaults, TINY_OVERRIDES))  # and params.yaml accepts it
    done = subprocess.run([SOLOMON, "try", "--dry-run", "--name", "try-x"], capture_output=True, text=True)
    assert done.returncode == 0 and shlex.split(done.stdout) == ["dvc", *args]


def test_try_without_a_commit_says_so(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    with pytest.raises(SolomonError, match="no git commit: DVC records an experiment against one; commit first"):
        try_in_workspace(tmp_path)


# --- on the built pipeline ---------------------------------------------------------------------------------------


def solomon(repo: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in pipeline_env().items() if k != RUN_ENV}
    return subprocess.run([SOLOMON, *args], cwd=repo, env=env, capture_output=True, text=True)


def test_generate_draws_a_fresh_seed_prints_it_and_repeats_with_it(built_repo: Path, monkeypatch, capsys) -> None:
    monkeypatch.delenv(RUN_ENV, raising=False)

    def generate(*args: str) -> tuple[str, str]:
        main(["generate", *args, "--root", str(built_repo), "--prompt", "In the beginning"])
        captured = capsys.readouterr()
        return captured.out, captured.err

    drawn = [generate() for _ in range(2)]
    assert all(err.startswith(SEED_LINE) and err.count("\n") == 1 for _, err in drawn), drawn
    seeds = [int(err.removeprefix(SEED_LINE)) for _, err in drawn]
    assert seeds[0] != seeds[1]  # two 63-bit draws
    run_id = (built_repo / LATEST).read_text().split('"run_id": "')[1].split('"')[0]
    assert generate(run_id, "--seed", str(seeds[0])) == drawn[0]  # the same text, and the seed line again


@pytest.mark.long  # a DVC experiment of the tiny config: most of a minute
def test_try_runs_the_tiny_config_as_an_experiment_in_the_workspace(repo_copy: Path) -> None:
    """The built pipeline has the tiny config committed; with train.seed changed and committed, `solomon try`
    trains, evaluates and reports again (the data stages are cached), as an experiment, and says how to go back."""
    params = yaml.safe_load((repo_copy / PARAMS_FILE).read_text())
    changed = merge(params, {"train": {"seed": 7}, "tracking": {"enabled": False}})
    (repo_copy / PARAMS_FILE).write_text(yaml.safe_dump(changed, sort_keys=False))
    with open(repo_copy / ".gitignore", "a") as ignore:  # as the repository's own .gitignore
        ignore.write("/checkpoints/\n/mlflow.db\n/mlartifacts/\n")
    for args in (["git", "add", "-A"], ["git", "commit", "-qm", "a run committed, then another seed"]):
        subprocess.run(args, cwd=repo_copy, check=True)  # as a user's workspace: the last run's records committed
    before = (repo_copy / LATEST).read_text()
    done = solomon(repo_copy, "try", "--name", "try-test")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (repo_copy / LATEST).read_text() != before
    summary = done.stdout.splitlines()[-3:]
    assert summary[0].startswith("try: experiment try-test in "), done.stdout
    assert "try-test" in dvc(repo_copy, "exp", "list", "--name-only").stdout
    back = summary[2].split("go back: ")[1].split(" (the experiment")[0]
    assert back.startswith("git checkout HEAD -- ") and PARAMS_FILE in back
    subprocess.run(back, shell=True, cwd=repo_copy, env=pipeline_env(), check=True, capture_output=True)
    assert (repo_copy / LATEST).read_text() == before
    assert (
        subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo_copy, capture_output=True, text=True
        ).stdout
        == ""
    )


def test_params_and_deps_say_whether_the_written_files_are_fresh_and_write_them(tmp_path: Path, capsys) -> None:
    """`python -m lab params` / `python -m lab deps` check by default (exit 1 naming the stale file and the command that
    writes it), and --write renders it; the repository itself is fresh."""
    import shutil

    lab_main(["params", "--root", str(ROOT)])
    lab_main(["deps", "--root", str(ROOT)])
    assert capsys.readouterr().out == "params: fresh\ndeps: fresh\n"
    for name in ("params.yaml", "dvc.yaml"):
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / "docs").mkdir()
    text = (tmp_path / "params.yaml").read_text(encoding="utf-8")
    (tmp_path / "params.yaml").write_text(text.replace("# Transformer blocks", "# stale"), encoding="utf-8")
    with pytest.raises(
        SystemExit, match=r"params: stale params.yaml, docs/params.md: run `python -m lab params --write`"
    ):
        lab_main(["params", "--root", str(tmp_path)])
    lab_main(["params", "--root", str(tmp_path), "--write"])
    lab_main(["params", "--root", str(tmp_path)])
    assert capsys.readouterr().out.splitlines()[-1] == "params: fresh"
