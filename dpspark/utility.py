"""Downstream utility of perturbed text: metrics, confidence intervals, tables and plots.

Pure numpy (and matplotlib for the plots); the Spark job is ``dpspark.spark.utility``.

Xu et al. (2020) §5.2 train text classifiers on perturbed SMSSpam/Twitter data and plot
accuracy, precision and recall against ε per setting (Figs. 6–7); Feyisetan et al. (2020) §5
separate **train-time** utility (train on perturbed text, test on plain) from
**test-time** utility (train on plain text, test on perturbed). Each setting of the grid
(a mechanism with its own parameters, ``report.series_label``, at one ε) is run R times
with independent noise; a metric is reported as its mean over the R runs with a 95%
Student-t interval (R − 1 degrees of freedom): the spread of the noise, the split being
fixed. The non-private baseline (plain train, plain test) is one run: it has no noise to
average over. Tables have a row per setting and a column per ε; ε of mechanisms of
different guarantee types is not one scale (``report.guarantee_note``).

Binary labels give accuracy, precision, recall, F1 and ROC AUC of the positive class
(the last label in sorted order: 1, true, "spam") and macro-F1; more classes give accuracy and
macro-F1.

Beside every accuracy stands the test split's **majority-class rate**: the accuracy of a model that
learned nothing and predicts the most frequent class for every row (88% on SMS spam, whose rows are
mostly "ham"). A setting, or the baseline, **beats the majority class** when the lower end of its
accuracy's 95% interval lies above that rate (``beats_majority``): the interval being the wider of the
repeats' t-interval and the Wilson interval of the mean accuracy over the test rows (the split's own
sampling error, which a single run or a fixed split still has). One that does not is marked: its
utility says nothing about the mechanism.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dpspark.engine import classification
from dpspark.errors import InputDataError

BINARY_METRICS = ("accuracy", "precision", "recall", "f1", "auc", "macro_f1")
MULTICLASS_METRICS = ("accuracy", "macro_f1")
MODES = ("train-time", "test-time")
BASELINE = "baseline"
MODE_TEXT = {"train-time": "train on perturbed, test on plain", "test-time": "train on plain, test on perturbed"}

# t_{0.975, df} for df = 1..30 (beyond: a Cornish–Fisher expansion).
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


SPLIT_METHOD = "keyed hash of (class, text): BLAKE2b keyed by split_seed, a row in test when below test_fraction"


def in_test(texts: Sequence[str | None], labels: Sequence[float], seed: int, fraction: float) -> np.ndarray:
    """The labelled split, a pure function of each row (``SPLIT_METHOD``): the same rows on every engine and
    partitioning, and a text repeated under one class always on one side (no copy of a test row in train)."""
    key = int(seed).to_bytes(8, "little", signed=True)
    out = np.empty(len(texts), dtype=bool)
    for i, (text, label) in enumerate(zip(texts, labels)):
        data = int(label).to_bytes(4, "little") + (text or "").encode("utf-8", "surrogatepass")
        h = int.from_bytes(hashlib.blake2b(data, key=key, digest_size=8).digest(), "little")
        out[i] = h < fraction * 2.0**64
    return out


MAX_CLASSES = 1000


def check_classes(rows: Sequence[tuple[Any, int]], label: str) -> list[int]:
    """The order of the label column's (value, rows) pairs by value (the class indices; the last class is the
    positive one of binary metrics), after the refusals: a null or NaN value, one class, over MAX_CLASSES."""
    missing = [n for v, n in rows if v is None or (isinstance(v, float) and math.isnan(v))]
    if missing:
        raise InputDataError(
            f"label column {label!r} has {sum(missing)} null or NaN value(s): drop or label those rows first (every "
            "row needs a class)"
        )
    if len(rows) < 2:
        only = f"only the value {rows[0][0]!r}" if rows else "no rows"
        raise InputDataError(
            f"label column {label!r} has {only}: a classifier needs at least two classes; check --label-column"
        )
    if len(rows) > MAX_CLASSES:
        raise InputDataError(
            f"label column {label!r} has {len(rows)} distinct values (at most {MAX_CLASSES}): is it really a label?"
        )
    return sorted(range(len(rows)), key=lambda i: rows[i][0])


def check_split(counts: dict[str, dict[int, int]], values: Sequence, rows: int, fraction: float) -> None:
    """Every class in both halves (``counts``: half → class index → rows), else one sentence naming the fix."""
    missing = [(name, values[k]) for name in ("train", "test") for k in range(len(values)) if not counts[name].get(k)]
    if missing:
        name, value = missing[0]
        raise InputDataError(
            f"too few rows for the split: {rows} rows with test fraction {fraction:g} give "
            f"{sum(counts['train'].values())} train and {sum(counts['test'].values())} test rows, and the {name} split "
            f"has no row of class {value!r}; every class needs rows in both splits (rows of a class with the same text "
            "always fall on the same side): give more rows with distinct texts (tens per class at least) or change "
            "--test-fraction"
        )


def metric_names(n_classes: int) -> tuple[str, ...]:
    return BINARY_METRICS if n_classes == 2 else MULTICLASS_METRICS


def t_quantile(df: int) -> float:
    """The 97.5% quantile of Student's t with ``df`` degrees of freedom (two-sided 95%)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be at least 1, got {df}")
    if df <= len(_T975):
        return _T975[df - 1]
    z = 1.959964  # beyond the table: the first Cornish–Fisher term, within 0.1% for df > 30
    return z + (z**3 + z) / (4 * df)


def mean_ci(values: Sequence[float]) -> tuple[float, float, float]:
    """(mean, low, high): the 95% t-interval of the mean; a single value has a zero-width interval."""
    x = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=np.float64)
    if len(x) == 0:
        return math.nan, math.nan, math.nan
    mean = float(x.mean())
    if len(x) == 1:
        return mean, mean, mean
    half = t_quantile(len(x) - 1) * float(x.std(ddof=1)) / math.sqrt(len(x))
    return mean, mean - half, mean + half


def wilson_low(share: float, rows: int, z: float = 1.959964) -> float:
    """The lower end of the two-sided 95% Wilson score interval of a share measured on ``rows`` rows."""
    if rows <= 0 or not math.isfinite(share):
        return math.nan
    centre = share + z * z / (2 * rows)
    half = z * math.sqrt(share * (1 - share) / rows + z * z / (4 * rows * rows))
    return (centre - half) / (1 + z * z / rows)


def beats_majority(accuracy: float, low: float, majority: float | None, rows: int | None) -> bool | None:
    """Whether an accuracy (mean ``accuracy``, the repeats' 95% lower end ``low``) is above the majority-class
    rate beyond its noise: the lower of ``low`` and the Wilson lower end over ``rows`` test rows lies above
    ``majority`` (the module docstring). None where the rate is not known (outputs of an older dpspark)."""
    if majority is None or rows is None or accuracy is None or not math.isfinite(accuracy):
        return None
    return min(low, wilson_low(accuracy, int(rows))) > majority


def majority_macro_f1(majority: float, n_classes: int) -> float:
    """The macro-F1 of always predicting the majority class: F1 2m/(1 + m) on that class, 0 on the others."""
    return 2 * majority / (1 + majority) / n_classes


def auc(y: np.ndarray, score: np.ndarray) -> float:
    """ROC AUC of binary labels ``y`` (1 positive) against ``score``: the Mann–Whitney
    statistic with tied scores counted one half (NaN when a class is absent)."""
    return classification.auc(classification.create(y, y, score))


def classification_metrics(
    y: np.ndarray, prediction: np.ndarray, score: np.ndarray | None, n_classes: int
) -> dict[str, float]:
    """Metrics of class indices ``prediction`` against ``y`` (0..n_classes−1), in one pass of the
    combiner ``dpspark.engine.classification`` (binary: accuracy, precision, recall, F1 of class 1,
    AUC of ``score``, the probability of class 1, and macro-F1; more classes: accuracy and macro-F1)."""
    return classification.finish(classification.create(y, prediction, score), n_classes)


def setting_of(row: dict) -> str | None:
    """The row's setting without ε (``report.series_label``, e.g. ``laplace``, ``tem β=0.001``);
    None for the baseline. Rows written before the setting column are of the noise family, named by
    ``dpspark.mechanisms.series_of_row``."""
    if row["mode"] == BASELINE:
        return None
    from dpspark.mechanisms import series_of_row

    return series_of_row(row)


def mechanism_of(row: dict) -> str | None:
    """The row's mechanism (None for the baseline); rows without the column are of the noise family."""
    setting = setting_of(row)
    return None if setting is None else (row.get("mechanism") or setting.split()[0])


def settings_of(rows: Sequence[dict]) -> list[str]:
    """The settings of ``rows`` (baseline left out) in the order they first appear."""
    return [s for s in dict.fromkeys(setting_of(r) for r in rows) if s is not None]


def summarise(rows: list[dict], metrics: Sequence[str]) -> list[dict]:
    """One row per (mode, setting, ε): for each metric its mean, 95% CI (low, high) over the repeats.

    ``rows``: the results, one per (mode, setting, ε, repeat), with the metric values, the
    mechanism, the setting (``report.series_label``) and one column per grid axis
    (``report.axis_names``; None where it is not the setting's); rows without ``setting`` are read
    by ``setting_of``. The baseline row has mode ``baseline`` and no setting, ε or axis. Every
    metric lies in [0, 1], so the t-interval (which with R = 3 can pass those limits) is
    clipped to it. Rows come out by mode, then setting (in order of first appearance), then ε.
    Rows that carry the test split's ``majority_rate`` and ``test_rows`` (``Model.score``'s) give each
    summary row those and ``beats_majority`` (None without them).
    """
    from dpspark.report import axis_names

    order = {s: i for i, s in enumerate(settings_of(rows))}
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["mode"], setting_of(r), r["epsilon"]), []).append(r)
    axes = axis_names()
    out = []
    for (mode, setting, e), rs in sorted(
        groups.items(), key=lambda kv: (kv[0][0], order.get(kv[0][1], -1), kv[0][2] or 0)
    ):
        first = rs[0]
        s: dict = {"mode": mode, "mechanism": mechanism_of(first), "setting": setting, "epsilon": e}
        s.update({a: first.get(a) for a in axes})
        s["repeats"] = len(rs)
        for m in metrics:
            mean, low, high = mean_ci([r[m] for r in rs])
            s[f"{m}_mean"], s[f"{m}_low"], s[f"{m}_high"] = mean, max(low, 0.0), min(high, 1.0)
        for k in ("majority_rate", "majority_class", "test_rows"):
            s[k] = first.get(k)
        acc = (s["accuracy_mean"], s["accuracy_low"]) if "accuracy" in metrics else (None, None)
        s["beats_majority"] = beats_majority(*acc, s["majority_rate"], s["test_rows"])
        out.append(s)
    return out


NOT_ABOVE = "†"  # marks an accuracy that does not beat the majority class


def majority_lines(summary: list[dict], n_classes: int, label: str | None = None) -> list[str]:
    """summary.md's lines on the majority class: its rate and macro-F1, whether the baseline beats it,
    and, where no setting does, that these figures cannot tell the settings apart."""
    base = baseline_of(summary)
    rate = base.get("majority_rate")
    if rate is None:
        return []
    named = f" ({label!r})" if label is not None else ""
    lines = [
        f"Majority class of the test split{named}: {100 * rate:.1f}% of its {base['test_rows']} rows, the accuracy "
        f"of always predicting it (macro F1 {majority_macro_f1(rate, n_classes):.4f}). {NOT_ABOVE} marks an "
        "accuracy that does not beat it: the lower end of its 95% interval (the repeats' t-interval or the Wilson "
        "interval over the test rows, the lower) is at or below that rate."
    ]
    settings = [s for s in summary if s["mode"] != BASELINE]
    if base.get("beats_majority") is False:
        lines.append(
            f"**The non-private baseline does not beat the majority class** (accuracy {base['accuracy_mean']:.4f}): "
            "the classifier learned nothing it can show on this data, so no utility figure here says anything about "
            "the mechanisms; use more rows, or a model or labels it can learn."
        )
    elif settings and not any(s["beats_majority"] for s in settings):
        lines.append(
            "**No setting beats the majority class**: trained or tested on perturbed text the classifier learned "
            "nothing it can show, so these figures cannot tell the settings apart; use more rows, a larger "
            "vocabulary (--vocab-size) or larger ε."
        )
    return lines


def baseline_of(summary: list[dict]) -> dict:
    (base,) = [s for s in summary if s["mode"] == BASELINE]
    return base


def summary_md(
    summary: list[dict],
    metrics: Sequence[str],
    title: str,
    notes: Sequence[str] = (),
    n_classes: int = 2,
    majority_label: str | None = None,
) -> str:
    """Tables as in Xu et al.'s figures: a row per setting (mechanism and its own parameters),
    columns ε, a cell "mean (low–high)", per mode and metric, an accuracy that does not beat the
    majority class marked; the guarantee note under them, then each setting against the Laplace
    mechanism."""
    from dpspark.report import guarantee_note

    base = baseline_of(summary)
    lines = [f"# {title}", ""]
    mark = f" {NOT_ABOVE}" if base.get("beats_majority") is False else ""
    lines.append(
        "Non-private baseline (plain train, plain test): "
        + ", ".join(f"{m} {base[f'{m}_mean']:.4f}" + (mark if m == "accuracy" else "") for m in metrics)
        + "."
    )
    lines += ["", *majority_lines(summary, n_classes, majority_label)]
    lines += ["", *notes, ""] if notes else [""]
    for mode in MODES:
        rows = [s for s in summary if s["mode"] == mode]
        if not rows:
            continue
        eps = sorted({s["epsilon"] for s in rows})
        settings = settings_of(rows)
        by = {(s["epsilon"], setting_of(s)): s for s in rows}
        repeats = rows[0]["repeats"]
        over = f"mean over R = {repeats} (95% CI)" if repeats > 1 else "R = 1 perturbation (no interval)"
        for m in metrics:
            lines += [
                f"## {mode} {m} ({MODE_TEXT[mode]}): {over}; baseline {base[f'{m}_mean']:.4f}",
                "",
                "| setting \\ ε | " + " | ".join(f"{e:g}" for e in eps) + " |",
                "|---|" + "---|" * len(eps),
            ]
            for setting in settings:
                cells = []
                for e in eps:
                    s = by.get((e, setting))
                    marked = m == "accuracy" and s is not None and s.get("beats_majority") is False
                    cells.append("–" if s is None else cell(s, m) + (f" {NOT_ABOVE}" if marked else ""))
                lines.append(f"| {setting} | " + " | ".join(cells) + " |")
            lines.append("")
    measured = [s for s in summary if s["mode"] != BASELINE]
    lines += guarantee_note(sorted({mechanism_of(s) for s in measured}))
    lines += against_laplace(summary, metrics)
    return "\n".join(lines)


def cell(s: dict, metric: str) -> str:
    """A table cell: "mean (low–high)", or the mean alone for a single perturbation (no interval)."""
    mean = f"{s[f'{metric}_mean']:.4f}"
    return mean if s["repeats"] < 2 else f"{mean} ({s[f'{metric}_low']:.4f}–{s[f'{metric}_high']:.4f})"


def separated(a: dict, b: dict, metric: str) -> bool:
    """Whether the 95% CIs of ``metric`` in two summary rows do not overlap (Xu et al. §5's
    test of a significant difference: comparing the intervals)."""
    return a[f"{metric}_high"] < b[f"{metric}_low"] or b[f"{metric}_high"] < a[f"{metric}_low"]


LAPLACE = "laplace"  # the Laplace mechanism's setting (``report.series_label``): the reference of the comparison


def against_laplace(summary: list[dict], metrics: Sequence[str]) -> list[str]:
    """Markdown lines: for each mode and each setting other than the Laplace mechanism, the
    (metric, ε) whose 95% CI does not overlap the Laplace mechanism's at the same ε (Xu et al.'s
    claim for the Mahalanobis mechanism is that there are none). No lines when the grid has no Laplace setting or
    nothing else."""
    lines = []
    other_types = False
    for mode in MODES:
        rows = [s for s in summary if s["mode"] == mode]
        types = _guarantee_types(rows)
        by = {(s["epsilon"], setting_of(s)): s for s in rows}
        eps = sorted({e for e, _ in by})
        if not any(setting == LAPLACE for _, setting in by):
            continue
        for setting in settings_of(rows):
            if setting == LAPLACE:
                continue
            other_types |= types[setting] != types[LAPLACE]
            diffs = [
                f"{m} at ε = {e:g} ({by[(e, setting)][f'{m}_mean']:.4f} vs {by[(e, LAPLACE)][f'{m}_mean']:.4f})"
                for m in metrics
                for e in eps
                if (e, setting) in by and (e, LAPLACE) in by and separated(by[(e, setting)], by[(e, LAPLACE)], m)
            ]
            common = [e for e in eps if (e, setting) in by and (e, LAPLACE) in by]
            if not common:
                text = "no ε in common with laplace"
            elif any(min(by[(e, setting)]["repeats"], by[(e, LAPLACE)]["repeats"]) < 2 for e in common):
                text = "no interval to compare with R = 1 (run --repeats 2 or more)"
            else:
                text = "; ".join(diffs) or "none: every interval overlaps"
            lines.append(f"- {mode}, {setting}: {text}")
    if not lines:
        return []
    if all("no interval to compare" in line for line in lines):
        lines = ["- no interval to compare with R = 1 perturbation per setting (run --repeats 2 or more)"]
    head = ["## Each setting against Laplace at the same ε: 95% CIs that do not overlap", ""]
    if other_types:
        head += [
            "Settings of another guarantee type than Laplace's (metric DP) do not share its scale of ε: "
            "for them this compares utility at equal nominal ε, not at equal privacy.",
            "",
        ]
    return [*head, *lines, ""]


def _figure(rows: int, cols: int, figsize: tuple[float, float], **kw):  # noqa: ANN003, ANN202
    # The object-oriented API with the Agg canvas: no global backend switch, no pyplot state.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.subplots(rows, cols, squeeze=False, **kw)


METRIC_LABELS = {
    "accuracy": "accuracy: share of test rows right",
    "precision": "precision of the positive class",
    "recall": "recall of the positive class",
    "f1": "F1 of the positive class",
    "auc": "ROC AUC",
    "macro_f1": "macro-F1: mean F1 over classes",
}


def _guarantee_types(rows: Sequence[dict]) -> dict[str, str]:
    """setting → its mechanism's guarantee type (``metric`` for a mechanism the registry does not know)."""
    from dpspark.mechanisms import REGISTRY

    out = {}
    for r in rows:
        spec = REGISTRY.get(mechanism_of(r) or "")
        out.setdefault(setting_of(r), spec.guarantee_type if spec is not None else "metric")
    return out


def utility_figure(  # noqa: ANN201
    summary: list[dict],
    metrics: Sequence[str],
    mode: str,
    model: str,
    vocab_size: int | None = None,
    embedding: str | None = None,
    majority: float | None = None,
):
    """The Figure of ``utility_<mode>.png`` (None when ``mode`` has no rows): a panel per metric
    in a grid of three columns, every panel on the same 0–1 scale, one line per setting (mechanism
    and its own parameters; dashed for settings whose guarantee type is not metric DP) with its
    95% CI band, the baseline dashed, the test split's majority-class rate (``majority``, a share) dotted
    on the accuracy panel, chance (0.5) on the AUC panel, and one legend in the grid's spare cell."""
    from dpspark.report import epsilon_axis

    base = baseline_of(summary)
    rows = [s for s in summary if s["mode"] == mode]
    if not rows:
        return None
    settings = settings_of(rows)
    types = _guarantee_types(rows)
    eps = sorted({s["epsilon"] for s in rows})
    band = "mean, 95% CI band" if rows[0]["repeats"] > 1 else "one perturbation, no interval"
    cells = len(metrics) + 1  # the last cell holds the legend
    ncols = min(3, cells)
    nrows = math.ceil(cells / ncols)
    fig, axes = _figure(nrows, ncols, (4.2 * ncols, 3.6 * nrows + 0.8), sharey=True)
    flat = [ax for row in axes for ax in row]
    for ax, m in zip(flat, metrics):
        for i, setting in enumerate(settings):
            pts = sorted((s for s in rows if setting_of(s) == setting), key=lambda s: s["epsilon"])
            e = [s["epsilon"] for s in pts]
            line = ax.plot(
                e,
                [s[f"{m}_mean"] for s in pts],
                marker="o",
                color=f"C{i % 10}",
                linestyle="-" if types[setting] == "metric" else "-.",
                label=f"{setting} ({band})",
            )[0]
            # Every metric lives in [0, 1]: the band is clipped there (the table keeps the t-interval).
            low = np.clip([s[f"{m}_low"] for s in pts], 0, 1)
            high = np.clip([s[f"{m}_high"] for s in pts], 0, 1)
            ax.fill_between(e, low, high, color=line.get_color(), alpha=0.2)
        ax.axhline(base[f"{m}_mean"], color="black", linestyle="--", linewidth=1, label="non-private baseline")
        if m == "accuracy" and majority is not None:
            ax.axhline(
                majority,
                color="dimgray",  # outside the settings' colour cycle
                linestyle=":",
                linewidth=1.5,
                label=f"majority class, always predicted: {100 * majority:.1f}% of the test split",
            )
        if m == "auc":
            ax.axhline(0.5, color="grey", linestyle=":", linewidth=1.5, label="chance (AUC 0.5)")
        epsilon_axis(ax, eps)
        ax.set_ylim(0, 1)
        ax.tick_params(labelleft=True)  # every panel keeps its scale when shared
        ax.set_ylabel(f"{METRIC_LABELS.get(m, m)} (0–1)", fontsize=8)
        ax.set_title(m)
        ax.grid(alpha=0.3)
    handles: dict[str, object] = {}
    for ax in flat[: len(metrics)]:
        for h, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, h)
    spare = flat[len(metrics)]
    spare.axis("off")
    spare.legend(list(handles.values()), list(handles), loc="center", fontsize=8, title="series")
    for ax in flat[len(metrics) + 1 :]:
        fig.delaxes(ax)
    parts = [f"R = {rows[0]['repeats']} perturbations per setting and ε"]
    if vocab_size is not None:
        parts.append(f"vocabulary {vocab_size} words" + (f" of {embedding}" if embedding else ""))
    elif embedding:
        parts.append(f"embedding {embedding}")
    title = f"{model}, {mode} ({MODE_TEXT.get(mode, mode)})\n" + "; ".join(parts)
    kinds = sorted(set(types.values()))
    if len(kinds) > 1:
        title += f"\nguarantee types {', '.join(kinds)} (dash-dot: not metric DP): ε is not one scale across them"
    fig.suptitle(title)
    return fig


def write_plots(
    summary: list[dict],
    metrics: Sequence[str],
    out_dir: Path,
    model: str,
    vocab_size: int | None = None,
    embedding: str | None = None,
    majority: float | None = None,
) -> list[str]:
    """``utility_<mode>.png`` per mode: each metric against ε, one line per setting with its 95% CI band,
    the baseline as a dashed line (Xu et al. Figs. 6–7); see ``utility_figure``."""
    files = []
    for mode in MODES:
        fig = utility_figure(summary, metrics, mode, model, vocab_size, embedding, majority)
        if fig is None:
            continue
        name = f"utility_{mode.replace('-', '_')}.png"
        fig.savefig(out_dir / name, dpi=110)
        files.append(name)
    return files


def utility_loss_by_setting(
    summary: list[dict], metric: str, modes: Sequence[str] = MODES
) -> dict[tuple[float, str], float]:
    """(ε, setting) → baseline minus mean ``metric``, the larger over ``modes`` present (the bound's
    quantity), for every setting of the grid (``setting_of``: e.g. ``laplace``, ``tem β=0.001``).

    A missing or NaN figure of any mode makes the point's loss NaN (``max`` would drop it), so
    that the point meets no bound."""
    base = baseline_of(summary)[f"{metric}_mean"]
    losses: dict[tuple[float, str], list[float]] = {}
    for s in summary:
        if s["mode"] in modes:
            value = s[f"{metric}_mean"]
            loss = math.nan if base is None or value is None else base - value
            losses.setdefault((s["epsilon"], setting_of(s)), []).append(loss)
    return {key: math.nan if any(map(math.isnan, v)) else max(v) for key, v in losses.items()}
