"""The run report in a real browser: headless Chromium opens index.html offline, logs no console messages, and
the charts render (pixels of the curves' colours in a screenshot). `make test` installs Debian's chromium
where it can (root + apt); elsewhere this skips, saying so."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest
from conftest import latest_run_dir

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (`make test` installs it as root)"),
]
# Offline and quiet: no background connections (the network is closed), console messages on stderr.
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--enable-logging=stderr",
    "--v=0",
]
TRAIN_BLUE, VALIDATION_ORANGE = (31, 119, 180), (255, 127, 14)  # matplotlib's first two colours


def screenshot(page: Path, tmp_path: Path) -> tuple[list[str], np.ndarray]:
    """Console lines Chromium logged for the page, and its screenshot as RGB 0-255."""
    shot = tmp_path / f"{page.stem}.png"
    done = subprocess.run(
        [CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}",
         "--window-size=1000,3000", page.as_uri()],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert shot.is_file(), done.stderr[-2000:]
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    return console, (matplotlib.image.imread(shot)[..., :3] * 255).astype(int)


def pixels_near(image: np.ndarray, colour: tuple[int, int, int]) -> int:
    return int((np.abs(image - np.array(colour)).sum(axis=-1) < 40).sum())


def test_the_console_check_sees_errors(tmp_path: Path) -> None:
    page = tmp_path / "broken.html"
    page.write_text('<!DOCTYPE html><html><body><script>console.error("deliberate")</script></body></html>')
    console, _ = screenshot(page, tmp_path)
    assert any("deliberate" in line for line in console), console


def test_report_renders_offline_with_no_console_messages_and_its_charts_drawn(built_repo: Path, tmp_path: Path) -> None:
    run_dir = latest_run_dir(built_repo)
    page = tmp_path / "index.html"
    shutil.copyfile(run_dir / "index.html", page)  # alone: anything it needed beside it would be missing
    console, image = screenshot(page, tmp_path)
    assert console == []
    assert pixels_near(image, TRAIN_BLUE) > 2000  # four curves
    assert pixels_near(image, VALIDATION_ORANGE) > 20  # the validation points of the loss chart


DVC_PURPLE = (148, 93, 214)  # the colour DVC gives the workspace revision (#945dd6)
NO_NETWORK = ["--proxy-server=127.0.0.1:9", "--proxy-bypass-list=<-loopback>"]  # every request fails, even here


def plots_page(repo: Path, out: Path, template: str | None) -> Path:
    from conftest import dvc

    args = ["plots", "show", "-o", str(out)] + (["--html-template", template] if template else [])
    dvc(repo, *args)
    return out / "index.html"


def test_dvc_plots_render_with_the_network_closed(repo_copy: Path, tmp_path: Path) -> None:
    """`dvc plots show` with the offline template draws its curves with every request refused; DVC's own page, the
    control, draws nothing there (it loads Vega from a CDN)."""
    from conftest import ROOT, dvc

    template = ROOT / ".dvc/offline-plots.html"
    if not template.is_file():
        fetched = subprocess.run([str(ROOT / ".ci/fetch-vega"), str(tmp_path / "offline.html")], capture_output=True)
        if fetched.returncode != 0:
            pytest.skip(f"no offline template and none could be fetched: {fetched.stderr.decode().strip()}")
        template = tmp_path / "offline.html"
    offline = plots_page(repo_copy, tmp_path / "offline", str(template))
    assert "cdn.jsdelivr.net" not in offline.read_text()
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    FLAGS.extend(NO_NETWORK)
    try:
        console, image = screenshot(offline, tmp_path / "a")
        _, control = screenshot(plots_page(repo_copy, tmp_path / "cdn", None), tmp_path / "b")
    finally:
        del FLAGS[-len(NO_NETWORK) :]
    assert pixels_near(image, DVC_PURPLE) > 1000, console  # loss, learning rate, gradient norm, reliability
    assert pixels_near(control, DVC_PURPLE) == 0

    # The validation-loss curve (dashed, beside the training loss): its pixels are what the plot loses without it.
    def loss_plot_pixels(name: str) -> int:
        page, loss_plot = tmp_path / name, "training and validation loss"
        dvc(repo_copy, "plots", "show", loss_plot, "-o", str(page), "--html-template", str(template))
        (tmp_path / f"{name}-shot").mkdir()
        return pixels_near(screenshot(page / "index.html", tmp_path / f"{name}-shot")[1], DVC_PURPLE)

    val_loss = repo_copy / "reports/train_val_loss.tsv"
    assert len(val_loss.read_text().splitlines()) > 2  # a header and the evaluations
    FLAGS.extend(NO_NETWORK)
    try:
        with_validation = loss_plot_pixels("with-validation")
        val_loss.write_text(val_loss.read_text().splitlines(keepends=True)[0])
        without_validation = loss_plot_pixels("without-validation")
    finally:
        del FLAGS[-len(NO_NETWORK) :]
    assert with_validation - without_validation > 60, (with_validation, without_validation)
