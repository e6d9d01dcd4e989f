"""The docs pages and their experiments: every page is exactly what its checked-in results and its commands
render to, and the runner really runs `dvc exp run` commands and keeps what they produced."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import ROOT

from lab.experiments.render import END, START, render_page, replace_block
from lab.experiments.results import MEASURED, THEN_LOG, data_dir, read_results, stale_runs
from lab.experiments.runner import run_page
from lab.experiments.spec import SPEC, commands, default_values, load_spec, read_params, run_entry
from solomon.errors import SolomonError
from solomon.params import flatten
from solomon.tiny import TINY_OVERRIDES


def test_every_page_is_what_its_results_render_to(tmp_path: Path) -> None:
    """Pages, tables and charts rebuilt from docs/<page>/data/ are byte-identical to the committed ones: no page
    shows a number or a figure its commands did not produce, none names a command that was not run, and a page
    whose runs trained with other params than today's params.yaml gives (a default changed since it ran) says so
    on the page — changing a default without rerunning or marking the pages it touches fails here."""
    spec = load_spec(ROOT / SPEC)
    docs = shutil.copytree(ROOT / "docs", tmp_path / "docs")
    params = read_params(ROOT)
    defaults = flatten(params, "params")
    for page, entry in spec["pages"].items():
        render_page(spec, page, docs, params)
        assert (docs / f"{page}.md").read_bytes() == (ROOT / "docs" / f"{page}.md").read_bytes(), page
        for chart in entry["charts"]:
            assert (docs / page / f"{chart}.png").read_bytes() == (ROOT / "docs" / page / f"{chart}.png").read_bytes()
        for run, lines in commands(spec, page, defaults, as_made=True).items():
            measured = json.loads((data_dir(docs, page) / run / MEASURED).read_text())
            ran = [line["command"] for line in measured.get("before", [])] + [measured["command"]]
            assert ran == lines, f"{page}/{run} was run with other commands"
            then = run_entry(entry["runs"][run])[1].get("then", [])
            if then:
                transcript = (data_dir(docs, page) / run / THEN_LOG).read_text().splitlines()
                assert [line[2:] for line in transcript if line.startswith("$ ")] == then, f"{page}/{run} checks"


# "docs/<page>.md" as text (a parameter's meaning, a docstring, a page); "git show <commit>:docs/<page>.md" is history
NAMED_PAGE = re.compile(r"(?<![:\w/.-])docs/(?:[\w-]+/)*[\w.-]+\.md")


def test_every_docs_page_named_in_the_code_and_docs_exists() -> None:
    """A page removed or renamed leaves no mention behind: in the product, lab/, params.yaml or the docs."""
    texts = [*ROOT.glob("solomon/**/*.py"), *ROOT.glob("lab/**/*.py"), *ROOT.glob("docs/*.md")]
    texts += [ROOT / name for name in ("params.yaml", "README.md", "KNOWN_ISSUES.md", "Makefile", "Dockerfile")]
    missing = sorted(
        f"{path.relative_to(ROOT)}: {named}"
        for path in texts
        for named in set(NAMED_PAGE.findall(path.read_text(encoding="utf-8")))
        if not (ROOT / named).is_file()
    )
    assert not missing, "\n".join(missing)
    assert NAMED_PAGE.findall("(docs/training.md), `git show b984a43d:docs/sweep.md`") == ["docs/training.md"]


def test_the_docs_index_links_every_page() -> None:
    index = (ROOT / "docs" / "README.md").read_text()
    for page in load_spec(ROOT / SPEC)["pages"]:
        assert f"({page}.md)" in index
    assert "(docs/README.md)" in (ROOT / "README.md").read_text()


def test_commands_set_every_varied_key_whatever_the_order() -> None:
    spec = {"base": {"train.max_steps": 5}, "pages": {"p": {"runs": {"a": {"lr.warmup": 1}, "b": {"lr.peak": 0.5}}}}}
    defaults = {"params.lr.warmup": 200, "params.lr.peak": 0.001, "params.train.max_steps": 4000}
    assert commands(spec, "p", defaults) == {
        "a": ["dvc exp run -n p-a -S train.max_steps=5 -S lr.peak=0.001 -S lr.warmup=1"],
        "b": ["dvc exp run -n p-b -S train.max_steps=5 -S lr.peak=0.5 -S lr.warmup=200"],
    }
    spec["pages"]["p"]["params"] = {"train.optimizer": "adamw"}  # what every run of the page holds
    assert commands(spec, "p", defaults)["a"] == [
        "dvc exp run -n p-a -S train.max_steps=5 -S train.optimizer=adamw -S lr.peak=0.001 -S lr.warmup=1"
    ]
    del spec["pages"]["p"]["params"]
    spec["pages"]["p"]["runs"]["b"] = {"params": {"lr.peak": 0.5}, "fresh": True, "kill_after_step": 3}
    flags = "-S train.max_steps=5 -S lr.peak=0.5 -S lr.warmup=200"
    assert commands(spec, "p", defaults)["b"] == [
        f"rm -rf checkpoints && SOLOMON_CRASH_AT=after-step:3 dvc exp run -n p-b-killed {flags}",
        f"dvc exp run -n p-b {flags}",
    ]


def test_a_spec_with_a_bad_param_is_refused_before_anything_runs(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    shutil.copyfile(ROOT / "params.yaml", tmp_path / "params.yaml")
    spec = {"base": {}, "pages": {"p": {"runs": {"bad": {"train.label_smoothing": 1.5}}}}}
    (tmp_path / "docs/experiments.yaml").write_text(yaml.safe_dump(spec))
    with pytest.raises(SolomonError, match=r"docs/experiments\.yaml: page p has no `charts`"):
        load_spec(tmp_path / "docs/experiments.yaml")
    spec["pages"]["p"] |= {"charts": ["loss"], "columns": {}}
    (tmp_path / "docs/experiments.yaml").write_text(yaml.safe_dump(spec))
    with pytest.raises(SolomonError, match=r"docs/experiments\.yaml: page p, run bad: .*label_smoothing"):
        load_spec(tmp_path / "docs/experiments.yaml")
    spec["pages"]["p"] |= {"charts": ["loss", "pie"], "runs": {}}
    (tmp_path / "docs/experiments.yaml").write_text(yaml.safe_dump(spec))
    with pytest.raises(SolomonError, match="unknown chart 'pie'; use loss, lr, reliability"):
        load_spec(tmp_path / "docs/experiments.yaml")


def test_the_spec_reads_numbers_as_params_yaml_does(tmp_path: Path) -> None:
    """`1e-3` in docs/experiments.yaml is a number (YAML 1.2, as DVC and params.yaml read it), so the command sets
    the number, not the string '1e-3'."""
    (tmp_path / "docs").mkdir()
    shutil.copyfile(ROOT / "params.yaml", tmp_path / "params.yaml")
    (tmp_path / "docs/experiments.yaml").write_text(
        "base: {train.max_steps: 5}\npages:\n  p: {runs: {a: {lr.peak: 1e-3}}, charts: [], columns: {}}\n"
    )
    spec = load_spec(tmp_path / "docs/experiments.yaml")
    assert commands(spec, "p", default_values(tmp_path)) == {
        "a": ["dvc exp run -n p-a -S train.max_steps=5 -S lr.peak=0.001"]
    }


@pytest.mark.slow
@pytest.mark.long  # about 70 s
def test_run_page_runs_real_experiments_and_the_page_renders_from_them(tmp_path: Path) -> None:
    tiny = flatten(TINY_OVERRIDES) | {
        "train.max_steps": 6,
        "train.eval_interval": 3,
        "train.ckpt_interval": 2,
        "tracking.enabled": False,
    }
    killed = {"params": {"train.label_smoothing": 0.0}, "fresh": True, "kill_after_step": 5}
    spec = {
        "base": tiny,
        "pages": {
            "smoothing": {
                "runs": {
                    "ls-0.0": {"train.label_smoothing": 0.0},
                    "ls-0.2": {
                        "params": {"train.label_smoothing": 0.2},
                        "then": ["solomon verify --artifact models/model.safetensors"],
                    },
                    "ls-0.0-resumed": killed,
                },
                "charts": ["reliability", "loss", "lr"],
                "columns": {"val ECE": "metrics.val.ece", "peak RSS MiB": "measured.peak_rss_mib"},
            }
        },
    }
    docs = tmp_path / "docs"
    measured = run_page(spec, "smoothing", ROOT, tmp_path / "scratch", data_dir(docs, "smoothing"))
    assert set(measured) == {"ls-0.0", "ls-0.2", "ls-0.0-resumed"}
    # Killed after step 5 by a real SIGKILL, then the same `dvc exp run` again: it resumed from the checkpoint of
    # step 4 and ended with the very bytes of the run that was never interrupted.
    (crash,) = measured["ls-0.0-resumed"]["before"]
    assert crash["returncode"] != 0 and crash["command"].startswith("rm -rf checkpoints && SOLOMON_CRASH_AT=")
    assert measured["ls-0.0-resumed"]["model_sha256"] == measured["ls-0.0"]["model_sha256"]
    assert measured["ls-0.2"]["model_sha256"] != measured["ls-0.0"]["model_sha256"]
    assert all(m["peak_rss_mib"] > 50 and m["wall_s"] > 0 for m in measured.values())
    exp_show = (docs / "smoothing/data/exp_show.md").read_text()
    assert "smoothing-ls-0.0" in exp_show and "smoothing-ls-0.2" in exp_show
    results = read_results(docs / "smoothing/data", ["ls-0.0", "ls-0.2", "ls-0.0-resumed"])
    assert results["ls-0.0-resumed"]["train_run"]["resumed_from_step"] == 4
    then = (docs / "smoothing/data/ls-0.2/then.log").read_text()
    assert then.startswith("$ solomon verify --artifact models/model.safetensors\n") and "verified 1 artifacts" in then
    # Each run's files are its own: label smoothing changed the trained model, so its held-out loss.
    assert results["ls-0.0"]["metrics"]["val"]["loss"] != results["ls-0.2"]["metrics"]["val"]["loss"]
    assert [r["step"] for r in results["ls-0.2"]["steps"]] == list(range(1, 7))
    # Each run kept the params.yaml it trained with: it follows from today's params.yaml and the page's commands,
    # and a changed default (one the page does not set) makes every run stale, naming the key.
    params = read_params(ROOT)
    assert stale_runs(spec, "smoothing", docs, params) == []
    params["model"]["dropout"] = 0.05
    stale = stale_runs(spec, "smoothing", docs, params)
    assert len(stale) == 3 and all("model.dropout ran 0.2, now 0.05" in line for line in stale), stale
    (docs / "smoothing.md").write_text("# Smoothing\n\n<!-- experiments:start -->\n<!-- experiments:end -->\n")
    stale_page = render_page(spec, "smoothing", docs, params).read_text()
    assert "may not be what the commands below give today" in stale_page
    assert "> - smoothing/ls-0.2: model.dropout ran 0.2" in stale_page
    (docs / "smoothing.md").write_text(
        "# Smoothing\n\nprose\n\n<!-- experiments:start -->\nold\n<!-- experiments:end -->\n"
    )
    page = render_page(spec, "smoothing", docs, read_params(ROOT)).read_text()
    assert page.startswith("# Smoothing\n\nprose\n") and "old" not in page and "may not be what" not in page
    assert measured["ls-0.2"]["command"] in page and "| ls-0.2 " in page and crash["command"] in page
    assert then.strip() in page
    assert all((docs / "smoothing" / f"{chart}.png").stat().st_size > 1000 for chart in ("reliability", "loss", "lr"))


def test_a_param_added_since_a_run_is_no_difference_at_what_the_code_did_before_it(tmp_path: Path) -> None:
    """A run recorded before a param existed trained as the code did then: the param's declared default, or its
    declared ``before`` where the default has moved since (lr.cooldown: 0.0 then, 0.2 now). Its page is not marked
    stale while params.yaml holds that value, and is once it holds another."""
    spec = {"base": {"train.max_steps": 5}, "pages": {"p": {"runs": {"a": {}}, "charts": [], "columns": {}}}}
    params = read_params(ROOT)
    recorded = yaml.safe_load((ROOT / "params.yaml").read_text())
    recorded["train"]["max_steps"] = 5
    del recorded["lr"]["cooldown"], recorded["train"]["seed"]  # as runs made before they existed recorded them
    (tmp_path / "p/data/a").mkdir(parents=True)
    (tmp_path / "p/data/a/params.yaml").write_text(yaml.safe_dump(recorded))
    assert params["lr"]["cooldown"] == 0.2
    assert stale_runs(spec, "p", tmp_path, params) == ["p/a: lr.cooldown ran 0.0, now 0.2"]  # its before value
    params["lr"]["cooldown"] = 0.0  # what the code did before lr.cooldown existed
    assert stale_runs(spec, "p", tmp_path, params) == []  # train.seed: at its default, which never moved
    params["train"]["seed"] = 7
    assert stale_runs(spec, "p", tmp_path, params) == ["p/a: train.seed ran '(unset)', now 7"]


def test_a_page_made_under_an_old_default_prints_it_and_keeps_its_commands_as_made() -> None:
    spec = {"base": {}, "pages": {"p": {"runs": {"a": {"lr.peak": 0.5}}, "charts": [], "columns": {},
                                        "made_under": {"model.family": "gpt2"}}}}  # fmt: skip
    today = commands(spec, "p", {"params.lr.peak": 0.001})
    assert today == {"a": ["dvc exp run -n p-a -S model.family=gpt2 -S lr.peak=0.5"]}
    assert commands(spec, "p", {"params.lr.peak": 0.001}, as_made=True) == {"a": ["dvc exp run -n p-a -S lr.peak=0.5"]}


def test_a_varied_key_whose_default_moved_keeps_the_value_its_runs_were_made_with() -> None:
    spec = {"base": {}, "pages": {"p": {"runs": {"a": {}, "b": {"lr.peak": 0.5}}, "charts": [], "columns": {},
                                        "made_under": {"lr.peak": 0.002}}}}  # fmt: skip
    for as_made in (False, True):  # the command as made set the old default: it was a varied key's value then too
        assert commands(spec, "p", {"params.lr.peak": 0.001}, as_made=as_made)["a"] == [
            "dvc exp run -n p-a -S lr.peak=0.002"
        ]


def test_a_renamed_page_names_its_experiments_as_they_were_made() -> None:
    spec = {"base": {}, "pages": {"p": {"runs": {"a": {"lr.peak": 0.5}}, "charts": [], "columns": {}}}}
    assert commands(spec, "p", {"params.lr.peak": 0.001}) == {"a": ["dvc exp run -n p-a -S lr.peak=0.5"]}
    spec["pages"]["p"]["prefix"] = "sweep"
    assert commands(spec, "p", {"params.lr.peak": 0.001}) == {"a": ["dvc exp run -n sweep-a -S lr.peak=0.5"]}


def test_a_full_scale_page_trains_at_params_yaml_s_scale_not_the_base() -> None:
    spec = {
        "base": {"train.max_steps": 5},
        "pages": {"p": {"runs": {"a": {"lr.peak": 0.5}}, "charts": [], "columns": {}}},
    }
    assert commands(spec, "p", {"params.lr.peak": 0.001}) == {
        "a": ["dvc exp run -n p-a -S train.max_steps=5 -S lr.peak=0.5"]
    }
    spec["pages"]["p"]["scale"] = "full"
    assert commands(spec, "p", {"params.lr.peak": 0.001}) == {"a": ["dvc exp run -n p-a -S lr.peak=0.5"]}


def test_a_page_of_an_unknown_scale_is_refused(tmp_path: Path) -> None:
    spec = {"base": {}, "pages": {"p": {"runs": {"a": {}}, "charts": [], "columns": {}, "scale": "huge"}}}
    shutil.copy(ROOT / "params.yaml", tmp_path / "params.yaml")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs/experiments.yaml").write_text(yaml.safe_dump(spec))
    with pytest.raises(SolomonError, match="page p: `scale` must be docs"):
        load_spec(tmp_path / "docs/experiments.yaml")


def test_two_runs_named_as_one_experiment_are_refused(tmp_path: Path) -> None:
    runs = {"runs": {"a": {"lr.peak": 0.5}}, "charts": [], "columns": {}}
    spec = {"base": {}, "pages": {"p": runs, "q": runs | {"prefix": "p"}}}
    shutil.copy(ROOT / "params.yaml", tmp_path / "params.yaml")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs/experiments.yaml").write_text(yaml.safe_dump(spec))
    with pytest.raises(SolomonError, match="two runs are the experiment p-a"):
        load_spec(tmp_path / "docs/experiments.yaml")


def test_a_page_not_yet_written_is_started_as_a_title_and_its_block(tmp_path: Path) -> None:
    """A new page's runs are kept even when its prose does not exist yet: rendering writes the page around them."""
    page = replace_block(tmp_path / "weight-tying.md", START, END, ["| run |"])
    assert page.read_text() == f"# Weight tying\n\n{START}\n| run |\n{END}\n"
    page.write_text(page.read_text().replace(f"{START}\n", f"Prose.\n\n{START}\n"))
    replace_block(page, START, END, ["| run | again |"])
    assert page.read_text() == f"# Weight tying\n\nProse.\n\n{START}\n| run | again |\n{END}\n"


def test_a_precision_compares_as_what_it_computed_in_on_the_runs_host() -> None:
    """A page made with train.precision: bf16 on a host with native bf16 matmuls is today's auto there, not stale;
    on an AVX2-only host auto computes in fp32, so the same record is another recipe than auto."""
    from lab.experiments.results import computed_precision

    native = {"machine_kinds": [{"kind": "x86_64 AuthenticAMD family 25 model 17, avx512_bf16 (no AMX), torch AVX512"}]}
    avx2 = {"machine_kinds": [{"kind": "x86_64 AuthenticAMD family 25 model 1, avx2 (no AMX), torch AVX2"}]}
    assert computed_precision("auto", False, native) == "bf16" == computed_precision("bf16", False, avx2)
    assert computed_precision("auto", False, avx2) == "fp32"
    assert computed_precision("auto", False, None) == "fp32"  # a host not recorded is not assumed to be native
    assert computed_precision("auto", True, native) == "fp32"
