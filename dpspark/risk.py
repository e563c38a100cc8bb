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

Where the mechanism has a closed form P(u | w) (``WordMechanism.distribution``: TEM,
SanText), ``exact_reidentification`` needs no runs at all: the attacker uses the exact
likelihoods, and every share is the exact expectation Σ_w prior(w) Σ_u P(u | w)·[hit].
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from dpspark.mechanisms.base import WordMechanism

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


def exact_reidentification(
    mechanism: WordMechanism,
    prior: Mapping[int, float],
    sensitive: set[int] | frozenset[int] = frozenset(),
    runs: int = 2,
    top: int = TOP,
) -> dict[str, float] | None:
    """The attacker with exact likelihoods (None when the mechanism has no closed form).

    The guesses for an output u are the ``top`` words w of the corpus with the largest
    prior(w)·P(u | w), ties to the smaller row, as ``guesses``; the shares are exact
    expectations over the mechanism's output, and ``nw_mean`` the exact mean of K·P(w | w)
    over corpus words (K = ``runs``, as privacy-stats counts Nw). Two passes over the corpus
    words, one distribution row block at a time: memory O(top·V), no (words × V) matrix.
    """
    words = np.array(sorted(prior), dtype=np.int64)
    f = np.array([prior[int(w)] for w in words], dtype=np.float64)
    space = mechanism.space
    step = space.block
    best_score = np.full((0, space.size), -np.inf)
    best_word = np.zeros((0, space.size), dtype=np.int64)
    for start in range(0, len(words), step):
        p = mechanism.distribution(words[start : start + step])
        if p is None:
            return None
        # Stacked in ascending word order (every earlier chunk's words are smaller), a stable
        # sort on the score keeps ties to the smaller row.
        scores = np.vstack([best_score, f[start : start + step, None] * p])
        ids = np.vstack([best_word, np.broadcast_to(words[start : start + step, None], p.shape)])
        order = np.argsort(-scores, axis=0, kind="stable")[:top]
        best_score = np.take_along_axis(scores, order, axis=0)
        best_word = np.take_along_axis(ids, order, axis=0)
    pos, found = space.positions(words)
    sums = np.zeros(8)
    nw = np.zeros(len(words))
    for start in range(0, len(words), step):
        chunk = words[start : start + step]
        p = mechanism.distribution(chunk)
        weight = f[start : start + step]
        hit1 = (p * (best_word[0][None, :] == chunk[:, None])).sum(axis=1)
        hit5 = (p * (best_word[:top][None, :, :] == chunk[:, None, None]).any(axis=1)).sum(axis=1)
        here = found[start : start + step]
        same = np.where(here, p[np.arange(len(chunk)), np.maximum(pos[start : start + step], 0)], 0.0)
        nw[start : start + step] = runs * same
        sens = np.array([int(w) in sensitive for w in chunk], dtype=np.float64)
        row = np.stack([np.ones_like(weight), hit1, hit5, same], axis=1) * weight[:, None]
        sums[:4] += row.sum(axis=0)
        sums[4:] += (row * sens[:, None]).sum(axis=0)
    return finish(sums, float(nw.mean()))


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
