"""Loss and learning-rate curves with matplotlib: PNG files for Markdown, inline SVG for self-contained HTML."""

from __future__ import annotations

import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

# Stable SVG ids and no timestamp: the same log gives the same bytes.
plt.rcParams["svg.hashsalt"] = "solomon"
plt.rcParams["svg.fonttype"] = "path"

CHARTS = {
    "loss": ("training loss (nats/token)", "loss"),
    "lr": ("learning rate", "lr"),
}


def _figure(rows: list[dict], column: str, title: str):
    fig, ax = plt.subplots(figsize=(7, 3.2), dpi=100)
    ax.plot([r["step"] for r in rows], [r[column] for r in rows], linewidth=1.2)
    ax.set_xlabel("step")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def render(rows: list[dict], out_dir: Path) -> dict[str, str]:
    """Write ``<name>.png`` into ``out_dir`` and return {name: inline SVG text}."""
    svgs = {}
    for name, (title, column) in CHARTS.items():
        fig = _figure(rows, column, title)
        fig.savefig(out_dir / f"{name}.png", metadata={"Software": None})
        buffer = io.StringIO()
        fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
        plt.close(fig)
        svg = buffer.getvalue()
        svgs[name] = svg[svg.index("<svg") :]
    return svgs
