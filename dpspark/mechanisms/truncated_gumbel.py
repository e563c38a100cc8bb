"""The Truncated Gumbel word mechanism (FLAIRS-34, 2021, doi:10.32473/flairs.v34i1.128463).

**Unverified.** The paper could not be read here: its authors and the proof of its guarantee
are not verified. This module implements the mechanism exactly as mechanisms.md states it, and
the manifest says that the guarantee is the paper's claim, not a checked result.

The mechanism, over the output vocabulary W (V words), d the Euclidean distance:

- Δ = max and Δ0 = min of d over pairs of *distinct* vectors of W (identical vectors are one
  point: Δ0 = 0 would make α = −∞);
- α = (ε − 2(1 + ln V)/Δ0)/3 and b = 2Δ / min{W₀(2αΔ), ln(αΔ0)}, W₀ the principal branch of
  the Lambert W function;
- per token w: k ~ Poisson(ln V) truncated to {1, …, V}; u_1..u_k the k nearest words of W to w
  (u_1 = w when w ∈ W; an embedded word outside W takes its k nearest words of W), ordered by
  exact distance; g_1..g_k iid Gumbel(0, b) truncated to [−Δ, Δ]; the output is u_j with
  j = argmin_j d(w, u_j) + g_j.

Validity. b > 0 needs ln(αΔ0) > 0 and W₀(2αΔ) > 0, i.e. αΔ0 > 1 (which gives α > 0 and, as
Δ ≥ Δ0, 2αΔ > 0, so W₀(2αΔ) > 0 too):
    (ε − 2(1 + ln V)/Δ0)·Δ0/3 > 1  ⟺  ε > (5 + 2 ln V)/Δ0.
GloVe 6B 50-d: over its first 50,000 words Δ = 21.104 ("eighteens"–"202-383-7824"), Δ0 = 0.35136
("monday"–"tuesday"), threshold 75.82; over all 400,000 words Δ is the same and Δ0 = 0.0054465
("srivalo"–"piyanart"), threshold 5,654.7. ``prepare`` and ``build`` refuse a smaller ε with a
ConfigError naming the threshold; above it W₀'s argument is positive (its value real) and b finite
and positive. Just above the threshold b is huge (the noise nearly uniform on [−Δ, Δ]) and it falls
only logarithmically in ε (over 50,000 words: b = 106 at ε = 80, 23 at 120, 9 at 1,000). As Δ is
set by two outlying vectors, the noise spans ±21 while a word's nearest neighbours lie within a
few units: the law moves little with ε (P(w | w) ≈ 13–20% from ε = 80 to 1,000).

The law. Given k, u_j wins iff d_j + g_j < d_i + g_i for every other i ≤ k, so
    P(u_j | w) = Σ_{k ≥ j} P(k) ∫_{−Δ}^{Δ} f(x) Π_{i ≤ k, i ≠ j} (1 − F_t(d_j + x − d_i)) dx,
f and F_t the density and CDF of the truncated Gumbel. There is no closed form
(``distribution`` is None); ``output_law`` evaluates it by composite Gauss–Legendre
quadrature split at the kinks of F_t, to about 1e-15 (``TruncatedGumbelSampler.law``).

The claim. P(y | w) ≤ P(k ≥ rank of y among w's nearest words): it depends on ranks, not on
distances, and that is not ε·d-private as stated. Computed here exactly on one side and bounded on
the other (tests/statistical/test_conformance.py), over 50,000 words at ε = 80: "the" and "of"
(ε·d = 175) have an output with ln P(y | the) − ln P(y | of) ≥ 359; "paris" and "france"
(ε·d = 291) one with ≥ 52,000. Whatever the paper proves, it is not this bound for this
mechanism as stated here: the manifest says so.

Pitfalls of the peers (mechanisms.md): the MLDP benchmark ran it at ε = 1, 5 and 10, all
below the threshold, and took the real part of a complex Lambert W: its b barely moves with ε
(8.29 at ε = 1, 8.50 at ε = 10 over 50,000 words, ``tests/statistical/peer_mistakes.py``), so
its published rows are ε-independent. mldp-text estimates Δ and Δ0 from one random word and
uses squared distances.

Computation:

- Δ and Δ0 (``diameters``): exact, by one tiled float64 pass over the distinct vectors of W:
  blocked GEMMs of TILE × TILE squared distances with the norms folded in as two extra columns
  (one GEMM and one reduction per tile), and tile pairs that cannot hold the extreme pairs skipped
  by proven bounds. Pairs within a rounding margin of the running extremes are recomputed
  directly, Σ(x − y)², so Δ and Δ0 equal the float64 brute force. Measured on one core of a
  2-core Intel Xeon (Sapphire Rapids, KVM; shared with other work): 1.1 s over 50,000 words and
  6–7 s over 400,000 (1,519 of 76,636 tile pairs visited, Δ0 being small there; at 2.1 ms per
  tile pair all of them would take about 3 minutes). At 400,000 words it belongs in a Spark job
  (tile pairs as tasks, a min/max reduce), should a vocabulary prune less well. The result is
  kept per vocabulary (``Space.artefact``, ``store=True``, content-addressed on φ(W)).
- the sampler: per distinct word of a batch its K_max nearest words (K_max the smallest K with
  P(k > K) < 1e-15: 46 for 50,000 words, 50 for 400,000), exactly (``nearest``: float32 scores,
  a proven margin, float64 re-ranking), kept for the next batches (MEMO_WORDS words); an exact
  top-k query for the rare token with k > K_max. k per token by inverse CDF of the truncated
  Poisson, the Gumbels of all tokens in one array (masked beyond each token's k), one argmin per
  row. On the same core: 0.26 ms per new word over 50,000 words (1.9 ms over 400,000) and then
  about 10⁶ tokens/s; 100,000 Zipfian tokens (19,661 distinct words) 4.4 s cold. A table of the
  whole vocabulary instead would cost 13 s once over 50,000 words but 12 minutes and 240 MB over
  400,000: per batch it is.
"""

from __future__ import annotations

import math
from typing import ClassVar, Literal

import numpy as np

from dpspark.errors import ConfigError
from dpspark.mechanisms.base import MechanismSpec, Space, WordMechanism

TAIL = 1e-15  # P(k > K_max) below this: the rest take an exact top-k query
TILE = 1024  # vectors per tile of the Δ/Δ0 pass (1024 × 1024 float64 scores, 8 MiB)
SHELL = 16  # tiles per shell of equal distance from the mean, sorted by the first principal coordinate
TOKENS = 1 << 16  # tokens per block of Gumbel draws
NODES = 12  # Gauss–Legendre nodes per quadrature piece
MEMO_WORDS = 1 << 16  # neighbour lists a sampler keeps (≈ 50 MB at K_max = 50)
ARTEFACT = "truncated-gumbel/diameters/v1"  # the version: a change of the pass gets a new name
# Rows whose distances to all of W bound a cached Δ and Δ0 on load (``diameters_fault``), drawn at random.
SAMPLED_ROWS = 8


# --------------------------------------------------------------------------------------------
# The public constants of a vocabulary: Δ, Δ0, the threshold, b, K_max


def diameters(vectors: np.ndarray, tile: int = TILE, shell: int = SHELL) -> np.ndarray:  # noqa: C901 - numeric kernel
    """[Δ, Δ0, n, far_a, far_b, near_a, near_b]: the largest and smallest Euclidean distance over the n
    distinct rows of ``vectors`` (V × d), and the rows of a pair attaining each (float64 array).

    Exact: equal to the float64 brute force min/max of sqrt(Σ(x − y)²) over pairs of distinct rows.
    Rows equal bit for bit (−0.0 = 0.0) are one point.

    One pass over tiles of ``tile`` vectors, in an order that makes tiles tight: by r = ‖x − c‖ (c the
    mean) into shells of ``shell`` tiles, by p = v·(x − c) (v the first principal axis) inside a shell.
    A tile pair (I, J) gets one GEMM of [y, ‖y‖², 1]·[−2y, 1, ‖y‖²]ᵀ = ‖y_a − y_b‖² (y = x − c)
    and one reduction, unless a bound rules it out:
      d(a, b) ≥ max(|r_a − r_b|, |p_a − p_b|) ≥ the gap between the tiles' intervals of r and of p,
      d(a, b) ≤ r_a + r_b ≤ max r_I + max r_J.
    The pairs are visited by decreasing upper bound while it exceeds the largest distance found,
    then by increasing lower bound while it is below the smallest found. A GEMM entry differs from
    the exact squared distance by at most ≈ 300·2⁻⁵³·R² (R = max r: the norms folded in, the
    centring, K = d + 2 products); every entry within TOL = 2⁻³⁰·(1 + R²) (far above that) of the
    running extreme is recomputed directly from the original rows, so no pair can be missed.
    """
    x = np.ascontiguousarray(vectors, dtype=np.float64)
    if x.ndim != 2 or len(x) == 0:
        raise ValueError("diameters needs a non-empty V × d matrix")
    keys = np.ascontiguousarray(x + 0.0)  # −0.0 → 0.0, so equal vectors have equal bytes
    _, first = np.unique(keys.view(np.dtype((np.void, keys.itemsize * x.shape[1]))).ravel(), return_index=True)
    del keys
    first = np.sort(first)
    n = len(first)
    if n < 2:
        raise ConfigError(
            f"truncated-gumbel needs at least two distinct vectors in the output vocabulary (got {n}): "
            "Δ0 is the smallest distance between two of them"
        )
    y = x[first]
    y -= y.mean(axis=0)
    r = np.sqrt(np.einsum("ij,ij->i", y, y))
    axis = np.linalg.eigh(y.T @ y)[1][:, -1]
    p = y @ axis
    order = np.argsort(r, kind="stable")
    for s in range(0, n, tile * shell):
        part = order[s : s + tile * shell]
        order[s : s + tile * shell] = part[np.argsort(p[part], kind="stable")]
    rows, r, p = first[order], r[order], p[order]
    y = y[order]
    sq = np.einsum("ij,ij->i", y, y)
    left = np.concatenate([y, sq[:, None], np.ones((n, 1))], axis=1)
    right = np.ascontiguousarray(np.concatenate([-2.0 * y, np.ones((n, 1)), sq[:, None]], axis=1).T)
    del y

    starts = np.arange(0, n, tile)
    ends = np.minimum(starts + tile, n)
    r_lo, r_hi = np.minimum.reduceat(r, starts), np.maximum.reduceat(r, starts)
    p_lo, p_hi = np.minimum.reduceat(p, starts), np.maximum.reduceat(p, starts)
    big = float(r.max())
    tol = 2.0**-30 * (1.0 + big * big)
    margin = 1e-9 * (1.0 + big)  # rounding of r and p
    a, b = np.triu_indices(len(starts))
    lower = np.maximum.reduce([r_lo[b] - r_hi[a], r_lo[a] - r_hi[b], p_lo[b] - p_hi[a], p_lo[a] - p_hi[b]])
    upper = r_hi[a] + r_hi[b]

    far, near = [-np.inf, -1, -1], [np.inf, -1, -1]  # exact squared distance, rows in W
    buffer = np.empty((tile, tile))

    def exact(ia: np.ndarray, ib: np.ndarray) -> np.ndarray:
        diff = x[rows[ia]] - x[rows[ib]]
        return np.einsum("ij,ij->i", diff, diff)

    def keep(best: list, e: np.ndarray, ia: np.ndarray, ib: np.ndarray, k: int) -> None:
        if (e[k] > best[0]) if best is far else (e[k] < best[0]):
            best[:] = [float(e[k]), int(rows[ia[k]]), int(rows[ib[k]])]

    def visit(t: int, both: bool) -> None:
        """One tile pair: its GEMM, then Δ (when ``both``) and Δ0 from the entries near the extremes."""
        i, j = a[t], b[t]
        s = buffer[: ends[i] - starts[i], : ends[j] - starts[j]]
        np.matmul(left[starts[i] : ends[i]], right[:, starts[j] : ends[j]], out=s)
        if both:
            top = float(s.max())
            if top >= far[0] - tol:
                ii, jj = np.nonzero(s >= max(far[0], top - tol) - tol)
                e = exact(ii + starts[i], jj + starts[j])
                keep(far, e, ii + starts[i], jj + starts[j], int(np.argmax(e)))
        if i == j:
            np.fill_diagonal(s, np.inf)
        low = float(s.min())
        if low <= near[0] + tol:
            ii, jj = np.nonzero(s <= min(near[0], low + tol) + tol)
            e = exact(ii + starts[i], jj + starts[j])
            keep(near, e, ii + starts[i], jj + starts[j], int(np.argmin(e)))

    done = np.zeros(len(a), dtype=bool)
    for t in np.argsort(-upper, kind="stable"):  # every pair that could hold Δ (then Δ0 from them too)
        if upper[t] < math.sqrt(max(far[0], 0.0)) - margin:
            break
        visit(t, both=True)
        done[t] = True
    for t in np.argsort(lower, kind="stable"):  # every other pair that could hold Δ0
        if lower[t] > math.sqrt(near[0]) + margin:
            break
        if not done[t]:
            visit(t, both=False)
    return np.array([math.sqrt(far[0]), math.sqrt(near[0]), n, far[1], far[2], near[1], near[2]], dtype=np.float64)


def diameters_fault(
    vectors: np.ndarray, values: np.ndarray, samples: int = SAMPLED_ROWS, rng: np.random.Generator | None = None
) -> str | None:
    """Why ``values`` cannot be ``diameters(vectors)``, or None: what a cached Δ and Δ0 must show before they
    set the Gumbel scale. Each is the distance of the pair of rows it names (so Δ is no larger and Δ0 no
    smaller than the true ones), 0 < Δ0 ≤ Δ, and no distance from ``samples`` rows drawn at random (the
    operating system's randomness) to the rest exceeds Δ or, between distinct points, falls below Δ0
    (≈ V·d flops a row). A relative 1e-12 absorbs the rounding of the two ways of summing."""
    values = np.asarray(values)
    if values.dtype != np.float64 or values.shape != (7,) or not np.isfinite(values).all():
        return f"a {values.dtype} array of shape {values.shape}, not 7 finite numbers"
    x = np.asarray(vectors, dtype=np.float64)
    pairs = values[3:].astype(np.int64)
    if (values[3:] != pairs).any() or (pairs < 0).any() or (pairs >= len(x)).any():
        return "the pairs it names are not rows of W"
    delta, delta0 = float(values[0]), float(values[1])
    diff = x[pairs[[0, 2]]] - x[pairs[[1, 3]]]
    named = np.sqrt(np.einsum("ij,ij->i", diff, diff))
    if not (np.isclose(named, [delta, delta0], rtol=1e-12, atol=0).all() and 0 < delta0 <= delta):
        return "its Δ or Δ0 is not the distance of the pair it names"
    rng = rng or np.random.default_rng()
    for r in rng.choice(len(x), min(samples, len(x)), replace=False):
        diff = x - x[r]
        d = np.sqrt(np.einsum("ij,ij->i", diff, diff))
        if d.max() > delta * (1 + 1e-12) or d[d > 0].min(initial=np.inf) < delta0 * (1 - 1e-12):
            return f"row {r} has a word farther than Δ or nearer than Δ0"
    return None


def threshold(size: int, delta0: float) -> float:
    """(5 + 2 ln V)/Δ0: b > 0 exactly when ε exceeds it (see the module's docstring)."""
    return (5.0 + 2.0 * math.log(size)) / delta0


def gumbel_scale(epsilon: float, size: int, delta: float, delta0: float) -> float:
    """b = 2Δ / min{W₀(2αΔ), ln(αΔ0)}, α = (ε − 2(1 + ln V)/Δ0)/3, or a ConfigError where b is not a
    positive number (ε ≤ (5 + 2 ln V)/Δ0: αΔ0 ≤ 1)."""
    alpha = (epsilon - 2.0 * (1.0 + math.log(size)) / delta0) / 3.0
    b = math.nan
    if alpha * delta0 > 1.0:  # then 2αΔ > 0: W₀ is real and positive there
        from scipy import special

        w = special.lambertw(2.0 * alpha * delta, 0)
        if w.imag == 0.0 and w.real > 0.0:
            b = 2.0 * delta / min(float(w.real), math.log(alpha * delta0))
    if not (math.isfinite(b) and b > 0.0):
        raise ConfigError(
            f"truncated-gumbel is defined only for epsilon > (5 + 2 ln V)/Δ0 = {threshold(size, delta0):.6g} on this "
            f"vocabulary (V = {size} words, Δ0 = {delta0:.6g} the smallest distance between two of its words): below "
            f"it the Gumbel scale b = 2Δ/min(W0(2αΔ), ln(αΔ0)) is not a positive number. Got epsilon = {epsilon:g}: "
            f"use a larger epsilon (> {threshold(size, delta0):.6g}) or another mechanism"
        )
    return b


def k_law(size: int, upto: int) -> np.ndarray:
    """P(k) for k = 1..upto (upto ≤ V) of Poisson(ln V) truncated to {1, …, V} (float64)."""
    from scipy import stats  # scipy is imported where Truncated Gumbel runs only

    lam = math.log(size)
    norm = stats.poisson.cdf(size, lam) - stats.poisson.pmf(0, lam)
    return stats.poisson.pmf(np.arange(1, upto + 1), lam) / norm


def k_max(size: int) -> int:
    """The smallest K ≤ V with P(k > K) < TAIL for k ~ Poisson(ln V) truncated to {1, …, V}."""
    from scipy import stats

    lam = math.log(size)
    ks = np.arange(1, min(size, 4096) + 1)
    norm = stats.poisson.cdf(size, lam) - stats.poisson.pmf(0, lam)
    tail = (stats.poisson.sf(ks, lam) - stats.poisson.sf(size, lam)) / norm
    below = np.flatnonzero(tail < TAIL)
    return int(ks[below[0]]) if len(below) else int(ks[-1])


# --------------------------------------------------------------------------------------------
# The truncated Gumbel noise


def gumbel_cdf(x: np.ndarray, b: float, delta: float) -> np.ndarray:
    """F_t(x) = (F(x) − F(−Δ))/(F(Δ) − F(−Δ)) on [−Δ, Δ] (0 below, 1 above), F(x) = exp(−e^{−x/b})."""
    return 1.0 - np.exp(_log_survival(np.asarray(x, dtype=np.float64), b, delta))


def _log_survival(y: np.ndarray, b: float, delta: float) -> np.ndarray:
    """ln(1 − F_t(y)), written as ln[expm1(e^{−Δ/b} − e^{−y/b}) / expm1(e^{−Δ/b} − e^{Δ/b})] for y clipped
    to [−Δ, Δ] (no cancellation near Δ): 0 at −Δ, −∞ at Δ."""
    ed = math.exp(-delta / b)
    y = np.clip(y, -delta, delta)
    with np.errstate(divide="ignore"):  # ln 0 = −∞ at y = Δ (the minimum keeps a rounding there at 0)
        return np.log(np.expm1(np.minimum(ed - np.exp(-y / b), 0.0)) / math.expm1(ed - math.exp(delta / b)))


def _gumbel_density(x: np.ndarray, b: float, delta: float) -> np.ndarray:
    """f_t(x) = e^{−x/b}·F(x) / (b·(F(Δ) − F(−Δ))) on [−Δ, Δ]."""
    ed = math.exp(-delta / b)
    mass = -math.exp(-ed) * math.expm1(ed - math.exp(delta / b))  # F(Δ) − F(−Δ)
    z = np.exp(-x / b)
    return z * np.exp(-z) / (b * mass)


def sample_gumbel(n: int, b: float, delta: float, rng: np.random.Generator) -> np.ndarray:
    """n iid Gumbel(0, b) truncated to [−Δ, Δ], by inverse CDF:
    g = −b·ln(−ln t), t = F(−Δ) + U·(F(Δ) − F(−Δ)), U uniform on [0, 1).

    −ln t is taken as −ln t for t < ½ and as −log1p(−(1 − t)) above, with
    1 − t = (1 − F(Δ)) + (1 − U)(F(Δ) − F(−Δ)) computed directly (no cancellation near t = 1).
    """
    u = rng.random(n)
    ed = math.exp(-delta / b)
    low = math.exp(-math.exp(delta / b))  # F(−Δ)
    high_gap = -math.expm1(-ed)  # 1 − F(Δ)
    mass = -math.exp(-ed) * math.expm1(ed - math.exp(delta / b))  # F(Δ) − F(−Δ)
    t = low + u * mass
    with np.errstate(divide="ignore"):
        s = np.where(t < 0.5, -np.log(t), -np.log1p(-(high_gap + (1.0 - u) * mass)))
        return np.clip(-b * np.log(s), -delta, delta)


# --------------------------------------------------------------------------------------------
# The k nearest words, exactly


class Screen:
    """W as float32 scores for ``nearest``: s(x, u) = x·u − ‖u‖²/2, the largest s the nearest u.

    One GEMM per block of words against the (d+1) × V matrix [φ(u); −‖u‖²/2] (queries get a
    constant 1), as ``dpspark.neighbours.ExactIndex`` scores. With inputs rounded to float32
    (2⁻²⁴) and float32 accumulation of d + 1 products, |ŝ − s| ≤ (d + 4)·2⁻²⁴·(‖x‖R + R²/2)·1.1,
    R = max ‖u‖: ``bound`` is four times that.
    """

    def __init__(self, space: Space) -> None:
        w = space.vocab64
        norms2 = np.einsum("ij,ij->i", w, w)
        self.matrix = np.ascontiguousarray(np.concatenate([w, -0.5 * norms2[:, None]], axis=1).T, dtype=np.float32)
        self.radius = float(np.sqrt(norms2.max()))
        self.dim = w.shape[1]

    def bound(self, norms: np.ndarray) -> np.ndarray:
        return 4.4 * (self.dim + 4) * 2.0**-24 * (norms * self.radius + self.radius**2 / 2.0) + 1e-30


def nearest(space: Space, rows: np.ndarray, k: int, screen: Screen | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The k nearest words of W to each embedding row, nearest first: (positions n × k, distances n × k).

    Exact: the order of sqrt(Σ(x − u)²) computed directly in float64, ties by position, the word
    itself first (u_1 = w for w ∈ W, even beside an identical vector). Per block of rows:

    1. float32 scores ŝ of ``Screen`` (one GEMM);
    2. L = the smallest of the maxima of k disjoint classes of W (positions mod k): at least k
       words score ≥ L, so the k-th largest score ŝ_k is ≥ L (one pass, no partition of V);
    3. the words with ŝ ≥ L (a few hundred), sorted by score: ŝ_k, then every word with
       ŝ ≥ ŝ_k − 2·bound (a superset of the exact k nearest: each score is within ``bound``),
       searched again over all of W for a row where that limit is below L;
    4. those candidates re-ranked by their float64 distance.
    """
    rows = np.asarray(rows, dtype=np.int64)
    size = space.size
    k = min(int(k), size)
    screen = screen or Screen(space)
    own, found = space.positions(rows)
    own = np.where(found, own, -1)
    positions = np.empty((len(rows), k), dtype=np.int64)
    distances = np.empty((len(rows), k), dtype=np.float64)
    step = max(1, min(256, (1 << 23) // size))
    classes = (size // k) * k
    for s in range(0, len(rows), step):
        x = np.asarray(space.vectors[rows[s : s + step]], dtype=np.float64)
        n = len(x)
        q = np.ones((n, screen.dim + 1), dtype=np.float32)
        q[:, :-1] = x
        scores = q @ screen.matrix
        low = scores[:, :classes].reshape(n, classes // k, k).max(axis=1).min(axis=1)
        hit = np.flatnonzero(scores >= low[:, None])
        at, cand = np.divmod(hit, size)
        value = scores.ravel()[hit]
        order = np.lexsort((-value, at))
        at, cand, value = at[order], cand[order], value[order]
        limit = value[np.searchsorted(at, np.arange(n)) + k - 1] - 2.0 * screen.bound(np.linalg.norm(x, axis=1))
        keep = value >= limit[at]
        at, cand = at[keep], cand[keep]
        wide = np.flatnonzero(limit < low)  # rare: the margin reaches below L
        if wide.size:
            extra = [np.flatnonzero(scores[i] >= limit[i]) for i in wide]
            narrow = ~np.isin(at, wide)
            at = np.concatenate([at[narrow], *[np.full(len(e), i) for i, e in zip(wide, extra)]])
            cand = np.concatenate([cand[narrow], *extra])
        diff = space.vocab64[cand] - x[at]
        exact = np.sqrt(np.einsum("ij,ij->i", diff, diff))
        order = np.lexsort((cand, cand != own[s + at], exact, at))
        at, cand, exact = at[order], cand[order], exact[order]
        rank = np.arange(len(at)) - np.searchsorted(at, at)
        take = rank < k
        positions[s + at[take], rank[take]] = cand[take]
        distances[s + at[take], rank[take]] = exact[take]
    return positions, distances


# --------------------------------------------------------------------------------------------
# The exact law of one word, by quadrature


def output_law(distances: np.ndarray, b: float, delta: float, pk: np.ndarray, nodes: int = NODES) -> np.ndarray:
    """P(u_j | w) for the candidates at ``distances`` (ascending, d_1..d_n), with P(k) = ``pk[k − 1]``
    for k = 1..n (larger k ignored: their mass is the caller's error):

        P(u_j | w) = ∫_{−Δ}^{Δ} f_t(x) Σ_{k ≥ j} P(k) Π_{i ≤ k, i ≠ j} S(d_j + x − d_i) dx,  S = 1 − F_t.

    For each j the integrand is analytic between the kinks x = d_i − d_j ± Δ of S (one per i ≠ j in
    [−Δ, Δ]); each piece is cut into parts of length ≤ b/2 and integrated by ``nodes``-point
    Gauss–Legendre: doubling ``nodes`` changes the result by ≈ 1e-16 (the tests check it). The
    products are sums of ln S, cumulative over i, so one pass per j gives every k.
    """
    d = np.asarray(distances, dtype=np.float64)
    n = len(d)
    pk = np.asarray(pk, dtype=np.float64)[:n]
    gl_x, gl_w = np.polynomial.legendre.leggauss(nodes)
    out = np.empty(n)
    for j in range(n):
        kinks = np.concatenate([d - d[j] - delta, d - d[j] + delta])
        edges = np.unique(np.concatenate([[-delta, delta], kinks[(kinks > -delta) & (kinks < delta)]]))
        parts = np.maximum(1, np.ceil(np.diff(edges) / (b / 2.0)).astype(np.int64))
        lo = np.repeat(edges[:-1], parts) + np.concatenate([np.arange(m) for m in parts]) * np.repeat(
            np.diff(edges) / parts, parts
        )
        width = np.repeat(np.diff(edges) / parts, parts)
        x = (lo[:, None] + width[:, None] * (gl_x + 1.0) / 2.0).ravel()
        weight = (width[:, None] * gl_w / 2.0).ravel() * _gumbel_density(x, b, delta)
        log_s = _log_survival(d[j] - d[:, None] + x[None, :], b, delta)
        log_s[j] = 0.0
        cumulative = np.cumsum(log_s, axis=0)  # row k − 1: Σ_{i ≤ k} (i ≠ j), 0-based i < k
        with np.errstate(under="ignore"):
            inner = pk[j:] @ np.exp(cumulative[j:])
        out[j] = weight @ inner
    return out


# --------------------------------------------------------------------------------------------
# The spec and the sampler


class TruncatedGumbel(MechanismSpec):
    """The k-nearest-words report-noisy-min with truncated Gumbel noise (valid for ε > (5 + 2 ln V)/Δ0)."""

    name: Literal["truncated-gumbel"] = "truncated-gumbel"

    paper: ClassVar[str] = (
        "Truncated Gumbel mechanism, FLAIRS-34 (2021), doi:10.32473/flairs.v34i1.128463 (the paper could not be read "
        "here: its authors and its proof are unverified)"
    )
    # The paper claims metric DP; the exact law contradicts it (tests/statistical/test_conformance.py).
    guarantee_type: ClassVar[str] = "none"
    summary: ClassVar[str] = (
        "the nearest of k ~ Poisson(ln V) nearest words after truncated Gumbel noise; unverified, only for ε above "
        "(5 + 2 ln V)/Δ0"
    )
    # above its threshold, 75.82 over GloVe's first 50,000 words (its law moves little with ε)
    default_epsilons: ClassVar[tuple[float, ...]] = (80.0, 100.0, 150.0, 300.0, 1000.0)

    def constants(self, space: Space) -> tuple[float, float]:
        """(Δ, Δ0) of W (``diameters``, an artefact kept per vocabulary)."""
        values = space.artefact(
            ARTEFACT,
            lambda: diameters(space.vocab64),
            store=True,
            check=lambda cached: diameters_fault(space.vocab64, cached),
        )
        return float(values[0]), float(values[1])

    def scale(self, space: Space) -> float:
        """b for this ε over W, or the ConfigError of ``gumbel_scale`` (ε at or below the threshold)."""
        delta, delta0 = self.constants(space)
        return gumbel_scale(self.epsilon, space.size, delta, delta0)

    def prepare(self, space: Space) -> list[str]:
        self.scale(space)
        return [ARTEFACT]

    def build(self, space: Space) -> WordMechanism:
        delta, _ = self.constants(space)
        return TruncatedGumbelSampler(space, self, self.scale(space), delta)

    def guarantee(self, space: Space) -> str:
        delta, delta0 = self.constants(space)
        return (
            f"Claimed, not verified: the paper (FLAIRS-34, 2021, doi:10.32473/flairs.v34i1.128463) states metric DP, "
            f"i.e. for any two texts of equal length n and any output the probabilities differ by at most a factor "
            f"exp({self.epsilon:g} * sum_i ||phi(w_i) - phi(w'_i)||_2); the paper, its authors and the proof could not "
            f"be read here and are unverified, and the exact law computed here contradicts that bound for the "
            f"mechanism as stated (P(y | w) falls with the rank of y among the nearest words of w, not with the "
            f"distance). The mechanism is defined only for epsilon > (5 + 2 ln V)/Delta0 = "
            f"{threshold(space.size, delta0):.6g} (V = {space.size}, Delta = {delta:.6g}, Delta0 = {delta0:.6g}); here "
            f"b = {self.scale(space):.6g}. Each token w is replaced by the word u_j among its k ~ Poisson(ln V) "
            f"nearest words that minimises d(w, u_j) + g_j, g_j iid Gumbel(0, b) truncated to [-Delta, Delta]."
        )

    def outside(self) -> list[str]:
        return [
            "truncated-gumbel: its metric-DP guarantee is the paper's claim (FLAIRS-34, 2021, "
            "doi:10.32473/flairs.v34i1.128463); the paper's authors and proof could not be read here and are "
            "unverified; the exact law computed by this library contradicts that bound for pairs of words whose "
            "nearest-word lists differ (tests/statistical/test_conformance.py)"
        ]


class TruncatedGumbelSampler(WordMechanism):
    """Per token: k from the truncated Poisson, the argmin of d + truncated Gumbel over the k nearest words."""

    def __init__(self, space: Space, spec: MechanismSpec, b: float, delta: float, most: int | None = None) -> None:
        """``most``: the neighbours kept per word instead of K_max (tests: the exact path for k > most)."""
        super().__init__(space, spec)
        self.b = float(b)
        self.delta = float(delta)
        self.k_max = k_max(space.size) if most is None else min(int(most), space.size)
        self._cumulative = np.cumsum(k_law(space.size, self.k_max))
        self.screen = Screen(space)
        # Neighbour lists of the rows met so far (public, ε-free): Zipfian batches repeat their words.
        self._slot = np.full(len(space.vectors), -1, dtype=np.int64)
        self._capacity = min(len(space.vectors), MEMO_WORDS)
        self._used = 0
        self._pos = np.empty((0, self.k_max), dtype=np.int64)
        self._dist = np.empty((0, self.k_max))

    def neighbours(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The K_max nearest words of each (distinct) row: (positions, distances), n × K_max (``nearest``),
        kept for up to MEMO_WORDS rows (all forgotten at once when full)."""
        rows = np.asarray(rows, dtype=np.int64)
        slots = self._slot[rows]
        known = slots >= 0
        pos = np.empty((len(rows), self.k_max), dtype=np.int64)
        dist = np.empty((len(rows), self.k_max))
        pos[known], dist[known] = self._pos[slots[known]], self._dist[slots[known]]
        new = np.flatnonzero(~known)
        if new.size:
            pos[new], dist[new] = nearest(self.space, rows[new], self.k_max, self.screen)
            if not len(self._pos):
                self._pos = np.empty((self._capacity, self.k_max), dtype=np.int64)
                self._dist = np.empty((self._capacity, self.k_max))
            if self._used + new.size > self._capacity:
                self._slot[:] = -1
                self._used = 0
            new = new[: self._capacity]
            at = np.arange(self._used, self._used + new.size)
            self._slot[rows[new]], self._pos[at], self._dist[at] = at, pos[new], dist[new]
            self._used += new.size
        return pos, dist

    def draw_k(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """n draws of k ~ Poisson(ln V) truncated to {1, …, V}, by inverse CDF: one uniform each over the
        table of P(k ≤ K_max); the rare k > K_max by a second uniform over the conditional law of
        K_max < k ≤ V (its probabilities down to float64's underflow)."""
        k = 1 + np.searchsorted(self._cumulative, rng.random(n), side="right")
        tail = np.flatnonzero(k > self.k_max)
        if tail.size:
            from scipy import stats

            size, lam = self.space.size, math.log(self.space.size)
            ks = np.arange(self.k_max + 1, min(size, self.k_max + 4096) + 1)
            cumulative = np.cumsum(np.exp(stats.poisson.logpmf(ks, lam) - stats.poisson.logpmf(self.k_max + 1, lam)))
            at = np.searchsorted(cumulative, rng.random(tail.size) * cumulative[-1], side="right")
            k[tail] = ks[np.minimum(at, len(ks) - 1)]
        return k

    def sample(self, rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        rows = np.asarray(rows, dtype=np.int64)
        flat = rows.reshape(-1)
        out = np.empty(flat.size, dtype=np.int64)
        if not flat.size:
            return out.reshape(rows.shape)
        distinct, inverse = np.unique(flat, return_inverse=True)
        positions, distances = self.neighbours(distinct)
        k = self.draw_k(flat.size, rng)
        common = np.flatnonzero(k <= self.k_max)
        span = np.arange(self.k_max)
        for s in range(0, len(common), TOKENS):
            tokens = common[s : s + TOKENS]
            which = inverse[tokens]
            mask = span < k[tokens, None]
            scores = np.full(mask.shape, np.inf)
            scores[mask] = distances[which][mask] + sample_gumbel(int(mask.sum()), self.b, self.delta, rng)
            out[tokens] = positions[which, scores.argmin(axis=1)]
        for t in np.flatnonzero(k > self.k_max):  # P < 1e-15 per token: an exact top-k query each
            pos, dist = nearest(self.space, flat[t : t + 1], int(k[t]), self.screen)
            out[t] = pos[0, int(np.argmin(dist[0] + sample_gumbel(pos.shape[1], self.b, self.delta, rng)))]
        return out.reshape(rows.shape)

    def law(self, row: int, extra: int = 16) -> tuple[np.ndarray, np.ndarray]:
        """The exact P(u | w) of one embedding row by quadrature (``output_law``): (positions of its
        K_max + ``extra`` nearest words, their probabilities). Every other word has probability 0 up to
        P(k > K_max + extra) (below 1e-25 for V ≤ 400,000)."""
        cap = min(self.space.size, k_max(self.space.size) + extra)
        pos, dist = nearest(self.space, np.array([row]), cap, self.screen)
        return pos[0], output_law(dist[0], self.b, self.delta, k_law(self.space.size, cap))
