"""Plot axes a reader can trust: pass@K from 0 to at most 100% (never a negative tick), log axes in plain numbers."""

from __future__ import annotations

import pandas as pd
import pytest

from arcpipe.report import plots

LOSS = "train/lm_loss"


def _evals(values: list[float]) -> pd.DataFrame:
    steps = [10 * (i + 1) for i in range(len(values))]
    return pd.DataFrame({"run": "r", "epoch": steps, "step": steps, "pass@1": values, "pass@2": values, "path": "x"})


def _shown_ticks(ax) -> list[float]:
    low, high = ax.get_ylim()
    return [t for t in ax.get_yticks() if low <= t <= high]


@pytest.mark.parametrize("values", [[0.0, 0.0, 0.0], [0.0, 0.01, 0.02], [0.2, 0.6, 0.9], [1.0, 1.0, 1.0]])
def test_passk_axis_runs_from_0_to_at_most_100_percent(values, kept_figures, tmp_path):
    plots.plot_passk(_evals(values), tmp_path / "passk_vs_step.png", ks=(1, 2))
    for ax in kept_figures["passk_vs_step.png"].axes:
        bottom, top = ax.get_ylim()
        assert bottom == 0 and top <= 100
        assert top >= 100 * max(values)  # every point inside
        assert min(_shown_ticks(ax)) >= 0  # matplotlib's autoscale of all-zero data would show -0.04 ...


def test_a_small_pass_at_k_keeps_a_readable_scale(kept_figures, tmp_path):
    plots.plot_passk(_evals([0.0, 0.01, 0.02]), tmp_path / "passk_vs_step.png", ks=(1,))
    assert kept_figures["passk_vs_step.png"].axes[0].get_ylim()[1] <= 10  # 2% is not flattened against a 0-100 axis


def test_the_log_loss_axis_is_labelled_in_plain_numbers(kept_figures, tmp_path):
    curves = pd.DataFrame({"run": "r", "step": range(1, 51), "epoch": 1, LOSS: [3.0 - 0.04 * i for i in range(50)]})
    plots.plot_loss(curves, tmp_path / "loss_vs_step.png")
    fig = kept_figures["loss_vs_step.png"]
    fig.canvas.draw()
    ax = fig.axes[0]
    assert ax.get_yscale() == "log"
    labels = [t.get_text() for t in ax.get_yticklabels(minor=True) + ax.get_yticklabels() if t.get_text()]
    assert labels, "a loss between 1 and 3 spans less than a decade: its minor ticks carry the labels"
    assert all("10^" not in text and "\\times" not in text for text in labels), labels
    assert all(float(text) > 0 for text in labels)
