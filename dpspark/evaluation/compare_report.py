"""The report of ``dpspark compare``: one document a reviewer signs (``report.md`` and a
self-contained ``report.html``), and its frontier plot.

The report is built once as a list of sections (a title, paragraphs, tables, images) and
rendered twice: Markdown beside the PNG, and HTML with the PNG embedded as a data URI, so the
HTML file opens anywhere with no other file and no link outside it. Pure Python and
matplotlib (Agg through ``matplotlib.figure.Figure``): no Spark here.
"""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dpspark.evaluation import field_metrics as fm
from dpspark.evaluation.compare_analysis import Analysis
from dpspark.mechanisms import GUARANTEE_TYPES, REGISTRY
from dpspark.utility import majority_macro_f1

MODES = ("train-time", "test-time")


@dataclass
class Table:
    header: list[str]
    rows: list[list[str]]


@dataclass
class Section:
    title: str
    paragraphs: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    images: list[tuple[str, str]] = field(default_factory=list)  # (file name, alt text)
    after: list[str] = field(default_factory=list)  # paragraphs below the tables


def pct(x: float | None, digits: int = 1) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.{digits}f}"


def with_ci(x: float | None, lo: float | None, hi: float | None, digits: int = 1) -> str:
    """A share as a percentage with its 95% interval: ``54.3 (52.1–56.4)``; exact figures (lo = hi = x) bare."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if lo is None or hi is None or (lo == x == hi):
        return pct(x, digits)
    return f"{pct(x, digits)} ({pct(lo, digits)}–{pct(hi, digits)})"


def render_md(title: str, sections: Sequence[Section]) -> str:
    lines = [f"# {title}", ""]
    for s in sections:
        lines += [f"## {s.title}", ""]
        for p in s.paragraphs:
            lines += [p, ""]
        for t in s.tables:
            lines.append("| " + " | ".join(t.header) + " |")
            lines.append("|" + "---|" * len(t.header))
            lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in t.rows]
            lines.append("")
        for name, alt in s.images:
            lines += [f"![{alt}]({name})", ""]
        for p in s.after:
            lines += [p, ""]
    return "\n".join(lines).rstrip() + "\n"


def _inline(text: str) -> str:
    """Markdown's **bold** and `code` in one paragraph, escaped for HTML."""
    out, parts = [], html.escape(text).split("**")
    for i, part in enumerate(parts):
        code = part.split("`")
        part = "".join(f"<code>{c}</code>" if j % 2 else c for j, c in enumerate(code))
        out.append(f"<strong>{part}</strong>" if i % 2 else part)
    return "".join(out)


STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:75em;margin:2em auto;padding:0 1em;color:#222}"
    "table{border-collapse:collapse;margin:1em 0;font-size:90%}th,td{border:1px solid #ccc;padding:.25em .5em;"
    "text-align:left;vertical-align:top}th{background:#f3f3f3}img{max-width:100%}code{background:#f3f3f3}"
)


def render_html(title: str, sections: Sequence[Section], images_dir: Path) -> str:
    """The report as one HTML file: every image read from ``images_dir`` and embedded (data URI)."""
    body = [f"<h1>{html.escape(title)}</h1>"]
    for s in sections:
        body.append(f"<h2>{html.escape(s.title)}</h2>")
        body += [f"<p>{_inline(p)}</p>" for p in s.paragraphs]
        for t in s.tables:
            head = "".join(f"<th>{_inline(h)}</th>" for h in t.header)
            rows = "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in r) + "</tr>" for r in t.rows)
            body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
        for name, alt in s.images:
            data = base64.b64encode((images_dir / name).read_bytes()).decode("ascii")
            body.append(f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">')
        body += [f"<p>{_inline(p)}</p>" for p in s.after]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )


def frontier_figure(
    points: Sequence[dict[str, Any]],
    metric: str,
    baseline: float,
    floor: float | None,
    target: float | None,
    chosen: dict[str, Any] | None = None,
    max_reidentification: float | None = None,
    max_utility_loss: float | None = None,
):  # noqa: ANN201
    """Utility against top-1 re-identification, one line per setting series (ε along it, labelled),
    95% intervals as error bars; one panel per evaluation mode. The non-private baseline (dashed),
    the attacker's prior-only floor (dotted) and the equal-privacy target (grey) as reference lines;
    the user's bounds (red) where given: the feasible region is left of the re-identification bound
    and above the utility bound."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 5), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 2, sharey=True)
    series = list(dict.fromkeys(p["setting"] for p in points))
    # Twenty colours and five markers: every mechanism of the registry its own line.
    import matplotlib

    palette = matplotlib.colormaps["tab20"].colors
    style = {name: (palette[(2 * i) % 20 + (2 * i) // 20 % 2], "osD^v"[i % 5]) for i, name in enumerate(series)}
    for ax, mode in zip(axes, MODES):
        key = f"{mode}_{metric}"
        for name in series:
            pts = sorted((p for p in points if p["setting"] == name), key=lambda p: p["epsilon"])
            x = [p["top1"] for p in pts]
            y = [p[key] for p in pts]
            xerr = [[p["top1"] - p["top1_lo"] for p in pts], [p["top1_hi"] - p["top1"] for p in pts]]
            yerr = [[p[key] - p[f"{key}_lo"] for p in pts], [p[f"{key}_hi"] - p[key] for p in pts]]
            color, marker = style[name]
            line = ax.errorbar(x, y, xerr=xerr, yerr=yerr, marker=marker, color=color, capsize=2, label=name)
            for p in pts:
                ax.annotate(
                    f"{p['epsilon']:g}", (p["top1"], p[key]), fontsize=6, xytext=(3, 3), textcoords="offset points"
                )
            del line
        ax.axhline(baseline, color="black", linestyle="--", linewidth=1, label=f"non-private baseline ({baseline:.3f})")
        if floor is not None:
            ax.axvline(
                floor, color="black", linestyle=":", linewidth=1, label=f"attacker's floor, prior only ({floor:.3f})"
            )
        if target is not None:
            ax.axvline(target, color="grey", linewidth=1, alpha=0.6, label=f"equal-privacy target ({target:g})")
        if max_reidentification is not None:
            ax.axvline(
                max_reidentification, color="red", linewidth=1.2, label=f"bound: top-1 ≤ {max_reidentification:g}"
            )
        if max_utility_loss is not None:
            ax.axhline(
                baseline - max_utility_loss,
                color="red",
                linestyle="-.",
                linewidth=1.2,
                label=f"bound: {metric} loss ≤ {max_utility_loss:g}",
            )
        if chosen is not None:
            ax.scatter(
                [chosen["top1"]],
                [chosen[key]],
                marker="*",
                s=220,
                color="gold",
                edgecolor="black",
                zorder=5,
                label="recommended",
            )
        ax.set_xlim(0, 1)
        ax.set_xlabel("re-identification: share of corpus tokens recovered, top-1 (0–1)")
        ax.set_ylabel(
            f"{metric} ({mode}: "
            + ("trained on perturbed text)" if mode == "train-time" else "tested on perturbed text)")
        )
        ax.set_title(f"{mode}", fontsize=10)
        ax.grid(alpha=0.3)
    axes[1].tick_params(labelleft=True)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=min(4, len(labels)), fontsize=7)
    fig.suptitle("Utility against re-identification, one line per mechanism (point labels: ε)")
    return fig


def write_frontier(out_dir: Path, *args: Any, **kw: Any) -> str:
    frontier_figure(*args, **kw).savefig(out_dir / "frontier.png", dpi=100)
    return "frontier.png"


# --- the report's sections, from the measured points ------------------------------------------------------

METRIC_NAMES = {"macro_f1": "macro F1"}


def beats(p: dict[str, Any], baseline: bool = False) -> str:
    """The table's "beats the majority class" cell: yes, **no** (with the modes that do not), or – unknown."""
    if baseline:
        verdict = p.get("beats_majority")
        return "–" if verdict is None else ("yes" if verdict else "**no**")
    failing = [mode for mode in MODES if p.get(f"{mode}_beats_majority") is False]
    if not failing and all(p.get(f"{mode}_beats_majority") is None for mode in MODES):
        return "–"
    return "yes" if not failing else f"**no** ({', '.join(failing)})"


PRIVACY_NOTE = (
    "An evaluation for the data owner, not a release: the baseline, the examples and every figure are computed "
    "from the raw data. Keep these files with the raw data."
)


@dataclass(frozen=True)
class Comparison:
    """What the report of one ``compare`` run says, as plain data (the Spark job measures it): the
    settings, the measured points (``compare.parquet``'s rows with their ``spec``), the baseline and
    vocabulary only figures, the corpus's facts, the embedding and vocabulary, the examples (raw
    rows of the test split) and the settings left out."""

    config: Any
    points: list[dict[str, Any]]
    baseline: dict[str, float]
    vocabulary_only: dict[str, float]
    corpus: dict[str, Any]
    embedding: dict[str, Any]
    vocabulary_size: int
    n_classes: int
    examples: list[str]
    skipped: list[dict[str, Any]]
    unit: str | None = None  # the privacy unit's sentence (a unit other than the token)

    @property
    def analysis(self) -> Analysis:
        return Analysis(self.points, self.config, self.baseline)

    def sections(
        self, chosen: dict[str, Any] | None, why: str, equal: list[dict[str, Any]], frontier: str
    ) -> list[Section]:
        """The report, section by section."""
        names = list(dict.fromkeys(p["mechanism"] for p in self.points))
        return [
            self.dataset(),
            Section("Recommendation", [why, *self.vocabulary_hint()]),
            *([self.solve_section()] if self.config.solve else []),
            self.frontier(frontier),
            self.equal_privacy(equal),
            self.every_setting(),
            Section("Guarantees in words", self.guarantee_lines(names)),
            self.before_after(chosen),
            Section("Definitions", self.definitions()),
        ]

    def dataset(self) -> Section:
        """The input, the split, the embedding, the vocabulary's coverage, the baseline."""
        c, m, corpus, emb = self.config, self.config.utility_metric, self.corpus, self.embedding
        n_train, n_test = corpus["train_rows"], corpus["test_rows"]
        data = Section(
            "Dataset and embedding",
            [
                f"Input `{c.input or 'a DataFrame'}`, text column `{c.text_column}`, label column `{c.label_column}`: "
                f"{n_train + n_test} rows ({n_train} train / {n_test} test, split seed {c.split_seed}), "
                f"{self.n_classes} classes.",
                f"Embedding {emb['name']} ({emb['dim']} dimensions, sha256 {emb['sha256'][:12]}…), output "
                f"vocabulary {self.vocabulary_size} words. Model {c.model}; R = {c.repeats} perturbations per "
                f"setting; re-identification from K = {c.runs} runs per corpus word over {corpus['words_measured']} "
                f"corpus words ({100 * corpus['token_coverage']:.1f}% of the tokens with a vector).",
                self.coverage_line(),
                *self.majority_line(),
                *([self.unit] if self.unit else []),
                f"Non-private baseline {m}: {self.baseline[m]:.4f}; vocabulary only (ε = ∞, no noise: each word "
                f"its nearest vocabulary word) {self.vocabulary_only[f'train-time_{m}']:.4f} train-time, "
                f"{self.vocabulary_only[f'test-time_{m}']:.4f} test-time. {len(self.points)} settings measured; "
                f"{sum(p['time_s'] for p in self.points) / len(self.points):.1f} s per setting on average.",
                PRIVACY_NOTE,
            ],
        )
        return data

    def majority_line(self) -> list[str]:
        """The test split's majority class: the accuracy of a classifier that learned nothing, beside which
        every accuracy is read."""
        b = self.baseline
        if b.get("majority_rate") is None:
            return []
        label = b.get("majority_label")
        named = f" ({label!r})" if label is not None else ""
        verdict = "beats it" if b.get("beats_majority") is not False else "**does not beat it**"
        return [
            f"Majority class of the test split{named}: {pct(b['majority_rate'])}% of its {b['test_rows']} rows, the "
            f"accuracy of always predicting it (macro F1 {pct(majority_macro_f1(b['majority_rate'], self.n_classes))}"
            f"%). The non-private baseline (accuracy {pct(b['accuracy'])}%, macro F1 {pct(b['macro_f1'])}%) "
            f"{verdict}. A setting beats it when the lower end of its accuracy's 95% interval (the repeats' "
            "t-interval or the Wilson interval over the test rows, the lower) lies above that rate in both modes; "
            "only such a setting is recommended."
        ]

    def frontier(self, frontier: str) -> Section:
        """The frontier plot and its reading."""
        corpus = self.corpus
        plot = Section(
            "Privacy–utility frontier",
            [
                "Utility against the share of corpus tokens the strongest known attacker recovers (top-1), one line "
                f"per mechanism, ε along each line; bars are 95% intervals. The dotted line is the attacker's floor: "
                f"guessing the corpus's most frequent word whatever the output ({pct(corpus['floor_top1'])}% "
                f"top-1, {pct(corpus['floor_top5'])}% top-5)."
            ],
            images=[(frontier, "utility against re-identification, one line per mechanism")],
        )
        return plot

    def equal_privacy(self, equal: list[dict[str, Any]]) -> Section:
        """Each series' ε at each equal-privacy target, and its utility there."""
        m = self.config.utility_metric
        eq_rows = [
            [
                e["setting"],
                e["target"],
                "–" if e["epsilon"] is None else f"{e['epsilon']:.3g}",
                e["status"],
                pct(e["train_time"]),
                pct(e["test_time"]),
            ]
            for e in equal
        ]
        eq = Section(
            "Equal empirical privacy",
            [
                "ε of different guarantee types is not one scale, so the mechanisms are compared where they leak "
                "the same on this data: for each target, the largest ε at which the mechanism still meets it (monotone "
                "interpolation in log ε over the measured points, refined by extra points where the target falls "
                "between two), and the utility interpolated there."
            ],
            [Table(["setting", "target", "ε", "where", f"{m} train-time (%)", f"{m} test-time (%)"], eq_rows)],
            after=self.floor_note(),
        )
        return eq

    def every_setting(self) -> Section:
        """Every setting's privacy and utility figures, and the settings left out."""
        c = self.config
        shown = self.utility_columns()
        measures = ", ".join(METRIC_NAMES.get(k, k) for k in dict.fromkeys(k for k, _ in shown))
        privacy_rows, utility_rows = [], []
        for p in self.points:
            privacy_rows.append(
                [
                    p["setting"],
                    f"{p['epsilon']:g}",
                    p["guarantee_type"],
                    with_ci(p["top1"], p["top1_lo"], p["top1_hi"]),
                    with_ci(p["top5"], p["top5_lo"], p["top5_hi"]),
                    p["attacker"],
                    pct(p["unchanged"]),
                    pct(p["nw_fraction"]),
                    f"{p['mldp_nw']:.1f}",
                    f"{p['mldp_sw']:.1f}",
                    pct(p["pp"]),
                    pct(p["low"]),
                ]
            )
            utility_rows.append(
                [
                    p["setting"],
                    f"{p['epsilon']:g}",
                    *(
                        with_ci(p.get(f"{mode}_{k}"), p.get(f"{mode}_{k}_lo"), p.get(f"{mode}_{k}_hi"))
                        for k, mode in shown
                    ),
                    beats(p),
                    f"{p['cs']:.3f}",
                    pct(p["dictionary"]),
                    "–" if p.get("puc") is None else f"{p['puc']:.3f}",
                    f"{p['time_s']:.1f}",
                ]
            )
        utility_rows[:0] = self.reference_rows(shown)
        every = Section(
            "Every setting measured",
            [
                "Privacy (percentages; 95% intervals in brackets). top-1/top-5: corpus tokens the strongest known "
                "attacker recovers (the column `attacker` names it); unchanged: tokens released as themselves; "
                f"Nw/K: dpspark's mean Nw over corpus words as a share of K = {c.runs}; MLDP Nw and Sw: "
                f"{c.mldp_words} words × {c.mldp_trials} trials, Sw without the word itself; PP, LOW: see Definitions.",
                f"Utility (percentages; 95% intervals in brackets): {measures} in both modes, beside "
                "the non-private baseline, the majority class always predicted (what a classifier that learned "
                "nothing scores) and the vocabulary only. *beats the majority class*: the lower end of the accuracy's "
                "95% interval lies above the test split's majority rate; **no** names the modes where it does not.",
            ],
            [
                Table(
                    [
                        "setting",
                        "ε",
                        "guarantee",
                        "top-1",
                        "top-5",
                        "attacker",
                        "unchanged",
                        "Nw/K",
                        "MLDP Nw",
                        "MLDP Sw",
                        "PP",
                        "LOW",
                    ],
                    privacy_rows,
                ),
                Table(
                    [
                        "setting",
                        "ε",
                        *(f"{METRIC_NAMES.get(k, k)} {mode}" for k, mode in shown),
                        "beats the majority class",
                        "CS",
                        "dictionary words (%)",
                        "PUC (dpspark's composite)",
                        "seconds",
                    ],
                    utility_rows,
                ),
            ],
        )
        if self.skipped:
            every.after.append(
                "Left out (the mechanism refuses them on this vocabulary): "
                + "; ".join(f"{k['setting']} at ε = {k['epsilon']:g}: {k['reason']}" for k in self.skipped)
                + "."
            )
        return every

    def utility_columns(self) -> list[tuple[str, str]]:
        """The utility table's (metric, mode) columns: the utility metric, accuracy and macro F1, each mode."""
        names = dict.fromkeys([self.config.utility_metric, "accuracy", "macro_f1"])
        return [(k, mode) for k in names for mode in MODES]

    def reference_rows(self, shown: list[tuple[str, str]]) -> list[list[str]]:
        """The utility table's first rows, in its percentages: the non-private baseline (one run, both modes
        the same), the majority class always predicted, and vocabulary only (ε = ∞, one run)."""
        b, v = self.baseline, self.vocabulary_only
        rate = b.get("majority_rate")
        rows = [["non-private baseline", "–", *(pct(b.get(k)) for k, _ in shown), beats(b, baseline=True)]]
        if rate is not None:
            null = {"accuracy": rate, "macro_f1": majority_macro_f1(rate, self.n_classes)}
            label = b.get("majority_label")
            name = "majority class, always predicted" + (f" ({label!r})" if label is not None else "")
            rows.append([name, "–", *(pct(null.get(k)) for k, _ in shown), "–"])
        rows.append(["vocabulary only", "∞", *(pct(v.get(f"{mode}_{k}")) for k, mode in shown), "–"])
        return [r + ["–", "–", "–", "–"] for r in rows]

    def before_after(self, chosen: dict[str, Any] | None) -> Section:
        """Rows of the test split before and after the recommended (or the nearest) setting."""
        shown = chosen or self.analysis.nearest_feasible()
        examples = Section(
            "Before and after",
            [
                f"{len(self.examples)} rows of the test split, perturbed by "
                f"{'the recommended setting' if chosen else 'the setting nearest to the bounds (no recommendation)'}: "
                f"{shown['setting']}, ε = {shown['epsilon']:g}."
            ],
            [Table(["original", "perturbed"], [[a, b or ""] for a, b in zip(self.examples, shown["examples"])])],
        )
        return examples

    def solve_section(self) -> Section:
        """--solve: per series and bound, the ε found, its figure, and every point measured."""
        c = self.config
        solutions = self.analysis.solutions()
        wide = [r for r in solutions if r["tolerance"] > c.solve_tolerance]
        widened = (
            [
                f"The figure's own noise (the half-width of its 95% interval at the point) is wider than "
                f"{c.solve_tolerance:g} for {', '.join(sorted({r['setting'] for r in wide}))}: points closer than that "
                "cannot be told apart, so there the tolerance is the noise (the table's tolerance column). More runs "
                "(--runs) or repeats (--repeats) narrow it."
            ]
            if wide
            else []
        )
        rows = [
            [
                r["setting"],
                f"{r['bound']} ≤ {r['bound_value']:g}",
                "–" if r["epsilon"] is None else f"{r['epsilon']:.4g}",
                "–" if r["value"] is None else f"{r['value']:.4f}",
                f"{r['tolerance']:.3g}",
                r["status"],
                "; ".join(f"{q['epsilon']:.4g}: {q['value']:.4f}" for q in r["points"]),
            ]
            for r in solutions
        ]
        return Section(
            "Solved ε",
            [
                f"Per mechanism, the ε at which each bound is met to within {c.solve_tolerance:g} below it: a "
                "bracketing search in log ε (the interpolated crossing, or the bracket's midpoint) over measured "
                f"points, at most {c.solve_rounds} rounds. The ε given is a measured point meeting the bound.",
                *widened,
            ],
            [
                Table(
                    ["setting", "bound", "ε", "figure there", "tolerance", "status", "points measured (ε: figure)"],
                    rows,
                )
            ],
        )

    def guarantee_lines(self, names: list[str]) -> list[str]:
        """Each mechanism's guarantee type, then each series' unit of ε (Mahalanobis' is its own metric's):
        settings compare on ε only where both agree."""
        lines = [
            f"**{n}** ({REGISTRY[n].guarantee_type}): {GUARANTEE_TYPES[REGISTRY[n].guarantee_type]}." for n in names
        ]
        units = {p["setting"]: (p["guarantee_type"], p["guarantee_unit"]) for p in self.points}
        lines += [f"Unit of ε, **{series}**: {unit}." for series, (_, unit) in units.items()]
        if len(set(units.values())) == 1:
            lines.append("Every setting here has the same guarantee type and unit of ε: ε is one scale across them.")
        else:
            lines.append(
                "ε is not one scale across these settings (their guarantee types or units differ): compare them on "
                "the empirical figures (re-identification, Nw, utility) and at equal empirical privacy, not on ε."
            )
        return lines

    def coverage_line(self) -> str:
        corpus = self.corpus
        return (
            f"Vocabulary coverage: {100 * corpus['vocabulary_coverage']:.1f}% of the corpus's {corpus['tokens']} "
            f"tokens are words of the {self.vocabulary_size}-word vocabulary; "
            f"{100 * corpus['vector_coverage']:.1f}% have a vector in {self.embedding['name']}. A mechanism outputs "
            "vocabulary words only: with no noise (vocabulary only) every other word becomes its nearest "
            "vocabulary word, and a token without a vector the placeholder. The release must use the same "
            "vocabulary as this comparison."
        )

    def vocabulary_hint(self) -> list[str]:
        """Where the vocabulary alone costs more than the utility bound allows (or, without one, more than
        a point of the metric): say so, since no ε can give back what the vocabulary takes."""
        c, m = self.config, self.config.utility_metric
        loss = max(self.baseline[m] - self.vocabulary_only[f"{mode}_{m}"] for mode in MODES)
        allowed = c.max_utility_loss if c.max_utility_loss is not None else 0.01
        if loss <= allowed:
            return []
        bound = "" if c.max_utility_loss is None else f" (the bound allows {allowed:g})"
        return [
            f"**The vocabulary caps utility**: with no noise at all (vocabulary only, ε = ∞) {m} is already "
            f"{loss:.4f} below the baseline{bound}. Only {100 * self.corpus['vocabulary_coverage']:.1f}% of the "
            "corpus's tokens are vocabulary words: a larger "
            "--vocab-size, or --vocab-file with this corpus's words (or --vocab-from-corpus), raises that ceiling; "
            "a larger ε cannot."
        ]

    def floor_note(self) -> list[str]:
        """A target within 5 points of the attacker's floor says little: any mechanism scores the floor."""
        floor, target = self.corpus["floor_top1"], self.config.target_reidentification
        if target - floor >= 0.05:
            return []
        return [
            f"The re-identification target ({100 * target:g}%) lies within 5 points of the attacker's floor "
            f"({pct(floor)}%): an attacker who ignores the output already scores the floor, so near it every "
            "mechanism looks alike. Choose the target with --target-reidentification, above the floor."
        ]

    def definitions(self) -> list[str]:
        c = self.config
        first = "every token" if c.pp_tokens is None else f"the first {c.pp_tokens} tokens"
        return [
            "**top-1, top-5** (re-identification): the share of the corpus's tokens with a vector whose original "
            "word the attacker names first (among its first five) from the released word, as `dpspark "
            "privacy-risk` measures it: the strongest of the attackers dpspark knows (the identity guess; the "
            "Bayes guess with exact likelihoods, or with fitted counts and a distance model fitted by maximum "
            "likelihood where no closed form exists), scored on runs it was not fitted on. The floor is what "
            "guessing the corpus's most frequent words scores without looking at the output.",
            "**unchanged**: tokens released as themselves. **Nw/K**: dpspark's mean Nw over the corpus words "
            f"measured, as a share of K = {c.runs} runs.",
            f"**MLDP Nw, Sw** (the MLDP benchmark's plausible deniability): {c.mldp_words} vocabulary words drawn "
            f"uniformly (one public sample for every setting) × {c.mldp_trials} trials; Nw the trials returning the "
            "word, Sw the distinct outputs other than the word itself (dpspark's own Sw counts the word too).",
            f"**PP** (perturbation percentage): the share of token positions of the perturbed test split, over "
            f"{first} of each row, whose output differs from the input (SynTF's documents, bags of drawn "
            "words: the original tokens without an unmatched copy in the output; LOW likewise).",
            f"**LOW** (least-occurring words): of the {fm.LOW_WORDS} least-occurring words of the test split "
            "(ties by code point), the share of their occurrences released unchanged. Noise off: 100%.",
            "**CS** (cosine similarity): the mean over test rows of the cosine between the mean word vector "
            f"({self.embedding['name']}) of the original and of the perturbed row. Noise off: 1.",
            f"**dictionary words**: the share of output tokens found in {self.corpus['dictionary']} (GloVe's clitics, "
            "numbers and punctuation count as words of the language).",
            "**PUC**: " + fm.PUC_DEFINITION + f" Here U is the train-time {c.utility_metric}.",
            f"**{c.utility_metric}**: train-time trains the model on perturbed text and tests on plain; test-time "
            f"tests the non-private baseline model on perturbed text; mean and 95% t-interval over R = {c.repeats} "
            "perturbations.",
        ]
