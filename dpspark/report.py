"""Tables and plots of the privacy statistics, laid out like Xu et al. (2020) Tables 1–4
(rows λ, columns ε) and Figs. 2–5 (percentiles against ε, one line per λ), plus the
Nw/Sw histograms of Feyisetan et al. (2020) Fig. 2."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pyarrow as pa

from dpspark.mechanisms import (
    GUARANTEE_TYPES,
    LEGACY_COLUMN,
    REGISTRY,
    axis_names,
    lambda_of_series,
    series_label,
    series_of_lambda,
)
from dpspark.stats import PERCENTILES, summarise


def axis_column(values: list) -> pa.Array:
    """One axis column: float64 for numbers (null where the axis is not the setting's), else string."""
    if all(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in values):
        return pa.array(values, pa.float64())
    return pa.array([None if v is None else str(v) for v in values], pa.string())


def series_of(table: pa.Table) -> list[str]:
    """Each row's series. Tables written before the mechanism column are of the noise family:
    λ = 0 is the Laplace mechanism, λ > 0 Mahalanobis."""
    if "mechanism" not in table.column_names:
        return [series_of_lambda(lam) for lam in table.column(LEGACY_COLUMN).to_pylist()]
    axes = [a for a in axis_names() if a in table.column_names]
    values = [table.column(a).to_pylist() for a in axes]
    return [
        series_label(m, {a: v[i] for a, v in zip(axes, values)})
        for i, m in enumerate(table.column("mechanism").to_pylist())
    ]


def series_order(table: pa.Table) -> list[str]:
    """The series in a stable order: the registry's order of mechanisms, then their axes."""
    order = list(REGISTRY)
    return sorted(set(series_of(table)), key=lambda s: (order.index(s.split()[0]) if s.split()[0] in order else 99, s))


def grid(table: pa.Table) -> dict[tuple[float, str], tuple[np.ndarray, np.ndarray, int]]:
    """(ε, series) → (Nw per word, Sw per word, K) from a per_word table."""
    e = np.asarray(table.column("epsilon"))
    series = np.asarray(series_of(table), dtype=object)
    nw, sw, runs = (np.asarray(table.column(c)) for c in ("nw", "sw", "runs"))
    out = {}
    for key in sorted(set(zip(e.tolist(), series.tolist()))):
        m = (e == key[0]) & (series == key[1])
        out[key] = (nw[m], sw[m], int(runs[m][0]))
    return out


def _exact_means(table: pa.Table) -> dict[tuple[float, str], tuple[float, float]]:
    """(ε, series) → (mean exact E[Nw], mean exact E[Sw]) where the table has exact figures."""
    if "exact_nw" not in table.column_names:
        return {}
    e, series = table.column("epsilon").to_pylist(), series_of(table)
    acc: dict[tuple[float, str], list[list[float]]] = {}
    for i, (xn, xs) in enumerate(zip(table.column("exact_nw").to_pylist(), table.column("exact_sw").to_pylist())):
        if xn is not None:
            acc.setdefault((e[i], series[i]), []).append([xn, xs])
    return {k: tuple(np.mean(v, axis=0)) for k, v in acc.items()}


def summary_rows(table: pa.Table) -> list[dict]:
    exact = _exact_means(table)
    rows = []
    for (e, series), (nw, sw, k) in grid(table).items():
        m = series.split()[0]
        row = {"mechanism": m, "setting": series, "epsilon": e, "lambda": lambda_of_series(series), "runs": k}
        row.update(summarise(nw, sw))
        row["exact_nw_mean"], row["exact_sw_mean"] = exact.get((e, series), (None, None))
        rows.append(row)
    return rows


def guarantee_note(mechanism_names: list[str]) -> list[str]:
    """The sentence under every table that mixes guarantee types: their ε is not one scale."""
    types = sorted({REGISTRY[m].guarantee_type for m in mechanism_names if m in REGISTRY})
    if len(types) < 2:
        kind = types[0] if types else "metric"
        return [f"Every setting here has the same guarantee type ({kind}: {GUARANTEE_TYPES[kind]}).", ""]
    return [
        "ε of different guarantee types is not one scale: "
        + "; ".join(f"{t}: {GUARANTEE_TYPES[t]}" for t in types)
        + ". Compare them on the empirical figures (Nw, Sw, re-identification, utility), not on ε.",
        "",
    ]


def write_summary(table: pa.Table, out_dir: Path) -> list[dict]:
    """Write summary.csv (one row per setting) and summary.md (Tables like Xu et al.: a row per
    mechanism and its own parameters, a column per ε)."""
    rows = summary_rows(table)
    with open(out_dir / "summary.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    eps = sorted({r["epsilon"] for r in rows})
    order = series_order(table)
    by = {(r["epsilon"], r["setting"]): r for r in rows}
    k = rows[0]["runs"]
    words = rows[0]["words"]
    missing = "–"

    def table_md(title: str, cell) -> list[str]:  # noqa: ANN001
        lines = [
            f"### {title}",
            "",
            "| setting \\ ε | " + " | ".join(f"{e:g}" for e in eps) + " |",
            "|---|" + "---|" * len(eps),
        ]
        for series in order:
            cells = [cell(by[(e, series)]) if (e, series) in by else missing for e in eps]
            lines.append(f"| {series} | " + " | ".join(cells) + " |")
        return [*lines, ""]

    md = [f"# Privacy statistics: {words} words, K = {k} runs each", ""]
    md += table_md(
        "Nw: mean ± std (95% CI of the mean)",
        lambda r: f"{r['nw_mean']:.2f} ± {r['nw_std']:.2f} ({r['nw_ci_low']:.2f}–{r['nw_ci_high']:.2f})",
    )
    md += table_md(
        "Sw: mean ± std (95% CI of the mean)",
        lambda r: f"{r['sw_mean']:.2f} ± {r['sw_std']:.2f} ({r['sw_ci_low']:.2f}–{r['sw_ci_high']:.2f})",
    )
    md += table_md("Nw percentiles 5 / 50 / 95", lambda r: " / ".join(f"{r[f'nw_p{p}']:g}" for p in PERCENTILES))
    md += table_md("Sw percentiles 5 / 50 / 95", lambda r: " / ".join(f"{r[f'sw_p{p}']:g}" for p in PERCENTILES))
    md += table_md("Worst case: max Nw / min Sw", lambda r: f"{r['nw_max']:g} / {r['sw_min']:g}")
    if any(r["exact_nw_mean"] is not None for r in rows):
        md += table_md(
            "Exact E[Nw] / E[Sw] from the closed form (mean over words; Sw counts the word itself)",
            lambda r: missing if r["exact_nw_mean"] is None else f"{r['exact_nw_mean']:.2f} / {r['exact_sw_mean']:.2f}",
        )
    md += guarantee_note(sorted({r["mechanism"] for r in rows}))
    md += [
        "Smaller Nw (the word survives less often) and larger Sw (it turns into more distinct words) "
        "mean more plausible deniability.",
        "",
    ]
    (out_dir / "summary.md").write_text("\n".join(md), encoding="utf-8")
    return rows


def _subplots(rows: int, cols: int, figsize: tuple[float, float], **kw):  # noqa: ANN003, ANN202
    # The object-oriented API with the Agg canvas: no global backend switch (matplotlib.use)
    # that would change the caller's own plotting, no pyplot state.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.subplots(rows, cols, squeeze=False, **kw)


def legend_below(fig, handles: list, labels: list[str], title: str | None = None):  # noqa: ANN001, ANN201
    """One legend for the whole figure, centred below its panels. Save the figure with
    ``bbox_inches="tight"``: before matplotlib 3.7 (no "outside" locations) the legend hangs
    below the figure's edge and only the tight box keeps it."""
    kw = {"ncol": max(1, len(labels)), "title": title}
    try:
        return fig.legend(handles, labels, loc="outside lower center", **kw)
    except ValueError:  # matplotlib < 3.7
        return fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), **kw)


def about(k: int, words: int, vocab_size: int | None = None, embedding: str | None = None) -> str:
    """The line every privacy figure carries: K, the words measured, the vocabulary and the embedding."""
    text = f"K = {k} runs of each of {words} words"
    if vocab_size is not None:
        text += f"; vocabulary {vocab_size} words"
        if embedding:
            text += f" of {embedding}"
    elif embedding:
        text += f"; embedding {embedding}"
    return text


def axis_labels(k: int) -> dict[str, str]:
    """What Nw and Sw count, with their unit, for the axes."""
    return {
        "Nw": f"Nw (runs out of K = {k} that return the word itself)",
        "Sw": f"Sw (distinct words output in K = {k} runs)",
    }


def epsilon_axis(ax, eps: list[float]) -> None:  # noqa: ANN001
    """A log ε axis ticked at the grid's values (every report plots against ε this way)."""
    ax.set_xscale("log")
    ax.set_xticks(eps, [f"{e:g}" for e in eps])
    ax.minorticks_off()
    ax.set_xlabel("ε (log scale)")


def percentiles_figure(table: pa.Table, vocab_size: int | None = None, embedding: str | None = None):  # noqa: ANN201
    """The Figure of percentiles.png: rows Nw and Sw, a column per percentile, one line per λ,
    every panel on the same 0–K scale."""
    g = grid(table)
    eps = sorted({e for e, _ in g})
    lams = series_order(table)
    k = next(iter(g.values()))[2]
    words = len(next(iter(g.values()))[0])
    label = axis_labels(k)
    fig, axes = _subplots(2, len(PERCENTILES), (3.8 * len(PERCENTILES), 7.4), sharex=True, sharey=True)
    for row, (name, idx) in enumerate((("Nw", 0), ("Sw", 1))):
        for col, p in enumerate(PERCENTILES):
            ax = axes[row][col]
            for lam in lams:
                pts = [e for e in eps if (e, lam) in g]
                ax.plot(pts, [np.percentile(g[(e, lam)][idx], p) for e in pts], marker="o", label=lam)
            epsilon_axis(ax, eps)
            ax.tick_params(labelbottom=True, labelleft=True)  # every panel keeps its scale when shared
            ax.set_ylabel(label[name], fontsize=8)
            ax.set_ylim(0, k)
            ax.set_title(f"{name}, {p}th percentile over words")
            ax.grid(alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    legend_below(fig, handles, labels, "setting")
    fig.suptitle(
        f"Nw and Sw percentiles against ε\n{about(k, words, vocab_size, embedding)}\n"
        "Smaller Nw and larger Sw: more plausible deniability"
    )
    return fig


def histograms_figure(table: pa.Table, vocab_size: int | None = None, embedding: str | None = None):  # noqa: ANN201
    """The Figure of histograms.png: a row per ε, columns Nw and Sw, a step histogram per λ
    in its own colour, every panel on the same axes (0–K, count of words)."""
    g = grid(table)
    eps = sorted({e for e, _ in g})
    lams = series_order(table)
    k = next(iter(g.values()))[2]
    words = len(next(iter(g.values()))[0])
    label = axis_labels(k)
    bins = np.linspace(0, k, 21)
    fig, axes = _subplots(len(eps), 2, (10, 2.4 * len(eps) + 1.2), sharex=True, sharey=True)
    styles = ("-", "--", "-.", ":")
    for row, e in enumerate(eps):
        for col, (name, idx) in enumerate((("Nw", 0), ("Sw", 1))):
            ax = axes[row][col]
            for i, lam in enumerate(lams):
                if (e, lam) not in g:
                    continue
                color = f"C{i % 10}"
                ax.hist(g[(e, lam)][idx], bins=bins, histtype="stepfilled", color=color, alpha=0.15)
                ax.hist(
                    g[(e, lam)][idx],
                    bins=bins,
                    histtype="step",
                    color=color,
                    linewidth=1.8,
                    linestyle=styles[i % len(styles)],
                    label=lam,
                )
            ax.set_xlim(0, k)
            ax.tick_params(labelbottom=True, labelleft=True)  # every panel keeps its scale when shared
            ax.set_xlabel(label[name], fontsize=8)
            ax.set_ylabel("count of words")
            ax.set_title(f"{name} at ε = {e:g}")
            ax.grid(alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    legend_below(fig, handles, labels, "setting")
    fig.suptitle(f"Distribution of Nw and Sw over words\n{about(k, words, vocab_size, embedding)}")
    return fig


def write_plots(
    table: pa.Table, out_dir: Path, vocab_size: int | None = None, embedding: str | None = None
) -> list[str]:
    """percentiles.png (Nw and Sw percentiles vs ε per λ) and histograms.png (per ε, per λ).

    ``vocab_size`` and ``embedding`` (its name) go into the titles when given."""
    percentiles_figure(table, vocab_size, embedding).savefig(out_dir / "percentiles.png", dpi=110, bbox_inches="tight")
    histograms_figure(table, vocab_size, embedding).savefig(out_dir / "histograms.png", dpi=110, bbox_inches="tight")
    return ["percentiles.png", "histograms.png"]


def calibration_md(result: dict, bounds_text: str) -> str:
    lines = ["# Calibration", "", f"Bounds: {bounds_text}.", ""]
    for r in result["per_setting"]:
        chosen = "none" if r["epsilon"] is None else f"{r['epsilon']:g}"
        lines.append(f"## {r['setting']}: largest ε meeting the bounds = {chosen}")
        lines.append("")
        lines.append("| ε | Nw statistic | Sw statistic | K | meets |")
        lines.append("|---|---|---|---|---|")
        for c in r["checked"]:
            lines.append(
                f"| {c['epsilon']:g} | {c['nw_stat']:g} | {c['sw_stat']:g} | {c['runs']} | "
                + ("yes |" if c["met"] else "no |")
            )
        lines.append("")
    best = result["best"]
    if best is None:
        lines.append("**No ε in the grid meets these bounds for any setting.** Try smaller ε values or looser bounds.")
    else:
        lines.append(
            f"**Choice: {best['setting']}, ε = {best['epsilon']:g}** — the setting that admits the largest ε "
            "(on a tie, the larger λ: elliptical noise gives lower Nw at equal ε, Xu et al. Tables 1–4). "
            "Between mechanisms of different guarantee types ε is not one scale: compare their Nw and Sw."
        )
    return "\n".join(lines) + "\n"


def frontier_md(result: dict, bounds_text: str) -> str:
    """The privacy–utility frontier as a table (one row per setting and ε) and the choice."""
    pct = lambda x: "–" if x is None else f"{100 * x:.2f}"  # noqa: E731
    flag = lambda x: "–" if x is None else ("yes" if x else "no")  # noqa: E731
    lines = ["# Joint calibration: privacy–utility frontier", "", f"Bounds: {bounds_text}.", ""]
    lines += [
        "| setting | ε | utility loss (percentage points) | re-identification top-1 (%) | Nw/Sw bounds met "
        "| meets all | frontier |"
    ]
    lines += ["|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        lines.append(
            f"| {r['setting']} | {r['epsilon']:g} | {pct(r['utility_loss'])} | {pct(r['reidentification'])} | "
            f"{flag(r['nw_sw_met'])} | {flag(r['met'])} | {'*' if r['frontier'] else ''} |"
        )
    lines.append("")
    lines += guarantee_note(sorted({r["mechanism"] for r in result["rows"]}))
    best = result["best"]
    if best is None:
        from dpspark.stats import feasible_region

        hint = feasible_region(result["rows"], result.get("max_utility_loss"), result.get("max_reidentification"))
        lines.append(f"**No setting and ε of the grid meets these bounds.** {hint}")
    else:
        lines.append(
            f"**Choice: {best['setting']}, ε = {best['epsilon']:g}**: the most private setting meeting every bound "
            "(the smallest ε within one mechanism or the λ grid, at equal ε the lower re-identification, else the "
            "larger λ, Xu et al. §6; across other mechanisms the lowest re-identification)."
        )
    return "\n".join(lines) + "\n"


def frontier_figure(result: dict, max_utility_loss: float | None, max_reid: float | None):  # noqa: ANN201
    """The Figure of ``frontier.png`` (see ``write_frontier_plot``)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    rows = result["rows"]
    use_risk = all(r["reidentification"] is not None for r in rows)
    x_of = (lambda r: r["reidentification"]) if use_risk else (lambda r: r["epsilon"])
    y_of = lambda r: r["utility_loss"] if r["utility_loss"] is not None else 0.0  # noqa: E731
    fig = Figure(figsize=(6, 4.2))
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    for setting in dict.fromkeys(r["setting"] for r in rows):
        pts = [r for r in rows if r["setting"] == setting]
        ax.scatter([x_of(r) for r in pts], [y_of(r) for r in pts], label=setting, alpha=0.8)
        for r in pts:
            ax.annotate(f"{r['epsilon']:g}", (x_of(r), y_of(r)), fontsize=6, xytext=(3, 3), textcoords="offset points")
    front = sorted((r for r in rows if r["frontier"]), key=x_of)
    ax.plot([x_of(r) for r in front], [y_of(r) for r in front], color="black", linewidth=1, label="frontier")
    if max_utility_loss is not None:
        ax.axhline(max_utility_loss, color="grey", linestyle="--", linewidth=1, label="utility bound")
    if max_reid is not None and use_risk:
        ax.axvline(max_reid, color="grey", linestyle=":", linewidth=1, label="re-identification bound")
    best = result["best"]
    if best is not None:
        (b,) = [r for r in rows if (r["epsilon"], r["setting"]) == (best["epsilon"], best["setting"])]
        ax.scatter([x_of(b)], [y_of(b)], marker="*", s=200, color="gold", edgecolor="black", label="choice", zorder=5)
    ax.set_xlabel("re-identification: top-1 share of corpus tokens (0–1)" if use_risk else "ε")
    ax.set_ylabel("utility loss: baseline − mean of the metric (0–1 scale)")
    ax.set_title("Privacy–utility frontier (point labels: ε)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def write_frontier_plot(result: dict, out_dir: Path, max_utility_loss: float | None, max_reid: float | None) -> str:
    """``frontier.png``: utility loss against re-identification (or ε), one marker series per setting,
    the bounds dashed, the frontier joined, the choice starred."""
    frontier_figure(result, max_utility_loss, max_reid).savefig(out_dir / "frontier.png", dpi=110)
    return "frontier.png"


def write_frontier_csv(result: dict, out_dir: Path) -> str:
    with open(out_dir / "frontier.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(result["rows"][0]))
        writer.writeheader()
        writer.writerows(result["rows"])
    return "frontier.csv"
