"""Every report figure reads alone: labelled axes, one scale across comparable panels, a title
saying what was measured, a legend wherever several series are drawn.

Each figure is built on small synthetic inputs by the function its writer saves, and the
writer is run too, so the PNG files are real (matplotlib's Agg canvas, no pyplot state).
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest

# runtime: numpy, pyarrow and Python differ across the Databricks runtimes (CONTRIBUTING.md)
pytestmark = pytest.mark.runtime

pytest.importorskip("matplotlib")

from dpspark import report, risk, utility  # noqa: E402
from dpspark.embeddings import Embeddings  # noqa: E402
from dpspark.evaluation import embedding_report as er  # noqa: E402
from dpspark.evaluation import privemb_eval as pe  # noqa: E402
from dpspark.stats import joint_calibrate  # noqa: E402

K, WORDS, VOCAB, EMBEDDING = 20, 30, 5000, "glove-6b-50d"
EPS, LAMS = (1.0, 5.0, 20.0), (0.0, 0.5, 1.0)
PNG = b"\x89PNG\r\n\x1a\n"


def _stats_table() -> pa.Table:
    rng = np.random.default_rng(0)
    cols: dict[str, list] = {c: [] for c in ("epsilon", "lambda", "word", "rank", "nw", "sw", "runs")}
    for e in EPS:
        for lam in LAMS:
            p = 1 - math.exp(-e / (10 + 5 * lam))
            nw = rng.binomial(K, p, WORDS)
            sw = np.clip(1 + rng.binomial(K, 0.8 * (1 - p), WORDS), 1, K)
            for i in range(WORDS):
                cols["epsilon"].append(e)
                cols["lambda"].append(lam)
                cols["word"].append(f"w{i}")
                cols["rank"].append(i)
                cols["nw"].append(int(nw[i]))
                cols["sw"].append(int(sw[i]))
                cols["runs"].append(K)
    return pa.table(cols)


UTILITY_SETTINGS = (  # (mechanism, setting, its axes)
    ("laplace", "laplace", {"lambda": 0.0}),
    ("mahalanobis", "mahalanobis λ=1", {"lambda": 1.0}),
    ("tem", "tem β=0.001", {"beta": 0.001}),
)


def _utility_summary(metrics) -> list[dict]:  # noqa: ANN001
    rng = np.random.default_rng(1)
    rows = [{"mode": utility.BASELINE, "epsilon": None, "lambda": None, "repeat": 0, **dict.fromkeys(metrics, 0.95)}]
    for mode in utility.MODES:
        for e in EPS:
            for mechanism, setting, axes in UTILITY_SETTINGS:
                for r in range(3):
                    # accuracy near the majority share, the rest low: the case a truncated axis hides
                    base = {m: (0.87 if m == "accuracy" else 0.3) for m in metrics}
                    rows.append(
                        {"mode": mode, "mechanism": mechanism, "setting": setting, "epsilon": e, "lambda": None}
                        | axes
                        | {"repeat": r}
                        | {m: float(np.clip(v + rng.normal(0, 0.01), 0, 1)) for m, v in base.items()}
                    )
    return utility.summarise(rows, metrics)


def _risk_rows() -> list[dict]:
    rows = []
    for e in EPS:
        for lam in LAMS:
            p = 1 - math.exp(-e / (10 + 5 * lam))
            shares = {"top1": 0.1 + 0.7 * p, "top5": 0.2 + 0.7 * p, "unchanged": p}
            sens = {f"sensitive_{k}": math.nan for k in shares}
            rows.append({"epsilon": e, "lambda": lam, "runs": K, **shares, **sens, "nw_mean": K * p})
    return rows


def _visible_axes(fig) -> list:  # noqa: ANN001
    """The plotting panels (a cell turned off to hold the legend is no panel)."""
    return [ax for ax in fig.axes if ax.axison]


def _check_labels(fig) -> None:  # noqa: ANN001
    for ax in _visible_axes(fig):
        assert ax.get_xlabel().strip(), f"panel {ax.get_title()!r} has no x label"
        assert ax.get_ylabel().strip(), f"panel {ax.get_title()!r} has no y label"


def _suptitle(fig) -> str:  # noqa: ANN001
    assert fig._suptitle is not None, "the figure has no suptitle"
    return fig._suptitle.get_text()


def _legend_labels(fig) -> list[str]:  # noqa: ANN001
    labels = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
    for ax in fig.axes:
        if ax.get_legend() is not None:
            labels += [t.get_text() for t in ax.get_legend().get_texts()]
    return labels


def _same_ylim(axes) -> None:  # noqa: ANN001
    limits = {tuple(np.round(ax.get_ylim(), 9)) for ax in axes}
    assert len(limits) == 1, f"comparable panels on different y scales: {limits}"


def _grid_shape(fig) -> tuple[int, int]:
    rows, cols = fig.axes[0].get_subplotspec().get_gridspec().get_geometry()
    return rows, cols


def _rendered(path) -> None:  # noqa: ANN001
    data = path.read_bytes()
    assert data[:8] == PNG and len(data) > 10_000


# --- privacy-stats -----------------------------------------------------------------------------------


def test_privacy_stats_files_are_written(tmp_path):
    names = report.write_plots(_stats_table(), tmp_path, VOCAB, EMBEDDING)
    assert names == ["percentiles.png", "histograms.png"]
    for name in names:
        _rendered(tmp_path / name)
    # without what only the caller knows, the figures still carry K and the words
    assert report.write_plots(_stats_table(), tmp_path) == names


def test_percentiles_figure_reads_alone():
    fig = report.percentiles_figure(_stats_table(), VOCAB, EMBEDDING)
    _check_labels(fig)
    axes = _visible_axes(fig)
    assert len(axes) == 6 and _grid_shape(fig) == (2, 3)
    _same_ylim(axes)
    assert axes[0].get_ylim() == (0, K)
    assert "Nw" in axes[0].get_ylabel() and f"K = {K}" in axes[0].get_ylabel()
    title = _suptitle(fig)
    assert f"K = {K}" in title and f"{WORDS} words" in title and str(VOCAB) in title and EMBEDDING in title
    assert sorted(_legend_labels(fig)) == sorted(
        report.series_label("laplace" if lam == 0 else "mahalanobis", {"lambda": lam}) for lam in LAMS
    )


def test_histograms_figure_reads_alone():
    fig = report.histograms_figure(_stats_table(), VOCAB, EMBEDDING)
    _check_labels(fig)
    axes = _visible_axes(fig)
    assert len(axes) == 2 * len(EPS) and _grid_shape(fig) == (len(EPS), 2)
    _same_ylim(axes)
    assert {ax.get_xlim() for ax in axes} == {(0, K)}
    assert all(ax.get_ylabel() == "count of words" for ax in axes)
    assert f"K = {K}" in axes[0].get_xlabel()
    title = _suptitle(fig)
    assert f"K = {K}" in title and str(VOCAB) in title and EMBEDDING in title
    # one shared legend naming every setting; each drawn in its own colour
    assert sorted(_legend_labels(fig)) == sorted(
        report.series_label("laplace" if lam == 0 else "mahalanobis", {"lambda": lam}) for lam in LAMS
    )
    steps = [p for p in axes[0].patches if (p.get_label() or "").startswith(("laplace", "mahalanobis"))]
    assert len({tuple(p.get_edgecolor()) for p in steps}) == len(LAMS)


# --- evaluate-utility --------------------------------------------------------------------------------


@pytest.mark.parametrize("metrics", [utility.BINARY_METRICS, utility.MULTICLASS_METRICS])
def test_utility_figure_reads_alone(metrics):
    summary = _utility_summary(metrics)
    for mode in utility.MODES:
        fig = utility.utility_figure(summary, metrics, mode, "logistic", VOCAB, EMBEDDING, majority=0.866)
        _check_labels(fig)
        axes = _visible_axes(fig)
        assert len(axes) == len(metrics)
        rows, cols = _grid_shape(fig)
        assert cols <= 3 and rows * cols >= len(metrics) + 1  # a grid, not a 1×N strip
        _same_ylim(axes)
        (acc,) = [ax for ax in axes if ax.get_title() == "accuracy"]
        majority = [line for line in acc.get_lines() if "majority class" in line.get_label()]
        assert acc.get_ylim()[0] == 0 or majority
        assert majority and majority[0].get_ydata()[0] == pytest.approx(0.866)
        labels = _legend_labels(fig)
        assert any("majority class" in t for t in labels) and "non-private baseline" in labels
        # A line per setting, named as the tables name it.
        assert [t for t in labels if t.endswith("(mean, 95% CI band)")] == [
            f"{setting} (mean, 95% CI band)" for _, setting, _ in UTILITY_SETTINGS
        ]
        title = _suptitle(fig)
        assert mode in title and str(VOCAB) in title and EMBEDDING in title and "R = 3" in title


def test_utility_accuracy_axis_starts_at_zero_without_the_majority_share(tmp_path):
    summary = _utility_summary(utility.BINARY_METRICS)
    fig = utility.utility_figure(summary, utility.BINARY_METRICS, "train-time", "logistic")
    (acc,) = [ax for ax in _visible_axes(fig) if ax.get_title() == "accuracy"]
    assert acc.get_ylim()[0] == 0
    names = utility.write_plots(summary, utility.BINARY_METRICS, tmp_path, "logistic", VOCAB, EMBEDDING, 0.866)
    assert names == ["utility_train_time.png", "utility_test_time.png"]
    for name in names:
        _rendered(tmp_path / name)
    only = [s for s in summary if s["mode"] != "test-time"]
    assert utility.utility_figure(only, utility.BINARY_METRICS, "test-time", "logistic") is None


# --- privacy-risk ------------------------------------------------------------------------------------


def test_risk_figure_reads_alone(tmp_path):
    rows = _risk_rows()
    fig = risk.figure(rows, 123, VOCAB, EMBEDDING)
    _check_labels(fig)
    axes = _visible_axes(fig)
    assert len(axes) == 2
    _same_ylim(axes)
    assert axes[0].get_ylim() == (0, 1)
    title = _suptitle(fig)
    assert f"K = {K}" in title and "123 corpus words" in title and str(VOCAB) in title and EMBEDDING in title
    labels = _legend_labels(fig)
    assert "laplace, top-1 guess" in labels and "laplace, among top-5" in labels and "mahalanobis λ=1" in labels
    assert risk.write_plot(rows, tmp_path, 123, VOCAB, EMBEDDING) == "reidentification.png"
    _rendered(tmp_path / "reidentification.png")


# --- calibrate (joint) -------------------------------------------------------------------------------


def test_frontier_figure_reads_alone(tmp_path):
    points = {}
    for e in EPS:
        for lam in LAMS:
            p = 1 - math.exp(-e / (10 + 5 * lam))
            points[(e, lam)] = {"utility_loss": 0.2 * (1 - p), "reidentification": 0.1 + 0.8 * p}
    result = joint_calibrate(points, 0.1, 0.6)
    fig = report.frontier_figure(result, 0.1, 0.6)
    _check_labels(fig)
    labels = _legend_labels(fig)
    assert {"frontier", "utility bound", "re-identification bound"} <= set(labels)
    assert report.write_frontier_plot(result, tmp_path, 0.1, 0.6) == "frontier.png"
    _rendered(tmp_path / "frontier.png")


# --- evaluate-vectors and embedding-report -----------------------------------------------------------


def _approximation() -> pe.Approximation:
    rng = np.random.default_rng(2)
    errors = {}
    for d in (50, 300):
        for metric in pe.METRICS:
            for e in (1.0, 20.0):
                errors[(d, metric, e, "M1", None)] = rng.gamma(2, 10 / e, 25)
                for b in (0.5, 0.9):
                    errors[(d, metric, e, "M2", b)] = rng.gamma(2, 7 / e, 25)
    return pe.Approximation(rows=[], m={50: {0.5: 20, 0.9: 10}, 300: {0.5: 90, 0.9: 47}}, errors=errors)


def test_evaluate_vectors_figures_read_alone(tmp_path):
    approx = _approximation()
    for metric in pe.METRICS:
        fig = pe._figure(approx, metric, [1.0, 20.0], [0.5, 0.9], EMBEDDING)
        _check_labels(fig)
        assert _grid_shape(fig) == (2, 2)
        axes = np.array(_visible_axes(fig)).reshape(2, 2)
        for j in range(2):  # the same ε: the same scale for d = 50 and d = 300
            _same_ylim(axes[:, j])
        title = _suptitle(fig)
        assert EMBEDDING in title and "5 × 5" in title
        assert _legend_labels(fig) == ["M1 (no β; same at every β)", "M2"]
        pe._plot(approx, metric, [1.0, 20.0], [0.5, 0.9], tmp_path / f"{metric}.png", EMBEDDING)
        _rendered(tmp_path / f"{metric}.png")


def test_embedding_report_figure_reads_alone(tmp_path):
    x = np.random.default_rng(1).standard_normal((300, 6)).astype(np.float32)
    emb = Embeddings([f"w{i}" for i in range(len(x))], x, "test-emb", "0" * 64)
    r = er.embedding_report(emb, np.arange(300), lam=0.5, sample=40, seed=0)
    fig = er._figure(r)
    _check_labels(fig)
    title = _suptitle(fig)
    assert "test-emb" in title and "300 words" in title
    assert len(_legend_labels(fig)) >= 2
    er._plot(r, tmp_path / "embedding_report.png")
    _rendered(tmp_path / "embedding_report.png")
