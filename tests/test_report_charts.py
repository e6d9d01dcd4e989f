"""The run page's loss chart says what each line measures: the step loss in training mode (the run's dropout and
label smoothing ε raise it) against the validation loss (neither), read from the drawn figure's legend."""

from __future__ import annotations

import pytest

from solomon.report.charts import _curve, _draw, loss_labels

ROWS = [{"step": s, "loss": 4.0 - 0.1 * s, "lr": 1e-3, "grad_norm": 1.0, "tokens_per_s": 100.0} for s in range(1, 9)]
EVALS = [{"step": 4, "val_loss": 3.5}, {"step": 8, "val_loss": 3.2}]


def legend_of(hyperparameters: dict) -> list[str]:
    figure = _draw(_curve(ROWS, EVALS, "loss", hyperparameters))
    [axes] = figure.axes
    return [text.get_text() for text in axes.get_legend().get_texts()]


@pytest.mark.parametrize(
    ("dropout", "epsilon", "train"),
    [
        (0.2, 0.1, "train loss (with dropout 0.2, label smoothing ε=0.1)"),
        (0.0, 0.05, "train loss (no dropout, label smoothing ε=0.05)"),
        (0.2, 0.0, "train loss (with dropout 0.2, no smoothing)"),
        (0.0, 0.0, "train loss (no dropout, no smoothing)"),
    ],
)
def test_the_loss_legend_names_the_runs_dropout_and_smoothing(dropout: float, epsilon: float, train: str) -> None:
    hyperparameters = {"model": {"dropout": dropout}, "train": {"label_smoothing": epsilon}}
    assert legend_of(hyperparameters) == [train, "val loss (fixed val subset; no dropout, no smoothing)"]


def test_a_record_without_the_values_had_neither() -> None:
    assert loss_labels({})[0] == "train loss (no dropout, no smoothing)"


def test_the_other_curves_have_one_line_and_no_legend() -> None:
    figure = _draw(_curve(ROWS, EVALS, "lr", {"model": {"dropout": 0.2}}))
    assert figure.axes[0].get_legend() is None and len(figure.axes[0].lines) == 1
