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
