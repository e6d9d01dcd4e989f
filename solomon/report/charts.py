"""Training curves with matplotlib: PNG files for the Markdown README, inline SVG for the self-contained HTML."""

from __future__ import annotations

import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

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


def write_pngs(rows: list[dict], evals: list[dict], out_dir: Path) -> list[str]:
    """Write ``<name>.png`` into ``out_dir`` for the Markdown page; return the names."""
    for name in CHARTS:
        fig = _figure(rows, evals, name)
        fig.savefig(out_dir / f"{name}.png", metadata={"Software": None})
        plt.close(fig)
    return list(CHARTS)


def svgs(rows: list[dict], evals: list[dict]) -> dict[str, str]:
    """{name: inline SVG text} for the self-contained HTML page."""
    rendered = {}
    for name in CHARTS:
        fig = _figure(rows, evals, name)
        buffer = io.StringIO()
        fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
        plt.close(fig)
        svg = buffer.getvalue()
        rendered[name] = svg[svg.index("<svg") :]
    return rendered
