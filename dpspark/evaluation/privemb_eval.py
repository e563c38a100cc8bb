"""``dpspark evaluate-vectors``: PrivEmb (M2) against M1, as in Feyisetan & Kasiviswanathan (2021), §5.

Three experiments on GloVe 6B 50-d (the default embeddings):

1. Distance approximation (§5.1): 100 words and another 100 words, drawn once from
   the 50,000 most frequent words and kept for every run, give 100 × 100 pairs; for
   each ε and β the error |‖wᵢ − wⱼ‖ − ‖xᵢ − xⱼ‖| of the M2 vectors w (``privemb``,
   m = ``projection_dim(d, δ, β)``) beside |‖vᵢ − vⱼ‖ − ‖xᵢ − xⱼ‖| of the M1 vectors v
   (``m1``; M1 has no β, so it is computed once per ε and shown beside every β).
2. Inner-product approximation (§5.2): |⟨wᵢ, wⱼ⟩ − ⟨xᵢ, xⱼ⟩|, same pairs and settings.
3. Linear classifier (§5.3): logistic regression on private word vectors labelled
   positive/negative by the VADER sentiment lexicon (the paper uses the Hu & Liu
   opinion lexicon, which no package ships), train and test vectors privatized alike.

The paper works at d = 300. The 50-d GloVe vectors are lifted into R³⁰⁰ by a fixed
random orthonormal map Q (300 × 50, the Q of ``np.linalg.qr`` of a seeded Gaussian
matrix): x₃₀₀ = Q x₅₀ keeps every distance and inner product exactly, so the
experiments at d = 300 differ from those at d = 50 only by the dimension the noise
lives in (M1) and the m the formula gives (M2). Both are reported.

This is an experiment, not a release: all noise comes from seeded
``np.random.default_rng`` generators so that the numbers can be reproduced. A real
release must use dpspark's secure generators.

Pure numpy + matplotlib (Agg, through ``matplotlib.figure.Figure``) + scikit-learn
(classifier only); no pyspark. The lexicon and scikit-learn come with the extra
``dpspark[eval]``.
"""

from __future__ import annotations

import csv
import io
import math
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dpspark.embeddings import Embeddings, load_default
from dpspark.errors import ConfigError
from dpspark.outputs import check_output_dir, to_json, writing_into
from dpspark.params import check_beta, check_delta, check_epsilon
from dpspark.privemb import M_FORMULA, draw_projection, m1, privemb, projection_dim

if TYPE_CHECKING:
    from dpspark.config import EvaluateVectorsConfig

FILES = (
    "distance.png",
    "inner_product.png",
    "approximation.csv",
    "classification.csv",
    "evaluation.md",
    "evaluation.json",
)
DIMS = (300, 50)  # 300: GloVe 50-d lifted by Q; 50: GloVe as it is
EPSILONS = (1.0, 2.0, 5.0)
BETAS = (0.5, 0.6, 0.7, 0.8, 0.9)
CLASS_EPSILONS = (5.0, 10.0, 20.0)
CLASS_BETA = 0.8
RUNS = 10
DELTA = 1e-6
N_PAIRS = 100  # 100 × 100 pairs (§5.1)
POOL = 50000  # the pair words come from the 50,000 most frequent GloVe words
SENTIMENT_THRESHOLD = 0.5  # VADER mean rating > 0.5: positive, < −0.5: negative
TEST_SIZE = 0.2
METRICS = ("distance", "inner_product")
METRIC_TITLES = {"distance": "distance error |‖a−b‖ − ‖x−y‖|", "inner_product": "inner-product error |⟨a,b⟩ − ⟨x,y⟩|"}

# Stream tags of the seeded generators: each purpose (and each setting) has its own
# stream, so a result does not change when other settings are added to a run.
_LIFT, _PAIRS, _M1, _PHI, _M2, _BALANCE, _SPLIT, _CLS_M1, _CLS_PHI, _CLS_M2 = range(10)


def _rng(seed: int, tag: int, *keys: float) -> np.random.Generator:
    """``np.random.default_rng([seed, tag, *keys])``; float keys enter as round(key · 10⁶)."""
    return np.random.default_rng([int(seed), tag, *(int(round(k * 1e6)) for k in keys)])


# --------------------------------------------------------------------------- vectors


def lift_matrix(d_in: int, d_out: int, seed: int) -> np.ndarray:
    """Q ∈ R^{d_out × d_in} with orthonormal columns: Q of ``np.linalg.qr`` of a Gaussian matrix.

    x ↦ Qx keeps every distance and inner product (QᵀQ = I).
    """
    if d_out < d_in:
        raise ConfigError(f"cannot lift {d_in}-d vectors into {d_out} dimensions")
    g = _rng(seed, _LIFT).standard_normal((d_out, d_in))
    q, _ = np.linalg.qr(g)  # reduced: d_out × d_in
    return q


def lift(x: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Rows x ↦ Qx (float64)."""
    return np.asarray(x, dtype=np.float64) @ q.T


def sample_pairs(n_vocab: int, seed: int, n: int = N_PAIRS, pool: int = POOL) -> tuple[np.ndarray, np.ndarray]:
    """Two disjoint sets of ``n`` rows from the first ``pool`` words: the n × n word pairs.

    Drawn once (``default_rng([seed, tag]).choice(pool, 2n, replace=False)``) and kept for
    every ε, β, d and mechanism.
    """
    pool = min(int(pool), int(n_vocab))
    if n < 1 or 2 * n > pool:
        raise ConfigError(f"need 2 × {n} distinct words from a pool of {pool}: use fewer pairs or a larger pool")
    rows = _rng(seed, _PAIRS).choice(pool, size=2 * n, replace=False)
    return rows[:n].astype(np.int64), rows[n:].astype(np.int64)


def _distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    sq = (a * a).sum(axis=1)[:, None] + (b * b).sum(axis=1)[None, :] - 2.0 * (a @ b.T)
    return np.sqrt(np.maximum(sq, 0.0))


def pair_errors(x_a: np.ndarray, x_b: np.ndarray, p_a: np.ndarray, p_b: np.ndarray) -> dict[str, np.ndarray]:
    """Errors of the private pairs (p_a[i], p_b[j]) against the original (x_a[i], x_b[j]), flattened."""
    return {
        "distance": np.abs(_distances(p_a, p_b) - _distances(x_a, x_b)).ravel(),
        "inner_product": np.abs(p_a @ p_b.T - x_a @ x_b.T).ravel(),
    }


def _summary(e: np.ndarray) -> dict[str, float]:
    q1, med, q3 = np.percentile(e, (25, 50, 75))
    return {"median": float(med), "mean": float(e.mean()), "q25": float(q1), "q75": float(q3)}


# --------------------------------------------------------------------------- experiments 1–2


@dataclass
class Approximation:
    """Summaries (JSON-ready) and the raw errors behind the box plots."""

    rows: list[dict[str, Any]]
    m: dict[int, dict[float, int]]
    errors: dict[tuple, np.ndarray] = field(repr=False)  # (d, metric, ε, "M1"|"M2", β|None) → errors


def approximation(
    x50: np.ndarray,
    rows_a: np.ndarray,
    rows_b: np.ndarray,
    q: np.ndarray,
    epsilons: Sequence[float],
    betas: Sequence[float],
    delta: float,
    seed: int,
    dims: Sequence[int] = DIMS,
) -> Approximation:
    """Distance and inner-product errors of M1 and M2 on the fixed pairs, for every d, ε and β.

    M1 is drawn once per (d, ε) (it has no β). Φ is drawn once per (d, β) and shared
    by the ε values (the projection is public and independent of ε); the M2 noise is
    drawn per (d, ε, β).
    """
    out_rows: list[dict[str, Any]] = []
    errors: dict[tuple, np.ndarray] = {}
    ms: dict[int, dict[float, int]] = {}
    for d in dims:
        if d == x50.shape[1]:
            x = np.asarray(x50, dtype=np.float64)
        elif d == q.shape[0]:
            x = lift(x50, q)
        else:
            raise ConfigError(f"dimension {d} is neither the embedding's {x50.shape[1]} nor the lift's {q.shape[0]}")
        x_a, x_b = x[rows_a], x[rows_b]
        ms[d] = {b: projection_dim(d, delta, b) for b in betas}
        phis = {b: draw_projection(ms[d][b], d, _rng(seed, _PHI, d, b)) for b in betas}
        for eps in epsilons:
            rng = _rng(seed, _M1, d, eps)
            errs = pair_errors(x_a, x_b, m1(x_a, eps, rng), m1(x_b, eps, rng))
            for metric in METRICS:
                errors[(d, metric, eps, "M1", None)] = errs[metric]
                out_rows.append(
                    {"d": d, "metric": metric, "epsilon": eps, "mechanism": "M1", "beta": None, "m": d}
                    | _summary(errs[metric])
                    | {"pairs": int(errs[metric].size)}
                )
            for b in betas:
                rng = _rng(seed, _M2, d, eps, b)
                phi = phis[b]
                errs = pair_errors(x_a, x_b, privemb(x_a, phi, eps, b, rng), privemb(x_b, phi, eps, b, rng))
                for metric in METRICS:
                    errors[(d, metric, eps, "M2", b)] = errs[metric]
                    out_rows.append(
                        {"d": d, "metric": metric, "epsilon": eps, "mechanism": "M2", "beta": b, "m": ms[d][b]}
                        | _summary(errs[metric])
                        | {"pairs": int(errs[metric].size)}
                    )
    return Approximation(out_rows, ms, errors)


def _median(approx: Approximation, d: int, metric: str, eps: float, mech: str, beta: float | None) -> float:
    for r in approx.rows:
        if (r["d"], r["metric"], r["epsilon"], r["mechanism"], r["beta"]) == (d, metric, eps, mech, beta):
            return r["median"]
    raise KeyError((d, metric, eps, mech, beta))


def findings(approx: Approximation, epsilons: Sequence[float], betas: Sequence[float]) -> list[dict[str, Any]]:
    """Per (d, metric, ε): is M2's median below M1's at every β, and does M1 − M2 grow with β?

    "Grows" means strictly increasing over the βs in increasing order (M1 is the same
    at every β, so this is M2's median strictly decreasing in β).
    """
    out = []
    bs = sorted(betas)
    for d in approx.m:
        for metric in METRICS:
            for eps in epsilons:
                m1_med = _median(approx, d, metric, eps, "M1", None)
                m2 = [_median(approx, d, metric, eps, "M2", b) for b in bs]
                gaps = [m1_med - v for v in m2]
                below = [b for b, v in zip(bs, m2) if v < m1_med]
                out.append(
                    {
                        "d": d,
                        "metric": metric,
                        "epsilon": eps,
                        "m1_median": m1_med,
                        "m2_medians": dict(zip(bs, m2)),
                        "m2_below_m1_at_betas": below,
                        "m2_below_m1_at_every_beta": len(below) == len(bs),
                        "gap_grows_with_beta": len(bs) > 1 and all(g2 > g1 for g1, g2 in zip(gaps, gaps[1:])),
                    }
                )
    return out


# --------------------------------------------------------------------------- experiment 3


def vader_lexicon() -> list[tuple[str, float]]:
    """(token, mean rating) of the VADER lexicon (``vader_lexicon.txt`` of the vaderSentiment package)."""
    try:
        from importlib.resources import files

        text = (files("vaderSentiment") / "vader_lexicon.txt").read_text(encoding="utf-8")
    except (ImportError, ModuleNotFoundError, FileNotFoundError):
        raise ConfigError(
            "the classifier experiment needs the VADER lexicon: pip install 'dpspark[eval]' "
            "(or vaderSentiment), or pass --skip-classifier"
        ) from None
    out = []
    for line in text.splitlines():
        parts = line.rstrip("\r").split("\t")
        if len(parts) >= 2 and parts[0]:
            out.append((parts[0], float(parts[1])))
    return out


def sentiment_dataset(
    emb: Embeddings, lexicon: Sequence[tuple[str, float]], threshold: float, seed: int
) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """Rows and labels (1 positive, 0 negative) of alphabetic lexicon words with a GloVe vector.

    Positive: mean rating > threshold; negative: < −threshold. The larger class is
    subsampled (seeded) to the size of the smaller, as the paper caps both lists.
    """
    pos, neg = [], []
    for word, mean in lexicon:
        if not word.isalpha():
            continue
        row = emb.index_of(word)
        if row < 0:
            continue
        if mean > threshold:
            pos.append(row)
        elif mean < -threshold:
            neg.append(row)
    pos_a, neg_a = np.unique(pos), np.unique(neg)
    n = min(len(pos_a), len(neg_a))
    if n < 5:
        raise ConfigError(f"only {len(pos_a)} positive and {len(neg_a)} negative lexicon words have vectors")
    rng = _rng(seed, _BALANCE)
    pos_k = np.sort(rng.choice(pos_a, size=n, replace=False))
    neg_k = np.sort(rng.choice(neg_a, size=n, replace=False))
    rows = np.concatenate([pos_k, neg_k])
    labels = np.concatenate([np.ones(n, dtype=np.int64), np.zeros(n, dtype=np.int64)])
    info = {
        "lexicon": "VADER (vaderSentiment package, vader_lexicon.txt): token, mean rating in [−4, 4]",
        "rule": f"alphabetic tokens with a GloVe vector; positive if mean > {threshold:g}, "
        f"negative if mean < −{threshold:g}",
        "threshold": threshold,
        "positive_available": int(len(pos_a)),
        "negative_available": int(len(neg_a)),
        "per_class": int(n),
        "balancing": "the larger class subsampled at random (seeded) to the size of the smaller",
    }
    return rows, labels, info


def _fit_score(xtr, ytr, xte, yte) -> tuple[float, float, float, bool]:
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import accuracy_score, roc_auc_score

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        clf = LogisticRegression(max_iter=1000).fit(xtr, ytr)
    converged = not any(issubclass(w.category, ConvergenceWarning) for w in caught)
    score = clf.decision_function(xte)
    return (
        float(accuracy_score(yte, clf.predict(xte))),
        float(roc_auc_score(yte, score)),
        float(accuracy_score(ytr, clf.predict(xtr))),
        converged,
    )


def classification(
    x: np.ndarray,
    labels: np.ndarray,
    epsilons: Sequence[float],
    beta: float,
    runs: int,
    delta: float,
    seed: int,
) -> dict[str, Any]:
    """Logistic regression (max_iter 1000) on non-private, M1 and M2 vectors; 80/20 split.

    Each run draws a new stratified split, new M1 noise and a new release of M2 (Φ and
    noise); every word — train and test — is privatized by the same release.
    """
    try:
        from sklearn.model_selection import train_test_split
    except ImportError:
        raise ConfigError(
            "the classifier experiment needs scikit-learn: pip install 'dpspark[eval]', or pass --skip-classifier"
        ) from None
    d = x.shape[1]
    m = projection_dim(d, delta, beta)
    idx = np.arange(len(labels))
    scores: dict[tuple[str, float | None], list[tuple[float, float, float, bool]]] = {}
    for r in range(runs):
        split_seed = int(_rng(seed, _SPLIT, r).integers(2**31 - 1))
        tr, te = train_test_split(idx, test_size=TEST_SIZE, stratify=labels, random_state=split_seed)
        ytr, yte = labels[tr], labels[te]
        scores.setdefault(("non-private", None), []).append(_fit_score(x[tr], ytr, x[te], yte))
        for eps in epsilons:
            v = m1(x, eps, _rng(seed, _CLS_M1, r, eps))
            scores.setdefault(("M1", eps), []).append(_fit_score(v[tr], ytr, v[te], yte))
            phi = draw_projection(m, d, _rng(seed, _CLS_PHI, r, eps))
            w = privemb(x, phi, eps, beta, _rng(seed, _CLS_M2, r, eps))
            scores.setdefault(("M2", eps), []).append(_fit_score(w[tr], ytr, w[te], yte))

    def sd(a: np.ndarray) -> float:
        return float(a.std(ddof=1)) if len(a) > 1 else 0.0

    rows = []
    for (mech, eps), s in scores.items():
        a = np.asarray([t[:3] for t in s])
        rows.append(
            {
                "mechanism": mech,
                "epsilon": eps,
                "beta": beta if mech == "M2" else None,
                "m": m if mech == "M2" else d,
                "runs": len(s),
                "accuracy_mean": float(a[:, 0].mean()),
                "accuracy_std": sd(a[:, 0]),
                "auc_mean": float(a[:, 1].mean()),
                "auc_std": sd(a[:, 1]),
                "train_accuracy_mean": float(a[:, 2].mean()),
                "not_converged": int(sum(not t[3] for t in s)),
            }
        )
    return {
        "d": d,
        "beta": beta,
        "m": m,
        "runs": runs,
        "test_size": TEST_SIZE,
        "model": "sklearn LogisticRegression(max_iter=1000), default L2 penalty C = 1, on raw vectors",
        "std": "sample standard deviation over runs (ddof = 1)",
        "rows": rows,
    }


# --------------------------------------------------------------------------- the whole evaluation


@dataclass
class Evaluation:
    report: dict[str, Any]
    approx: Approximation = field(repr=False)


def evaluate(
    emb: Embeddings,
    *,
    epsilons: Sequence[float] = EPSILONS,
    betas: Sequence[float] = BETAS,
    class_epsilons: Sequence[float] = CLASS_EPSILONS,
    class_beta: float = CLASS_BETA,
    runs: int = RUNS,
    delta: float = DELTA,
    seed: int = 0,
    n_pairs: int = N_PAIRS,
    pool: int = POOL,
    lexicon: Sequence[tuple[str, float]] | None = None,
    skip_classifier: bool = False,
    lift_dim: int = DIMS[0],
) -> Evaluation:
    """Run the three experiments; ``lexicon`` None reads VADER (only when the classifier runs)."""
    epsilons = [check_epsilon(e) for e in epsilons]
    betas = sorted(check_beta(b) for b in betas)
    class_epsilons = [check_epsilon(e) for e in class_epsilons]
    class_beta = check_beta(class_beta)
    delta = check_delta(delta)
    if not epsilons or not betas:
        raise ConfigError("need at least one ε and one β")
    if int(runs) < 1:
        raise ConfigError(f"runs must be at least 1, got {runs}")
    d0 = emb.dim
    dims = (lift_dim, d0) if lift_dim != d0 else (d0,)
    timings: dict[str, float] = {}

    t0 = time.perf_counter()
    q = lift_matrix(d0, lift_dim, seed)
    rows_a, rows_b = sample_pairs(len(emb), seed, n_pairs, pool)
    approx = approximation(emb.vectors, rows_a, rows_b, q, epsilons, betas, delta, seed, dims)
    timings["approximation"] = time.perf_counter() - t0
    found = findings(approx, epsilons, betas)

    cls = None
    if not skip_classifier:
        t0 = time.perf_counter()
        lex = vader_lexicon() if lexicon is None else lexicon
        rows, labels, info = sentiment_dataset(emb, lex, SENTIMENT_THRESHOLD, seed)
        cls = classification(lift(emb.vectors[rows], q), labels, class_epsilons, class_beta, int(runs), delta, seed)
        cls["dataset"] = info
        timings["classification"] = time.perf_counter() - t0

    x = np.asarray(emb.vectors, dtype=np.float64)
    xq = lift(x[rows_a[:5]], q)
    report = {
        "title": "dpspark evaluate-vectors: PrivEmb (M2) against M1 (Feyisetan & Kasiviswanathan 2021, §5)",
        "embeddings": {"name": emb.name, "sha256": emb.sha256, "dim": d0, "words": len(emb)},
        "lift": {
            "dim": lift_dim,
            "map": f"x_{lift_dim} = Q x_{d0}, Q ({lift_dim}×{d0}) the orthonormal Q of numpy.linalg.qr of a "
            f"standard Gaussian {lift_dim}×{d0} matrix from numpy.random.default_rng([{seed}, {_LIFT}])",
            "keeps": "every distance and inner product exactly (QᵀQ = I)",
            "max_abs_QtQ_minus_I": float(np.abs(q.T @ q - np.eye(d0)).max()),
            "check_norm_rel_error": float(
                np.abs(np.linalg.norm(xq, axis=1) / np.linalg.norm(x[rows_a[:5]], axis=1) - 1).max()
            ),
        },
        "settings": {
            "epsilons": epsilons,
            "betas": betas,
            "delta": delta,
            "seed": seed,
            "m_formula": M_FORMULA,
            "m": {str(d): {f"{b:g}": mm for b, mm in approx.m[d].items()} for d in approx.m},
            "noise": "seeded numpy.random.default_rng streams (an experiment, reproducible; not a release)",
        },
        "pairs": {
            "n": int(n_pairs),
            "pool": int(min(pool, len(emb))),
            "rule": f"{2 * n_pairs} distinct rows of the first {min(pool, len(emb))} words, "
            f"numpy.random.default_rng([{seed}, {_PAIRS}]).choice(..., replace=False); the first {n_pairs} "
            f"against the other {n_pairs}, the same pairs for every d, ε, β and mechanism",
            "words_a": [emb.words[i] for i in rows_a],
            "words_b": [emb.words[i] for i in rows_b],
        },
        "approximation": approx.rows,
        "findings": found,
        "classification": cls,
        "timings_s": timings,
    }
    return Evaluation(report, approx)


# --------------------------------------------------------------------------- output


def _csv(rows: list[dict[str, Any]], columns: Sequence[str]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(columns), extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in columns})
    return buf.getvalue()


APPROX_COLUMNS = ("d", "metric", "epsilon", "mechanism", "beta", "m", "median", "mean", "q25", "q75", "pairs")
CLASS_COLUMNS = (
    "mechanism",
    "epsilon",
    "beta",
    "m",
    "runs",
    "accuracy_mean",
    "accuracy_std",
    "auc_mean",
    "auc_std",
    "train_accuracy_mean",
    "not_converged",
)


def _f(x: float) -> str:
    return f"{x:.3g}" if abs(x) < 1000 else f"{x:.0f}"


def _markdown(r: dict[str, Any], approx: Approximation) -> str:
    s, e, lf, pr = r["settings"], r["embeddings"], r["lift"], r["pairs"]
    eps, betas = s["epsilons"], s["betas"]
    lines = [
        f"# {r['title']}",
        "",
        f"Embeddings: **{e['name']}** ({e['words']} words, d = {e['dim']}). δ = {s['delta']:g}; {s['m_formula']}.",
        "",
        f"**d = {lf['dim']}**: the {e['dim']}-d vectors lifted by {lf['map']}. The lift keeps {lf['keeps']} "
        f"(max |QᵀQ − I| = {lf['max_abs_QtQ_minus_I']:.1e}), so d = {lf['dim']} and d = {e['dim']} differ only "
        "in the dimension the noise lives in (M1) and in the m of the formula (M2).",
        "",
        f"Pairs: {pr['n']} × {pr['n']}, {pr['rule']}.",
        "",
        f"Noise: {s['noise']}. M1 has no β: it is computed once per ε and is the same number beside every β. "
        "Φ is drawn once per (d, β) and shared by the ε values.",
        "",
    ]
    for d in approx.m:
        ms = approx.m[d]
        lines.append(f"m at d = {d}: " + ", ".join(f"β = {b:g}: m = {ms[b]}" for b in betas) + ".")
    if any(mm >= d for d in approx.m for mm in approx.m[d].values()):
        lines += [
            "",
            "Where m ≥ d the projection does not reduce the dimension: M2 only adds noise in m ≥ d dimensions "
            "with the larger scale (1 + β)/ε, so it cannot beat M1 there.",
        ]
    lines += [
        "",
        "Noise per vector: E‖noise‖ = d/ε for M1 and m(1 + β)/ε for M2, so M2 adds less noise only where "
        "m(1 + β) < d: "
        + "; ".join(
            f"d = {d}: m(1 + β) = " + ", ".join(f"{approx.m[d][b] * (1 + b):.0f}" for b in betas) for d in approx.m
        )
        + ". M2 also carries the projection's own distortion (about ‖x − y‖/sqrt(2m) in distance), which does "
        "not shrink with ε: at large ε (small noise) it dominates and M1 is the more accurate.",
    ]
    lines.append("")
    for metric in METRICS:
        lines += [f"## Median {METRIC_TITLES[metric]}", ""]
        for d in approx.m:
            lines += [
                f"d = {d} (M2 m per β: " + ", ".join(str(approx.m[d][b]) for b in betas) + ")",
                "",
                "| ε | M1 | " + " | ".join(f"M2 β={b:g}" for b in betas) + " |",
                "|---:|---:|" + "---:|" * len(betas),
            ]
            for ep in eps:
                m1_med = _median(approx, d, metric, ep, "M1", None)
                cells = [_f(_median(approx, d, metric, ep, "M2", b)) for b in betas]
                lines.append(f"| {ep:g} | {_f(m1_med)} | " + " | ".join(cells) + " |")
            lines.append("")
    lines += ["Means and quartiles: approximation.csv. Box plots: distance.png, inner_product.png.", ""]
    lines += ["## Findings", ""]
    for f in r["findings"]:
        below = f["m2_below_m1_at_betas"]
        if f["m2_below_m1_at_every_beta"]:
            b_txt = "M2's median is below M1's at every β"
        elif below:
            b_txt = "M2's median is below M1's only at β ∈ {" + ", ".join(f"{b:g}" for b in below) + "}"
        else:
            b_txt = "M2's median is above M1's at every β"
        if not f["gap_grows_with_beta"]:
            g_txt = "the gap M1 − M2 does not grow strictly with β"
        elif below:
            g_txt = "the gap M1 − M2 grows with β"
        else:
            g_txt = "M2's excess over M1 shrinks as β grows (M1 − M2 increases)"
        lines.append(f"- d = {f['d']}, {f['metric'].replace('_', ' ')}, ε = {f['epsilon']:g}: {b_txt}; {g_txt}.")
    lines.append("")
    cls = r["classification"]
    if cls is None:
        lines += ["## Linear classifier", "", "Skipped (--skip-classifier).", ""]
    else:
        ds = cls["dataset"]
        lines += [
            "## Linear classifier",
            "",
            f"{ds['lexicon']}; {ds['rule']}: {ds['positive_available']} positive and {ds['negative_available']} "
            f"negative words; {ds['balancing']}: {ds['per_class']} per class. Vectors at d = {cls['d']} "
            f"(lifted); M2 at β = {cls['beta']:g} (m = {cls['m']}). {cls['model']}; "
            f"{int((1 - cls['test_size']) * 100)}/{int(cls['test_size'] * 100)} stratified split; {cls['runs']} runs, "
            "each with a new split, new M1 noise and a new M2 release (Φ and noise), train and test vectors "
            f"privatized alike. Mean ± {cls['std']}.",
            "",
            "| mechanism | ε | test accuracy | AUC | train accuracy |",
            "|---|---:|---:|---:|---:|",
        ]
        for row in cls["rows"]:
            mech = row["mechanism"] + (f" (β={row['beta']:g}, m={row['m']})" if row["mechanism"] == "M2" else "")
            ep = "—" if row["epsilon"] is None else f"{row['epsilon']:g}"
            lines.append(
                f"| {mech} | {ep} | {row['accuracy_mean']:.3f} ± {row['accuracy_std']:.3f} "
                f"| {row['auc_mean']:.3f} ± {row['auc_std']:.3f} | {row['train_accuracy_mean']:.3f} |"
            )
        bad = sum(row["not_converged"] for row in cls["rows"])
        if bad:
            lines += ["", f"{bad} fits stopped at max_iter without converging (see classification.csv)."]
        lines.append("")
    return "\n".join(lines)


def _figure(  # noqa: ANN202
    approx: Approximation,
    metric: str,
    epsilons: Sequence[float],
    betas: Sequence[float],
    embedding: str | None = None,
):
    """The Figure of one box-plot file: a row per dimension d, a column per ε, M1 and M2 side by
    side at each β; panels of one ε (a column) share their y scale, since the error shrinks with ε
    by orders of magnitude across columns."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    from dpspark.report import legend_below

    dims = list(approx.m)
    fig = Figure(figsize=(4.4 * len(epsilons) + 0.5, 3.8 * len(dims) + 1.0), layout="constrained")
    FigureCanvasAgg(fig)
    axes = np.atleast_2d(fig.subplots(len(dims), len(epsilons), squeeze=False, sharey="col"))
    colors = {"M1": "#9e9e9e", "M2": "C0"}
    for i, d in enumerate(dims):
        for j, eps in enumerate(epsilons):
            ax = axes[i, j]
            data, pos, cols = [], [], []
            for k, b in enumerate(betas):
                data += [approx.errors[(d, metric, eps, "M1", None)], approx.errors[(d, metric, eps, "M2", b)]]
                pos += [3 * k, 3 * k + 1]
                cols += [colors["M1"], colors["M2"]]
            bp = ax.boxplot(data, positions=pos, widths=0.8, showfliers=False, patch_artist=True)
            for patch, c in zip(bp["boxes"], cols):
                patch.set_facecolor(c)
            for med in bp["medians"]:
                med.set_color("black")
            ax.set_xticks([3 * k + 0.5 for k in range(len(betas))])
            ax.set_xticklabels([f"β={b:g}\nm={approx.m[d][b]}" for b in betas], fontsize=8)
            ax.set_xlabel("M2's β (m: its projected dimension)", fontsize=8)
            ax.set_title(f"d = {d}, ε = {eps:g}", fontsize=10)
            ax.grid(True, axis="y", alpha=0.3)
            ax.tick_params(labelleft=True)  # every panel keeps its scale when shared
            ax.set_ylabel(f"{METRIC_TITLES[metric]} per pair", fontsize=8)
    legend_below(fig, [Patch(facecolor=colors["M1"]), Patch(facecolor="C0")], ["M1 (no β; same at every β)", "M2"])
    n = math.isqrt(next(iter(approx.errors.values())).size)
    source = f"{embedding}, " if embedding else ""
    fig.suptitle(
        f"{METRIC_TITLES[metric]}\n{source}d = {' and '.join(str(d) for d in dims)}: {n} × {n} fixed pairs "
        "(boxes: quartiles; whiskers 1.5 IQR); y shared within each ε",
        fontsize=11,
    )
    return fig


def _plot(
    approx: Approximation,
    metric: str,
    epsilons: Sequence[float],
    betas: Sequence[float],
    path: Path,
    embedding: str | None = None,
) -> None:
    _figure(approx, metric, epsilons, betas, embedding).savefig(path, dpi=100, bbox_inches="tight")


def write_outputs(ev: Evaluation, out_dir: str | Path, overwrite: bool = False) -> list[Path]:
    """Write FILES into ``out_dir``; on any failure remove what this call created."""
    out_dir = Path(out_dir)
    r = ev.report
    eps, betas = r["settings"]["epsilons"], r["settings"]["betas"]
    with writing_into(out_dir, overwrite, "evaluation") as written:
        paths = {f: out_dir / f for f in FILES}
        cls_rows = r["classification"]["rows"] if r["classification"] else []
        contents = {
            "approximation.csv": _csv(r["approximation"], APPROX_COLUMNS),
            "classification.csv": _csv(cls_rows, CLASS_COLUMNS),
            "evaluation.md": _markdown(r, ev.approx),
            "evaluation.json": to_json(r),
        }
        for name, body in contents.items():
            written.append(paths[name])
            paths[name].write_text(body, encoding="utf-8")
        for metric, name in zip(METRICS, ("distance.png", "inner_product.png")):
            written.append(paths[name])
            _plot(ev.approx, metric, eps, betas, paths[name], r["embeddings"]["name"])
    return [out_dir / f for f in FILES]


# --------------------------------------------------------------------------- command


def run(config: EvaluateVectorsConfig) -> int:
    """Execute ``dpspark evaluate-vectors`` with its validated settings (``config.quiet``: print nothing)."""
    if not config.output:
        raise ConfigError("evaluate-vectors needs --output DIR")
    overwrite = config.mode == "overwrite"
    out_dir = Path(config.output)
    check_output_dir(out_dir, overwrite, "evaluation")  # fail before the work, not after
    t0 = time.perf_counter()
    ev = evaluate(
        load_default(),
        epsilons=config.epsilons,
        betas=config.betas,
        class_epsilons=config.class_epsilons,
        class_beta=config.class_beta,
        runs=config.runs,
        delta=config.delta,
        seed=0 if config.seed is None else config.seed,  # an experiment: always reproducible
        n_pairs=config.pairs,
        skip_classifier=config.skip_classifier,
    )
    write_outputs(ev, out_dir, overwrite=overwrite)
    if config.quiet:
        return 0
    r = ev.report
    print(f"evaluate-vectors: {r['embeddings']['name']}, d = {' and '.join(str(d) for d in ev.approx.m)}")
    for f in r["findings"]:
        if f["metric"] == "distance":
            print(
                f"  d = {f['d']}, ε = {f['epsilon']:g}: median distance error M1 {f['m1_median']:.3g}, M2 "
                + ", ".join(f"β={b:g}: {v:.3g}" for b, v in f["m2_medians"].items())
            )
    print(f"  {time.perf_counter() - t0:.1f} s; written to {out_dir}/ ({', '.join(FILES)})")
    return 0
