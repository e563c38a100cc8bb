"""Re-identification risk: how much of a corpus can an informed attacker read back?

The attacker of Feyisetan et al. (2020) §6, made Bayesian: it knows the mechanism, the
embedding, the output vocabulary and the corpus's word frequencies prior(w), and for
every released word u guesses the original

    ŵ(u) = argmax_w prior(w) · P(u | w)

(top-5: the five best w). P(u | w) is estimated from K runs of the mechanism on every
corpus word, counted exactly as the privacy statistics count them (``dpspark.stats``:
work items, ``engine.nw_sw.create``). The runs are cut in two halves of independent draws: the
guess is **fitted** on the first (``FIT_HALF``) and **scored** on the second
(``SCORE_HALF``). Scoring on the fitted half would be optimistic for the attacker, and
so understate the privacy: every output it scores would be one it has already seen.

**The strongest known attacker.** Any attacker's score is a lower bound on the risk, so the
reported ``top1`` / ``top5`` are the best of the attackers dpspark knows, scored on the same
scoring runs (``strongest``; the column ``attacker`` names the one that achieved top-1,
``attacker_top5`` top-5), each attacker's own figures kept beside them:

- ``identity``: every released word is its own original. Its top-1 and top-5 are the
  unchanged share, so a reported top-1 below the unchanged share of the same runs is
  impossible by construction (the fitted attacker alone fell below it at K = 20).
- ``bayes``: the guess above with exact likelihoods where the mechanism has a closed form
  (``WordMechanism.distribution``: TEM, SanText, ...; ``exact_reidentification``, exact
  expectations, no runs), else with the fitted counts count(w → u). An output never seen among
  the fitted runs has no estimate of P(u | ·); this attacker then guesses u itself.
- ``model`` (no closed form only): P(u | w) ∝ exp(−β·d(w, u)) over the vocabulary, d the
  Euclidean distance of the embedding, β fitted by maximum likelihood on the fitting runs
  (``fit_beta``; exact for SanText, where β = ε/2). One parameter for all words, so it
  generalises to the outputs and words the fitted counts have not seen: on the shipped sample
  (CMP, ε = 10, 2,000-word vocabulary) it beats counts fitted on 64 times as many runs, and its
  figure barely moves with K.

For mechanisms without a closed form, the Spark job doubles the fitting runs (new draws added
to those drawn) until top-1 and top-5 move by less than ``--precision`` (``more_fit_items``,
``moved``), up to ``--max-fit-runs``, and flags a setting that did not converge.

**Intervals.** Every share is a token-weighted mean Σ_w f_w·h_w/n_w / Σ_w f_w of per-word hit
rates over n_w independent scoring runs; its 95% interval (``interval``) is the normal one with
the variance Σ f_w² p̃_w(1 − p̃_w)/n_w / (Σ f_w)², Agresti–Coull p̃_w. It covers the scoring
runs' noise given the fitted attacker. Exact shares have zero-width intervals.

Reported per setting, each a share of the corpus's tokens with a vector (the mechanism's
inputs; tokens without one are released as the placeholder and never recovered), with
``<share>_lo`` / ``<share>_hi``:

- ``top1``, ``top5``: tokens whose original is the strongest attacker's guess, or among its
  five guesses; ``identity_top1``, ``bayes_top1``, ``model_top1``, ... each attacker's;
- ``unchanged``: tokens released as themselves (the token-weighted Nw / K);
- the same over the tokens of an optional list of sensitive words (``sensitive_*``);
- ``nw_mean``: the mean over corpus words of Nw (out of K runs), as privacy-stats reports it;
- ``doc_exposure`` (with ``--sensitive-words``): the share of rows holding a sensitive word in
  which one of the row's sensitive words appears anywhere in its output (``doc_exposure``:
  exact 1 − Π_j (1 − Σ_s P(s | t_j)) with a closed form, else from perturbing the row R times),
  rows the unit (``doc_interval``).

A token's share is its word's frequency times the share of the scoring runs in which
the attacker recovers it. ``reidentification`` is the plain numpy reference; the Spark
job (``dpspark.spark.risk``) computes the same numbers with DataFrames.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from dpspark.engine import exact_attack as ea
from dpspark.engine import fold
from dpspark.mechanisms import series_of_row
from dpspark.mechanisms.base import WordMechanism

FIT_HALF, SCORE_HALF = 0, 1
TOP = ea.TOP
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
    model: Guesses | None = None,
) -> dict[int, dict[str, Any]]:
    """Per setting: every attacker's shares of tokens recovered top-1 / top-``top`` and the share released
    unchanged, overall and over ``sensitive`` words, with 95% intervals, and the strongest attacker's
    (``shares``); fitted on ``fit`` and scored on ``score``.

    Args:
        fit, score: (setting, w, u) → count over independent runs.
        prior: corpus word (embedding row) → its number of tokens.
        sensitive: embedding rows of the sensitive words.
        model: the model attacker's guesses (``model_guesses``) for the settings that have one.
    """
    attackers = {"bayes": guesses(fit, prior, top)}
    if model:
        attackers["model"] = model
    tables = word_hits(score, attackers, top)
    nw: dict[int, dict[int, int]] = {}
    for counts in (fit, score):
        for (s, w, u), c in counts.items():
            d = nw.setdefault(s, {})
            d[w] = d.get(w, 0) + (c if u == w else 0)
    return {s: {**shares(tables[s], prior, sensitive), "nw_mean": float(np.mean(list(nw[s].values())))} for s in tables}


def exact_reidentification(
    mechanism: WordMechanism,
    prior: Mapping[int, float],
    sensitive: set[int] | frozenset[int] = frozenset(),
    runs: int = 2,
    top: int = TOP,
) -> dict[str, float] | None:
    """The attacker with exact likelihoods (None when the mechanism has no closed form), folded here
    (``dpspark.engine.exact_attack``; the Spark job folds the same combiners on the executors).

    The guesses for an output u are the ``top`` words w of the corpus with the largest
    prior(w)·P(u | w), ties to the smaller row, as ``guesses``; the shares are exact
    expectations over the mechanism's output, and ``nw_mean`` the exact mean of K·P(w | w)
    over corpus words (K = ``runs``, as privacy-stats counts Nw).
    """
    corpus = ea.Corpus.of(dict(prior), sensitive)
    if not ea.has_closed_form(mechanism, corpus):
        return None
    span = [(0, len(corpus.words))]
    scores = ea.exact_scores(mechanism, corpus)
    best = fold(
        span,
        lambda s: ea.create_guesses(scores, mechanism.space, corpus, s, top),
        lambda a, b: ea.merge_guesses(a, b, top),
    )
    hits = fold(span, lambda s: ea.create_hits(mechanism, corpus, s, best[None].word, runs, top), ea.merge_hits)
    return finish(*ea.finish_hits(hits[None]))


def finish(sums: np.ndarray | list[float], nw_mean: float) -> dict[str, float]:
    """The reported shares from the summed weights [tokens, top1, top5, unchanged, the same for sensitive]."""
    out = {name: float(sums[1 + i] / sums[0]) for i, name in enumerate(RATES)}
    sens = sums[4]
    out.update({f"sensitive_{name}": float(sums[5 + i] / sens) if sens else math.nan for i, name in enumerate(RATES)})
    out["nw_mean"] = float(nw_mean)
    return out


# --- The strongest known attacker, with intervals ------------------------------------------------------

Z95 = 1.959964  # the normal quantile of a two-sided 95% interval
ATTACKERS = ("bayes", "model", "identity")  # ties go to the earlier one
MODEL_WORDS = 200  # corpus words whose fitted runs fit the model attacker's β (evenly spaced by row)
Guesses = Mapping[tuple[int, int], list[int]]  # (setting, u) → the attacker's guesses, best first


def interval(weights: np.ndarray, hits: np.ndarray, runs: np.ndarray) -> tuple[float, float, float]:
    """(share, lo, hi): the weighted share Σ f·h/n / Σ f of per-unit hit rates h/n and its 95% interval.

    Each unit's hits are binomial in its n independent runs; the variance of the share is
    Σ f² p̃(1 − p̃)/n / (Σ f)² with the Agresti–Coull p̃ = (h + z²/2)/(n + z²) (a unit that hit in every
    run still counts as uncertain), and the interval is the share ± z·√variance clipped to [0, 1].
    Units with n = 0 are left out. NaNs when no unit has a weight, or a unit's hits are NaN (no such attacker).
    """
    f, h, n = (np.asarray(a, dtype=np.float64) for a in (weights, hits, runs))
    keep = (n > 0) & (f > 0)
    f, h, n = f[keep], h[keep], n[keep]
    if not f.sum() or np.isnan(h).any():
        return math.nan, math.nan, math.nan
    share = float((f * h / n).sum() / f.sum())
    pt = (h + Z95**2 / 2) / (n + Z95**2)
    half = Z95 * math.sqrt(float((f**2 * pt * (1 - pt) / n).sum())) / float(f.sum())
    return share, max(0.0, share - half), min(1.0, share + half)


def word_hits(score: Counts, attackers: Mapping[str, Guesses], top: int = TOP) -> dict[int, dict[str, np.ndarray]]:
    """Per setting, per corpus word: its scoring runs ``n``, the runs released unchanged (``unchanged``) and,
    for every attacker, the runs whose output it reads back as the word, top-1 and among its ``top``
    guesses (``<attacker>_top1``, ``<attacker>_top5``). An output an attacker has no guess for is guessed
    as itself. The identity attacker (every output is its own original) needs no guesses: its hits are
    the unchanged runs, top-1 and top-5 alike.
    """
    names = ["n", "unchanged", *[f"{a}_{r}" for a in attackers for r in ("top1", "top5")]]
    present = {a: {s for s, _ in table} for a, table in attackers.items()}
    acc: dict[int, dict[int, np.ndarray]] = {}
    for (s, w, u), c in score.items():
        row = acc.setdefault(s, {}).setdefault(w, np.zeros(len(names)))
        hits = [1.0, u == w]
        for a, table in attackers.items():
            g = table.get((s, u), [u])
            hits += [w in g[:1], w in g[:top]] if s in present[a] else [math.nan, math.nan]
        row += c * np.array(hits, dtype=np.float64)
    out = {}
    for s, by_word in acc.items():
        words = sorted(by_word)
        cols = np.array([by_word[w] for w in words]).T
        out[s] = {"word": np.array(words, dtype=np.int64), **{name: cols[i] for i, name in enumerate(names)}}
    return out


def shares(table: Mapping[str, np.ndarray], prior: Mapping[int, float], sensitive: set[int] | frozenset[int]) -> dict:
    """One setting's per-word hits (``word_hits``) to its shares and intervals, every attacker's and the
    strongest (``strongest``): ``<figure>``, ``<figure>_lo``, ``<figure>_hi``, over all words and over
    ``sensitive`` (``sensitive_<figure>``)."""
    words = np.asarray(table["word"], dtype=np.int64)
    f = np.array([prior[int(w)] for w in words], dtype=np.float64)
    sens = np.array([int(w) in sensitive for w in words], dtype=bool)
    figures = {"unchanged": table["unchanged"], **{f"identity_{r}": table["unchanged"] for r in ("top1", "top5")}}
    figures.update({k: v for k, v in table.items() if k.endswith(("_top1", "_top5"))})
    out: dict[str, Any] = {}
    for prefix, mask in (("", np.ones(len(words), dtype=bool)), ("sensitive_", sens)):
        for name, hits in figures.items():
            v, lo, hi = interval(f[mask], np.asarray(hits)[mask], np.asarray(table["n"])[mask])
            out.update({f"{prefix}{name}": v, f"{prefix}{name}_lo": lo, f"{prefix}{name}_hi": hi})
    return strongest(out)


def strongest(row: dict) -> dict:
    """``top1`` / ``top5`` (and their sensitive twins) as the best of the attackers whose figures the row
    holds (``bayes_top1``, ``model_top1``, ``identity_top1``, ...; a missing or NaN figure takes no
    part), with its interval and the attacker's name (``attacker`` for top-1, ``attacker_top5``,
    ``sensitive_attacker``, ``sensitive_attacker_top5``). The identity attacker is always there, so a
    top-1 below the unchanged share of the same runs cannot be reported."""
    out = dict(row)
    out.setdefault("identity_top1", row["unchanged"])
    out.setdefault("identity_top5", row["unchanged"])
    for prefix in ("", "sensitive_"):
        for rate, name in (("top1", "attacker"), ("top5", "attacker_top5")):
            best = None
            for a in ATTACKERS:
                v = out.get(f"{prefix}{a}_{rate}")
                if v is not None and not math.isnan(v) and (best is None or v > out[f"{prefix}{best}_{rate}"]):
                    best = a
            out[f"{prefix}{name}"] = best
            for tail in ("", "_lo", "_hi"):
                out[f"{prefix}{rate}{tail}"] = math.nan if best is None else out.get(f"{prefix}{best}_{rate}{tail}")
    return out


def exact_row(exact: Mapping[str, float]) -> dict:
    """The figures of ``exact_reidentification`` as ``shares`` gives them: exact expectations, so
    zero-width intervals; the exact-likelihood attacker is ``bayes``, the identity attacker's figures are
    the unchanged shares."""
    row: dict[str, Any] = {"nw_mean": exact["nw_mean"]}
    for prefix in ("", "sensitive_"):
        figures = {
            "unchanged": exact[f"{prefix}unchanged"],
            "identity_top1": exact[f"{prefix}unchanged"],
            "identity_top5": exact[f"{prefix}unchanged"],
            "bayes_top1": exact[f"{prefix}top1"],
            "bayes_top5": exact[f"{prefix}top5"],
        }
        for name, v in figures.items():
            row.update({f"{prefix}{name}": v, f"{prefix}{name}_lo": v, f"{prefix}{name}_hi": v})
    return strongest(row)


def model_words(words: np.ndarray, n: int = MODEL_WORDS) -> np.ndarray:
    """The corpus words whose fitted runs fit β: at most ``n``, evenly spaced in row order (a fixed rule)."""
    words = np.sort(np.asarray(words, dtype=np.int64))
    if len(words) <= n:
        return words
    return words[np.linspace(0, len(words) - 1, n).round().astype(np.int64)]


def fit_beta(space: Any, fit: Mapping[tuple[int, int], int]) -> float:
    """β of the model P_β(u | w) = exp(−β·d(w, u)) / Σ_v exp(−β·d(w, v)) over the output vocabulary (d
    the Euclidean distance of the embedding), by maximum likelihood on the fitted runs ``fit``
    ((w, u) → count; ``model_words`` of them are used). The log-likelihood is concave in β (an
    exponential family): its derivative Σ c·(E_β[d | w] − d(w, u)) has one root, found by
    ``solve_moment`` in log β within [1e-4, 1e4]."""
    words = model_words(np.array(sorted({w for w, _ in fit}), dtype=np.int64))
    keep = set(int(w) for w in words)
    # In (w, u) order, not the order the counts were collected in: the observed mean is then the same float
    # whatever the partitions' order (classic Spark and Connect), and so is β to the last bit.
    pairs = sorted((w, u, c) for (w, u), c in fit.items() if w in keep)
    n = np.zeros(len(words))
    at = {int(w): i for i, w in enumerate(words)}
    observed = 0.0
    dist = np.vstack([space.distance_rows(words[i : i + space.block]) for i in range(0, len(words), space.block)])
    upos, _ = space.positions(np.array([u for _, u, _ in pairs], dtype=np.int64))  # outputs are in W
    for (w, _, c), p in zip(pairs, upos):
        n[at[w]] += c
        observed += c * dist[at[w], p]
    return solve_moment(dist, n / n.sum(), observed / n.sum())


def solve_moment(dist: np.ndarray, weight: np.ndarray, observed: float, lo: float = 1e-4, hi: float = 1e4) -> float:
    """The β in [lo, hi] at which Σ_w weight_w·E_β[d | w] = ``observed`` (P_β(v | w) ∝ exp(−β·dist[w, v])),
    the end nearest the root when it lies outside.

    Newton's method in θ = ln β, safeguarded by the bracket it keeps (rtsafe, Numerical Recipes §9.4): the
    mean E_β[d] falls with β at the rate Var_β[d], so each step costs one pass over ``dist`` and the root
    comes in a few steps, where plain bisection to the same precision takes 50. A step that leaves the
    bracket, or shrinks it too slowly, is a bisection instead."""

    def moment(theta: float) -> tuple[float, float]:  # (E_β[d] − observed, its derivative in θ)
        beta = math.exp(theta)
        logits = -beta * dist
        logits -= logits.max(axis=1, keepdims=True)
        p = np.exp(logits)
        p /= p.sum(axis=1, keepdims=True)
        mean = (p * dist).sum(axis=1)
        var = (p * dist * dist).sum(axis=1) - mean * mean
        return float(weight @ mean) - observed, -beta * float(weight @ np.maximum(var, 0.0))

    a, b = math.log(lo), math.log(hi)
    fa, _ = moment(a)
    if fa <= 0:  # even the smallest β predicts outputs as near as observed
        return lo
    fb, _ = moment(b)
    if fb >= 0:
        return hi
    theta, width = (a + b) / 2, b - a
    for _ in range(100):
        f, slope = moment(theta)
        if f == 0:
            break
        a, b = (theta, b) if f > 0 else (a, theta)
        step = f / slope if slope < 0 else math.inf
        newton = theta - step
        if not a < newton < b or abs(2 * step) > width:
            newton = (a + b) / 2
        width, theta = abs(newton - theta), newton
        if width < 1e-13 * max(1.0, abs(theta)) or b - a < 1e-13:
            break
    return math.exp(theta)


def model_guesses(space: Any, beta: float, prior: Mapping[int, float], setting: int = 0, top: int = TOP) -> dict:
    """(setting, u) → the model attacker's ``top`` guesses for every output u of the vocabulary: the corpus
    words w with the largest prior(w)·P_β(u | w) (``fit_beta``), ties to the smaller row. One block of
    distance rows at a time, as ``exact_reidentification``: memory O(top·V)."""
    return model_guesses_many(space, {setting: beta}, prior, top)


def model_guesses_many(space: Any, betas: Mapping[int, float], prior: Mapping[int, float], top: int = TOP) -> dict:
    """``model_guesses`` of several settings over one space (setting → β), folded here
    (``dpspark.engine.exact_attack.model_scores``; the Spark job folds them on the executors)."""
    corpus = ea.Corpus.of(dict(prior))
    span = [(0, len(corpus.words))]
    merge = lambda a, b: ea.merge_guesses(a, b, top)  # noqa: E731
    out: dict = {}
    for s, beta in betas.items():
        scores = ea.model_scores(space, beta, corpus)
        best = fold(span, lambda sp: ea.create_guesses(scores, space, corpus, sp, top), merge)[None]  # noqa: B023
        out.update(model_table(space, s, best.word))
    return out


def model_table(space: Any, setting: int, words: np.ndarray) -> dict:
    """(setting, u) → the guesses of every output u of the vocabulary, best first, from a k × V table."""
    return {(setting, int(u)): [int(w) for w in words[:, p]] for p, u in enumerate(space.vocab_rows)}


def cost_shares(n: int, closed: set[int], exact_s: float, fitted_s: float, shared_s: float) -> list[float]:
    """Each of ``n`` settings' share of the seconds of one ``risk_rows``: the exact attacker's split over the
    settings with a closed form (``closed``), the model attacker's and the doubled fitting runs' over the
    others, and the draws every setting has (``shared_s``) evenly."""
    open_ = n - len(closed)
    return [
        shared_s / n + (exact_s / len(closed) if i in closed else fitted_s / open_ if open_ else 0.0) for i in range(n)
    ]


def summary_md(rows: list[dict], title: str, notes: list[str]) -> str:
    """Tables with a row per setting (mechanism and its own parameters), columns ε, of every share (as
    percentages) and of the mean Nw."""
    from dpspark.report import guarantee_note

    eps = sorted({r["epsilon"] for r in rows})
    settings = list(dict.fromkeys(series_of_row(r) for r in rows))
    by = {(r["epsilon"], series_of_row(r)): r for r in rows}

    def cells(series: str, text: Callable[[dict], str]) -> str:
        return " | ".join(text(by[(e, series)]) if (e, series) in by else "–" for e in eps)

    lines = [f"# {title}", "", *notes, ""]
    names = [
        ("top1", "tokens recovered, top-1 guess (%), strongest attacker"),
        ("top5", "tokens recovered among the top-5 guesses (%), strongest attacker"),
        ("unchanged", "tokens released unchanged (%)"),
    ]
    if any(not math.isnan(r["sensitive_top1"]) for r in rows):
        names += [(f"sensitive_{k}", f"sensitive words: {t}") for k, t in names]
    if any(r.get("doc_exposure") is not None for r in rows):
        names.append(("doc_exposure", "rows holding a sensitive word in whose output one of them appears (%)"))

    def share(r: dict, key: str) -> str:
        v, lo, hi = r.get(key), r.get(f"{key}_lo"), r.get(f"{key}_hi")
        if v is None or math.isnan(v):
            return "–"
        if lo is None or math.isnan(lo) or (lo == v == hi):
            return f"{100 * v:.2f}"
        return f"{100 * v:.1f} ({100 * lo:.1f}–{100 * hi:.1f})"

    for key, text in names:
        lines += [
            f"## {text}",
            "",
            "| setting \\ ε | " + " | ".join(f"{e:g}" for e in eps) + " |",
            "|---|" + "---|" * len(eps),
        ]
        for series in settings:
            lines.append(f"| {series} | " + cells(series, lambda r: share(r, key)) + " |")  # noqa: B023
        lines.append("")
    if any("attacker" in r for r in rows):
        lines += ["## the strongest attacker, top-1 / top-5 (fitting runs per word; * not converged)", ""]
        lines += ["| setting \\ ε | " + " | ".join(f"{e:g}" for e in eps) + " |", "|---|" + "---|" * len(eps)]
        for series in settings:
            lines.append(f"| {series} | " + cells(series, attacker_cell) + " |")
        lines.append("")
    lines += [f"## mean Nw over corpus words (out of K = {rows[0]['runs']})", ""]
    lines += ["| setting \\ ε | " + " | ".join(f"{e:g}" for e in eps) + " |", "|---|" + "---|" * len(eps)]
    for series in settings:
        lines.append(f"| {series} | " + cells(series, lambda r: f"{r['nw_mean']:.2f}") + " |")
    lines += ["", *guarantee_note(sorted({series_of_row(r).split()[0] for r in rows}))]
    return "\n".join(lines) + "\n"


def attacker_cell(r: dict) -> str:
    """The summary's attacker cell: ``bayes / model (40)``; exact likelihoods say ``exact``."""
    text = f"{r.get('attacker')} / {r.get('attacker_top5')}"
    if r.get("likelihood", "").startswith("exact"):
        return text + " (exact)"
    if r.get("fit_runs") is not None:
        text += f" ({r['fit_runs']}{'*' if r.get('converged') is False else ''})"
    return text


def figure(  # noqa: ANN201
    rows: list[dict], words: int | None = None, vocab_size: int | None = None, embedding: str | None = None
):
    """The Figure of ``reidentification.png``: recovered shares of the strongest attacker (top-1 solid,
    top-5 dashed) and the unchanged share against ε per setting, their 95% intervals as bands,
    both panels on one 0–1 scale, a suptitle with K, the corpus
    words (``words``), the vocabulary and the embedding when given."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from dpspark.report import epsilon_axis

    fig = Figure(figsize=(11, 4.6), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 2, sharey=True)
    eps = sorted({r["epsilon"] for r in rows})
    for series in dict.fromkeys(series_of_row(r) for r in rows):
        pts = sorted((r for r in rows if series_of_row(r) == series), key=lambda r: r["epsilon"])
        x = [r["epsilon"] for r in pts]
        line = axes[0].plot(x, [r["top1"] for r in pts], marker="o", label=f"{series}, top-1 guess")[0]
        axes[0].plot(
            x, [r["top5"] for r in pts], linestyle="--", color=line.get_color(), label=f"{series}, among top-5"
        )
        right = axes[1].plot(x, [r["unchanged"] for r in pts], marker="o", label=series)[0]
        # 95% intervals as bands (exact figures: zero width).
        for ax, key, color in ((axes[0], "top1", line), (axes[0], "top5", line), (axes[1], "unchanged", right)):
            if all(r.get(f"{key}_lo") is not None for r in pts):
                lo, hi = [r[f"{key}_lo"] for r in pts], [r[f"{key}_hi"] for r in pts]
                ax.fill_between(x, lo, hi, color=color.get_color(), alpha=0.15, linewidth=0)
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


# --- Per-document exposure of sensitive words --------------------------------------------------------


def doc_exposure(
    mechanism: WordMechanism, tokens: np.ndarray, sensitive: np.ndarray, runs: int, rng: np.random.Generator
) -> tuple[float, bool]:
    """(exposure, exact) of one row: the probability that a sensitive word of the row appears anywhere in
    its output, whatever token produced it.

    Args:
        tokens: the embedding rows of the row's tokens with a vector (the mechanism's inputs, every
            occurrence; tokens without one are released as the placeholder and expose nothing).
        sensitive: the embedding rows of the sensitive words the row holds.

    With a closed form (``distribution``) the exposure is exact: tokens are perturbed independently, so
    it is 1 − Π_j (1 − Σ_s P(s | t_j)) over the row's tokens t_j and sensitive words s. Otherwise the
    row is perturbed ``runs`` times with ``sample_copies`` (the mechanism perturb uses) and the exposure
    is the share of runs whose output holds a sensitive word of the row.
    """
    tokens = np.asarray(tokens, dtype=np.int64)
    pos, found = mechanism.space.positions(np.asarray(sensitive, dtype=np.int64))
    pos = pos[found]  # a sensitive word outside the vocabulary W is never released
    step = mechanism.space.block
    log_keep = 0.0
    for start in range(0, len(tokens), step):
        p = mechanism.distribution(tokens[start : start + step])
        if p is None:
            break
        q = np.minimum(p[:, pos].sum(axis=1), 1.0)
        with np.errstate(divide="ignore"):  # q = 1: the row surely shows the word, log 0 = −∞
            log_keep += float(np.log1p(-q).sum())
    else:
        return float(-np.expm1(log_keep)), True
    out = mechanism.vocab_rows[mechanism.sample_copies(tokens, runs, rng)]  # (tokens × runs)
    return float(np.isin(out, np.asarray(sensitive)).any(axis=0).mean()), False


def doc_interval(values: np.ndarray, runs: int, exact: bool) -> tuple[float, float, float]:
    """(share, lo, hi) of the rows' exposures: their mean, rows the unit. Exact exposures give a zero-width
    interval; sampled ones (each the hit share of ``runs`` runs) the binomial interval of ``interval``
    with every row weighted 1."""
    values = np.asarray(values, dtype=np.float64)
    if not len(values):
        return math.nan, math.nan, math.nan
    if exact:
        v = float(values.mean())
        return v, v, v
    n = np.full(len(values), float(runs))
    return interval(np.ones(len(values)), np.round(values * runs), n)


# --- Converged likelihoods: more fitting runs until the figures stop moving --------------------------


def more_fit_items(items: list, settings: set[int], runs: int, block: int = FIT_HALF) -> list:
    """Work items drawing ``runs`` more fitting runs of every word of ``settings``: the chunks of the first
    fitting block of ``items``, numbered after every item so far (the item number keys the noise: new,
    independent draws), in ``block``."""
    from dpspark.stats import WorkItem

    chunks = {(it.setting, it.rows): it for it in items if it.block == FIT_HALF and it.setting in settings}
    first = list(chunks.values())
    start = 1 + max(it.item for it in items)
    return [WorkItem(start + i, it.setting, it.rows, runs, block) for i, it in enumerate(first)]


def moved(before: Mapping[str, float], after: Mapping[str, float], precision: float) -> bool:
    """Whether the reported top-1 or top-5 moved by ``precision`` or more between two fits."""
    return any(abs(after[k] - before[k]) >= precision for k in ("top1", "top5"))
