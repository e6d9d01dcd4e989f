"""Render the run report as Markdown (PNG charts beside it) and as one self-contained HTML page (inline SVG,
inline CSS, no scripts or network)."""

from __future__ import annotations

import html

from markdown_it import MarkdownIt
from tabulate import tabulate

from solomon.params import flatten
from solomon.records import CALIBRATION, TASKS, RunFiles

Table = tuple[list[str], list[list]]


def key_value_table(mapping: dict) -> Table:
    return ["key", "value"], [[key, value] for key, value in flatten(mapping).items()]


def metrics_table(metrics: dict) -> Table:
    splits = {split: values for split, values in metrics.items() if split not in (CALIBRATION, TASKS)}
    names = list(next(iter(splits.values())))
    return ["split", *names], [[split, *(values[n] for n in names)] for split, values in splits.items()]


def task_tables(metrics: dict) -> dict[str, Table]:
    """The benchmark tasks' scores, a row per task and metric (none for a run scored before tasks existed)."""
    tasks = metrics.get(TASKS)
    if not tasks:
        return {}
    rows = [
        [task, name, value, section.get(f"{name}_stderr"), section["n"], section["task_sha256"][:12]]
        for task, section in tasks.items()
        for name, value in section.items()
        if isinstance(value, int | float) and name != "n" and not name.endswith("_stderr")
    ]
    version = next(iter(tasks.values()))["lm_eval"]
    title = f"Benchmark tasks (lm-eval {version}; the task files are task_<name>.yaml here)"
    return {title: (["task", "metric", "value", "stderr", "n", "task file SHA256"], rows)}


def calibration_tables(metrics: dict, reliability: dict[str, list[dict]] | None, split: str = "test") -> dict:
    """``split``'s figures and reliability bins raw and with the logits divided by the fitted temperature (none for
    a run evaluated before temperature scaling existed)."""
    scaled = metrics.get(CALIBRATION)
    if scaled is None:
        return {}
    names = ("loss", "perplexity", "bits_per_byte", "ece", "mce")
    temperature, label = scaled["temperature"], f"{split}, logits ÷ {scaled['temperature']}"
    rows = [[split, *(metrics[split][n] for n in names)], [label, *(scaled[f"{split}_{n}"] for n in names)]]
    tables = {
        f"Temperature scaling (T = {temperature}, fitted on {scaled['fitted_on']}; not applied when serving)": (
            ["", *names],
            rows,
        )
    }
    if reliability is not None:
        pairs = zip(reliability[split], scaled[f"{split}_reliability"], strict=True)
        tables[f"Reliability bins of {split}, raw and with the logits ÷ T"] = (
            ["bin", "confidence", "accuracy", "confidence ÷ T", "accuracy ÷ T"],
            [
                [raw["bin"], raw["confidence"], raw["accuracy"], cal["confidence"], cal["accuracy"]]
                for raw, cal in pairs
            ],
        )
    return tables


def render_markdown(title: str, intro: list[str], tables: dict[str, Table], charts: list[str]) -> str:
    parts = [f"# {title}\n", *(f"{line}  " for line in intro), ""]
    parts.append("## Curves\n")
    parts += [f"![{name}]({name}.png)\n" for name in charts]
    for heading, (headers, rows) in tables.items():
        parts += [f"## {heading}\n", tabulate(rows, headers, tablefmt="github"), ""]
    parts += ["## Data card\n", f"[{RunFiles.DATACARD_MD}]({RunFiles.DATACARD_MD})", ""]
    return "\n".join(parts) + "\n"


def datacard_html(markdown: str) -> str:
    """The data card's Markdown as HTML, without its YAML front matter (raw HTML in it is escaped)."""
    if markdown.startswith("---\n"):
        markdown = markdown.split("\n---\n", 1)[1]
    return MarkdownIt("commonmark", {"html": False}).enable("table").render(markdown)


_CSS = """
body { font-family: system-ui, sans-serif; max-width: 980px; margin: 2em auto; padding: 0 1em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; }
th { background: #f3f3f3; }
svg { max-width: 100%; height: auto; }
code { background: #f6f6f6; padding: 0 0.2em; }
"""


def _html_table(table: Table) -> str:
    headers, rows = table
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render_html(title: str, intro: list[str], tables: dict[str, Table], svgs: dict[str, str], datacard: str) -> str:
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        *(f"<p>{html.escape(line)}</p>" for line in intro),
        "<h2>Curves</h2>",
        *(f"<figure>{svg}</figure>" for svg in svgs.values()),
    ]
    for heading, table in tables.items():
        parts += [f"<h2>{html.escape(heading)}</h2>", _html_table(table)]
    parts += ["<h2>Data card</h2>", f'<section class="datacard">{datacard_html(datacard)}</section>']
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
