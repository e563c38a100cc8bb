"""Re-identification risk: how much of a corpus can an informed attacker read back?

The attacker of Feyisetan et al. (2020) §6, made Bayesian: it knows the mechanism, the
embedding, the output vocabulary and the corpus's word frequencies prior(w), and for
every released word u guesses the original

    ŵ(u) = argmax_w prior(w) · P(u | w)

(top-5: the five best w). P(u | w) is estimated from K runs of the mechanism on every
corpus word, counted exactly as the privacy statistics count them (``dpspark.stats``:
work items, ``item_counts``). The runs are cut in two halves of independent draws: the
guess is **fitted** on the first (``FIT_HALF``) and **scored** on the second
(``SCORE_HALF``). Scoring on the fitted half would be optimistic for the attacker, and
so understate the privacy: every output it scores would be one it has already seen.

An output never seen among the fitted runs has no estimate of P(u | ·); the attacker
then guesses u itself (at large ε the likeliest original of u is u).

Reported per (ε, λ), each a share of the corpus's tokens with a vector (the
mechanism's inputs; tokens without one are released as the placeholder and never
recovered):

- ``top1``, ``top5``: tokens whose original is the guess, or among the five guesses;
- ``unchanged``: tokens released as themselves (the token-weighted Nw / K);
- the same three over the tokens of an optional list of sensitive words;
- ``nw_mean``: the mean over corpus words of Nw (out of K runs), as privacy-stats reports it.

A token's share is its word's frequency times the share of the scoring runs in which
the attacker recovers it. ``reidentification`` is the plain numpy reference; the Spark
job (``dpspark.spark.risk``) computes the same numbers with DataFrames.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

FIT_HALF, SCORE_HALF = 0, 1
TOP = 5
RATES = ("top1", "top5", "unchanged")

Counts = Mapping[tuple[int, int, int], int]  # (setting, w, u) → count


def guesses(fit: Counts, prior: Mapping[int, float], top: int = TOP) -> dict[tuple[int, int], list[int]]:
    """(setting, u) → the attacker's ``top`` guesses, best first: w by prior(w)·count(w → u), ties to the
    smaller row."""
    ranked: dict[tuple[int, int], list[tuple[float, int]]] = {}
    for (s, w, u), c in fit.items():
        ranked.setdefault((s, u), []).append((-prior[w] * c, w))
    return {k: [w for _, w in sorted(v)[:top]] for k, v in ranked.items()}


def reidentification(
    fit: Counts,
    score: Counts,
    prior: Mapping[int, float],
    sensitive: set[int] | frozenset[int] = frozenset(),
    top: int = TOP,
) -> dict[int, dict[str, float]]:
    """Per setting: the shares of tokens recovered top-1 / top-``top`` and released unchanged,
    overall and over ``sensitive`` words, fitted on ``fit`` and scored on ``score``.

    Args:
        fit, score: (setting, w, u) → count over independent runs (the two halves).
        prior: corpus word (embedding row) → its number of tokens.
        sensitive: embedding rows of the sensitive words.
    """
    guess = guesses(fit, prior, top)
    runs: dict[tuple[int, int], int] = {}
    for (s, w, _), c in score.items():
        runs[(s, w)] = runs.get((s, w), 0) + c
    acc: dict[int, np.ndarray] = {}
    for (s, w, u), c in score.items():
        g = guess.get((s, u), [u])
        share = prior[w] * c / runs[(s, w)]
        hits = np.array([w in g[:1], w in g[:top], u == w], dtype=np.float64) * share
        row = np.concatenate([[share], hits, [share if w in sensitive else 0.0], hits * (w in sensitive)])
        acc[s] = acc.get(s, 0.0) + row
    nw: dict[int, dict[int, int]] = {}
    for counts in (fit, score):
        for (s, w, u), c in counts.items():
            d = nw.setdefault(s, {})
            d[w] = d.get(w, 0) + (c if u == w else 0)
    return {key: finish(acc[key], float(np.mean(list(nw[key].values())))) for key in acc}


def finish(sums: np.ndarray | list[float], nw_mean: float) -> dict[str, float]:
    """The reported shares from the summed weights [tokens, top1, top5, unchanged, the same for sensitive]."""
    out = {name: float(sums[1 + i] / sums[0]) for i, name in enumerate(RATES)}
    sens = sums[4]
    out.update({f"sensitive_{name}": float(sums[5 + i] / sens) if sens else math.nan for i, name in enumerate(RATES)})
    out["nw_mean"] = float(nw_mean)
    return out


def setting_of(row: dict) -> str:
    """The row's setting without ε (``report.series_label``); rows without one are the noise family's λ."""
    if row.get("setting"):
        return row["setting"]
    from dpspark.report import series_label

    return series_label("laplace" if row["lambda"] == 0 else "mahalanobis", {"lambda": row["lambda"]})


def summary_md(rows: list[dict], title: str, notes: list[str]) -> str:
    """Tables with a row per setting (mechanism and its own parameters), columns ε, of every share (as
    percentages) and of the mean Nw."""
    from dpspark.report import guarantee_note

    eps = sorted({r["epsilon"] for r in rows})
    lams = list(dict.fromkeys(setting_of(r) for r in rows))
    by = {(r["epsilon"], setting_of(r)): r for r in rows}

    def cells(lam: str, text: Callable[[dict], str]) -> str:
        return " | ".join(text(by[(e, lam)]) if (e, lam) in by else "–" for e in eps)

    lines = [f"# {title}", "", *notes, ""]
    names = [
        ("top1", "tokens recovered, top-1 guess (%)"),
        ("top5", "tokens recovered among the top-5 guesses (%)"),
        ("unchanged", "tokens released unchanged (%)"),
    ]
    if any(not math.isnan(r["sensitive_top1"]) for r in rows):
        names += [(f"sensitive_{k}", f"sensitive words: {t}") for k, t in names]
    for key, text in names:
        lines += [
            f"## {text}",
            "",
            "| setting \\ ε | " + " | ".join(f"{e:g}" for e in eps) + " |",
            "|---|" + "---|" * len(eps),
        ]
        for lam in lams:
            lines.append(f"| {lam} | " + cells(lam, lambda r: f"{100 * r[key]:.2f}") + " |")  # noqa: B023
        lines.append("")
    lines += [f"## mean Nw over corpus words (out of K = {rows[0]['runs']})", ""]
    lines += ["| setting \\ ε | " + " | ".join(f"{e:g}" for e in eps) + " |", "|---|" + "---|" * len(eps)]
    for lam in lams:
        lines.append(f"| {lam} | " + cells(lam, lambda r: f"{r['nw_mean']:.2f}") + " |")
    lines += ["", *guarantee_note(sorted({setting_of(r).split()[0] for r in rows}))]
    return "\n".join(lines) + "\n"


def figure(  # noqa: ANN201
    rows: list[dict], words: int | None = None, vocab_size: int | None = None, embedding: str | None = None
):
    """The Figure of ``reidentification.png``: recovered shares (top-1 solid, top-5 dashed) and the
    unchanged share against ε per λ, both panels on one 0–1 scale, a suptitle with K, the corpus
    words (``words``), the vocabulary and the embedding when given."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from dpspark.report import epsilon_axis

    fig = Figure(figsize=(11, 4.6), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 2, sharey=True)
    eps = sorted({r["epsilon"] for r in rows})
    for lam in dict.fromkeys(setting_of(r) for r in rows):
        pts = sorted((r for r in rows if setting_of(r) == lam), key=lambda r: r["epsilon"])
        x = [r["epsilon"] for r in pts]
        line = axes[0].plot(x, [r["top1"] for r in pts], marker="o", label=f"{lam}, top-1 guess")[0]
        axes[0].plot(x, [r["top5"] for r in pts], linestyle="--", color=line.get_color(), label=f"{lam}, among top-5")
        axes[1].plot(x, [r["unchanged"] for r in pts], marker="o", label=lam)
    panels = (
        ("share of tokens the attacker recovers", "recovered tokens (share of corpus tokens with a vector, 0–1)"),
        ("share of tokens released unchanged", "unchanged tokens (share of corpus tokens with a vector, 0–1)"),
    )
    for ax, (title, ylabel) in zip(axes, panels):
        epsilon_axis(ax, eps)
        ax.set_ylim(0, 1)
        ax.tick_params(labelleft=True)  # both panels keep their scale when shared
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    about = f"K = {rows[0]['runs']} runs per word"
    if words is not None:
        about += (
            f" ({rows[0]['runs'] // 2} to fit the attack, {rows[0]['runs'] // 2} to score it), {words} corpus words"
        )
    if vocab_size is not None:
        about += f"; vocabulary {vocab_size} words" + (f" of {embedding}" if embedding else "")
    elif embedding:
        about += f"; embedding {embedding}"
    fig.suptitle(f"Re-identification risk against ε\n{about}")
    return fig


def write_plot(
    rows: list[dict],
    out_dir: Path,
    words: int | None = None,
    vocab_size: int | None = None,
    embedding: str | None = None,
) -> str:
    """``reidentification.png``: recovered shares (top-1 solid, top-5 dashed) and unchanged share against ε,
    per setting."""
    figure(rows, words, vocab_size, embedding).savefig(out_dir / "reidentification.png", dpi=110)
    return "reidentification.png"
