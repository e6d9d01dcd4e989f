"""Training curves with matplotlib: PNG files for the Markdown README, inline SVG for the self-contained HTML."""

from __future__ import annotations

import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from solomon.evaluation.calibration import calibration_errors

# Stable SVG ids and no timestamp: the same log gives the same bytes.
plt.rcParams["svg.hashsalt"] = "solomon"
plt.rcParams["svg.fonttype"] = "path"

# name: (title, step-log column)
CHARTS = {
    "loss": ("loss (nats/token): training steps, validation at each evaluation", "loss"),
    "lr": ("learning rate", "lr"),
    "grad_norm": ("gradient norm (before clipping)", "grad_norm"),
    "tokens_per_s": ("training throughput (tokens/s, wall clock)", "tokens_per_s"),
}


def _figure(rows: list[dict], evals: list[dict], name: str):
    title, column = CHARTS[name]
    fig, ax = plt.subplots(figsize=(7, 3.2), dpi=100)
    ax.plot([r["step"] for r in rows], [r[column] for r in rows], linewidth=1.2, label="train")
    if name == "loss" and evals:
        ax.plot([e["step"] for e in evals], [e["val_loss"] for e in evals], "o-", markersize=3, label="validation")
        ax.legend()
    ax.set_xlabel("step")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


RELIABILITY = "reliability"


def _reliability_figure(reliability: dict[str, list[dict]]):
    """Mean top-1 confidence (x) against accuracy (y) per equal-mass bin, one line per split; the diagonal is a
    perfectly calibrated model, points below it are overconfident."""
    fig, ax = plt.subplots(figsize=(4.8, 4.4), dpi=100)
    top = max(max(b["confidence"], b["accuracy"]) for bins in reliability.values() for b in bins)
    limit = min(1.0, top * 1.05)
    ax.plot([0, limit], [0, limit], "--", color="grey", linewidth=1, label="calibrated")
    for split, bins in reliability.items():
        ece = calibration_errors(bins)["ece"]
        ax.plot(
            [b["confidence"] for b in bins],
            [b["accuracy"] for b in bins],
            "o-",
            markersize=3,
            label=f"{split} (ECE {ece:.4f})",
        )
    ax.set_xlim(0, limit)
    ax.set_ylim(0, limit)
    ax.set_xlabel("mean top-1 confidence in the bin")
    ax.set_ylabel("accuracy in the bin")
    ax.set_title(f"reliability diagram ({len(next(iter(reliability.values())))} equal-mass bins)", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def _figures(rows: list[dict], evals: list[dict], reliability: dict[str, list[dict]] | None):
    """(name, figure) of every chart; the reliability diagram only for runs evaluated with calibration."""
    for name in CHARTS:
        yield name, _figure(rows, evals, name)
    if reliability:
        yield RELIABILITY, _reliability_figure(reliability)


def write_pngs(
    rows: list[dict], evals: list[dict], out_dir: Path, reliability: dict[str, list[dict]] | None = None
) -> list[str]:
    """Write ``<name>.png`` into ``out_dir`` for the Markdown page; return the names."""
    names = []
    for name, fig in _figures(rows, evals, reliability):
        fig.savefig(out_dir / f"{name}.png", metadata={"Software": None})
        plt.close(fig)
        names.append(name)
    return names


def svgs(rows: list[dict], evals: list[dict], reliability: dict[str, list[dict]] | None = None) -> dict[str, str]:
    """{name: inline SVG text} for the self-contained HTML page."""
    rendered = {}
    for name, fig in _figures(rows, evals, reliability):
        buffer = io.StringIO()
        fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
        plt.close(fig)
        svg = buffer.getvalue()
        rendered[name] = svg[svg.index("<svg") :]
    return rendered
