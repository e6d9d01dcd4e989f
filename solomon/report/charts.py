"""Training curves with matplotlib: PNG files for the Markdown README, inline SVG for the self-contained HTML, and
the docs pages' charts that put several runs on one axis.

Every chart is a ``Chart`` (its lines and axes) drawn by ``_draw`` onto a ``matplotlib.figure.Figure`` of its own:
no pyplot, no backend chosen and no rcParams set globally, so importing this module changes nothing.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib
from matplotlib.figure import Figure

from solomon.evaluation.calibration import calibration_errors

# Stable SVG ids and no timestamp: the same log gives the same bytes.
SVG_SETTINGS = {"svg.hashsalt": "solomon", "svg.fonttype": "path"}

# name: (title, step-log column)
CHARTS = {
    "loss": ("loss (nats/token): training steps, validation at each evaluation", "loss"),
    "lr": ("learning rate", "lr"),
    "grad_norm": ("gradient norm (before clipping)", "grad_norm"),
    "tokens_per_s": ("training throughput (tokens/s, wall clock)", "tokens_per_s"),
}
# name: (title, y label, highest y (None: automatic), {system-log column: line label}), drawn when the run has a
# system log
SYSTEM_CHARTS = {
    "cpu": ("CPU during training (% of the cores it may use)", "%", 100, {
        "cpu_utilization_percentage": "machine", "process_cpu_utilization_percentage": "training process"}),
    "memory": ("memory of the training process (MB)", "MB", None, {
        "process_rss_megabytes": "resident", "process_peak_rss_megabytes": "peak resident"}),
}  # fmt: skip
RELIABILITY = "reliability"
COMPARISONS = ("loss", "lr", RELIABILITY)  # the charts a docs page may draw over its runs
SMOOTHING = 20  # steps in the moving average of a page's training loss


@dataclass(frozen=True)
class Line:
    x: list[float]
    y: list[float]
    label: str | None = None
    fmt: tuple[str, ...] = ()  # matplotlib's format string, if any
    style: dict = field(default_factory=dict)  # colour, width, marker size


@dataclass(frozen=True)
class Chart:
    size: tuple[float, float]
    lines: list[Line]
    xlabel: str
    ylabel: str | None = None
    title: str | None = None
    limits: tuple[tuple[float, float] | None, tuple[float, float] | None] = (None, None)  # x, y; None: automatic
    legend: float | str | None = None  # the legend's font size; None: no legend


def _draw(chart: Chart) -> Figure:
    fig = Figure(figsize=chart.size, dpi=100)
    ax = fig.subplots()
    for line in chart.lines:
        ax.plot(line.x, line.y, *line.fmt, label=line.label, **line.style)
    xlim, ylim = chart.limits
    if xlim:
        ax.set_xlim(*xlim)
    if ylim:
        ax.set_ylim(*ylim)
    ax.set_xlabel(chart.xlabel)
    if chart.ylabel:
        ax.set_ylabel(chart.ylabel)
    if chart.title:
        ax.set_title(chart.title, fontsize=10)
    if chart.legend is not None:
        ax.legend(fontsize=chart.legend)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def loss_labels(hyperparameters: dict) -> tuple[str, str]:
    """The loss chart's (train, validation) labels: what each line measures. The step loss is taken in training
    mode, with the run's dropout and label smoothing, which raise it; the evaluations have neither, so a train line
    above the validation line need not mean overfitting's opposite. (Records without a value had none.)"""
    dropout = hyperparameters.get("model", {}).get("dropout", 0.0)
    epsilon = hyperparameters.get("train", {}).get("label_smoothing", 0.0)
    regularised = f"with dropout {dropout:g}" if dropout else "no dropout"
    smoothed = f"label smoothing ε={epsilon:g}" if epsilon else "no smoothing"
    return f"train loss ({regularised}, {smoothed})", "val loss (fixed val subset; no dropout, no smoothing)"


def _curve(rows: list[dict], evals: list[dict], name: str, hyperparameters: dict) -> Chart:
    title, column = CHARTS[name]
    train_label, val_label = loss_labels(hyperparameters) if name == "loss" else ("train", None)
    lines = [Line([r["step"] for r in rows], [r[column] for r in rows], train_label, style={"linewidth": 1.2})]
    if name == "loss" and evals:
        steps, losses = [e["step"] for e in evals], [e["val_loss"] for e in evals]
        lines.append(Line(steps, losses, val_label, ("o-",), {"markersize": 3}))
    return Chart((7, 3.2), lines, "step", title=title, legend="medium" if len(lines) > 1 else None)


def _system_chart(system: list[dict], name: str) -> Chart:
    title, ylabel, top, columns = SYSTEM_CHARTS[name]
    steps = [row["step"] for row in system]
    lines = [Line(steps, [row[column] for row in system], label, (fmt,), {"markersize": 2, "linewidth": 1})
             for (column, label), fmt in zip(columns.items(), ("o-", "s--"), strict=False)]  # fmt: skip
    return Chart((7, 3.2), lines, "step", ylabel, title, (None, (0, top * 1.02 if top else None)), legend="medium")


def _reliability_line(bins: list[dict], name: str, scope: str, style: dict) -> Line:
    """A reliability diagram's curve: mean top-1 confidence (x) against accuracy (y) per equal-mass bin, labelled
    with its expected calibration error (of ``scope``: a split, where ``name`` does not say it)."""
    x, y = [b["confidence"] for b in bins], [b["accuracy"] for b in bins]
    label = f"{name} ({scope}ECE {calibration_errors(bins)['ece']:.4f})"
    return Line(x, y, label, ("o-",), style | {"markersize": 3})


def _reliability(reliability: dict[str, list[dict]]) -> Chart:
    """One line per split; the diagonal is a perfectly calibrated model, points below it are overconfident."""
    top = max(max(b["confidence"], b["accuracy"]) for bins in reliability.values() for b in bins)
    limit = min(1.0, top * 1.05)
    diagonal = Line([0, limit], [0, limit], "calibrated", ("--",), {"color": "grey", "linewidth": 1})
    lines = [diagonal, *(_reliability_line(bins, split, "", {}) for split, bins in reliability.items())]
    title = f"reliability diagram ({len(next(iter(reliability.values())))} equal-mass bins)"
    xlabel, ylabel = "mean top-1 confidence in the bin", "accuracy in the bin"
    return Chart((4.8, 4.4), lines, xlabel, ylabel, title, ((0, limit), (0, limit)), legend=8)


def _moving_average(values: list[float], window: int) -> list[float]:
    """Mean of the last ``window`` values at each point (fewer at the start): the step loss is noisy."""
    sums, total = [], 0.0
    for i, value in enumerate(values):
        total += value - (values[i - window] if i >= window else 0.0)
        sums.append(total / min(i + 1, window))
    return sums


def _comparison(kind: str, runs: dict[str, dict]) -> Chart:
    """One of ``COMPARISONS`` over several runs ({run: {steps, evals, reliability}}), a colour per run."""
    lines, lowest, highest = [], float("inf"), float("-inf")
    for index, (run, result) in enumerate(runs.items()):
        colour, steps = {"color": f"C{index}"}, [row["step"] for row in result["steps"]]
        if kind == "loss":
            smoothed = _moving_average([row["loss"] for row in result["steps"]], SMOOTHING)
            validation = [e["val_loss"] for e in result["evals"]]
            lowest, highest = min(lowest, *smoothed, *validation), max(highest, *validation)
            evaluated = [e["step"] for e in result["evals"]]
            dashed = colour | {"markersize": 3, "linewidth": 0.8}
            lines += [
                Line(steps, smoothed, f"{run}: train (mean of {SMOOTHING} steps)", (), colour | {"linewidth": 1}),
                Line(evaluated, validation, f"{run}: validation subset", ("o--",), dashed),
            ]
        elif kind == "lr":
            lines.append(Line(steps, [row["lr"] for row in result["steps"]], run, (), colour))
        else:
            lines.append(_reliability_line(result["reliability"]["val"], run, "val ", colour))
    if kind == "loss":  # from just under the lowest loss to above the first evaluation: not the first steps
        # (with label smoothing the training loss includes the smoothing term, so it can sit above validation's)
        limits = (None, (lowest - 0.1, highest + 0.2))
        title = "train: in training mode (each run's dropout and label smoothing); validation: neither"
        return Chart((7, 3.6), lines, "step", "loss (nats/token)", title=title, limits=limits, legend=7)
    if kind == "lr":
        return Chart((7, 3.6), lines, "step", "learning rate", legend=7)
    lines.append(Line([0, 1], [0, 1], "calibrated", ("--",), {"color": "grey", "linewidth": 1}))
    xlabel = "mean top-1 confidence in the bin (val, equal-mass bins)"
    return Chart((7, 3.6), lines, xlabel, "accuracy in the bin", limits=((0, 1), (0, 1)), legend=7)


def _figures(
    rows: list[dict], evals: list[dict], reliability: dict[str, list[dict]] | None, hyperparameters: dict,
    system: list[dict] | None,
):  # fmt: skip
    """(name, figure) of every chart; the reliability diagram only for runs evaluated with calibration, the system
    charts only for runs with a system log. ``hyperparameters`` (the run's, as hyperparameters.yaml holds them) name
    what the loss lines measure."""
    for name in CHARTS:
        yield name, _draw(_curve(rows, evals, name, hyperparameters))
    for name in SYSTEM_CHARTS if system else ():
        yield name, _draw(_system_chart(system, name))
    if reliability:
        yield RELIABILITY, _draw(_reliability(reliability))


def _save_png(fig: Figure, path: Path) -> None:
    fig.savefig(path, metadata={"Software": None})


def write_pngs(
    rows: list[dict],
    evals: list[dict],
    out_dir: Path,
    hyperparameters: dict,
    reliability: dict[str, list[dict]] | None = None,
    system: list[dict] | None = None,
) -> list[str]:
    """Write ``<name>.png`` into ``out_dir`` for the Markdown page; return the names."""
    names = []
    for name, fig in _figures(rows, evals, reliability, hyperparameters, system):
        _save_png(fig, out_dir / f"{name}.png")
        names.append(name)
    return names


def save_chart_png(chart: Chart, path: Path) -> None:
    """One chart drawn and saved as a PNG (a docs page's own chart, beside the comparisons below)."""
    _save_png(_draw(chart), path)


def write_comparison_pngs(kinds: list[str], runs: dict[str, dict], out_dir: Path) -> list[str]:
    """Write ``<kind>.png`` into ``out_dir`` for each of ``kinds`` (of ``COMPARISONS``), every run on one axis;
    ``runs`` maps a run to its records (steps, evals, reliability); return the names."""
    for kind in kinds:
        save_chart_png(_comparison(kind, runs), out_dir / f"{kind}.png")
    return list(kinds)


def svgs(
    rows: list[dict], evals: list[dict], hyperparameters: dict, reliability: dict[str, list[dict]] | None = None,
    system: list[dict] | None = None,
) -> dict[str, str]:  # fmt: skip
    """{name: inline SVG text} for the self-contained HTML page."""
    rendered = {}
    for name, fig in _figures(rows, evals, reliability, hyperparameters, system):
        buffer = io.StringIO()
        with matplotlib.rc_context(SVG_SETTINGS):
            fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
        svg = buffer.getvalue()
        rendered[name] = svg[svg.index("<svg") :]
    return rendered
