"""Nearest-neighbour search over the output vocabulary, exact or approximate, one interface.

Releasing argmin_u ‖φ(u) − v‖₂ is post-processing of the noisy point v, so *any*
search that answers from v and the public embeddings alone keeps dχ-privacy. What
an approximate index changes is utility and the empirical privacy statistics: the
noisy points of a useful ε lie far from every word, where approximate indexes are
weakest (design §7), and a wrong neighbour makes Nw look better than the mechanism
really is. Exact search is therefore the default and the reference; approximate
search is measured against it (``recall_at_1``) and reported.

Exact search is a blocked, fused float32 GEMM:
argmin ‖x − v‖² = argmax (v·x − ‖x‖²/2), and the −‖x‖²/2 term is folded into the
matrix product as one extra column (queries get a constant 1), so each block of
scores is one BLAS call followed by one argmax pass, on blocks small enough to stay
in cache (512 queries × 2,048 words = 4 MiB; the fastest shape measured on 2 cores with
50,000 and 400,000 words). Answers equal the float64 argmin
except at ties within float32 rounding (relative 1e-6), where either word is exact.

CertifiedIndex answers exactly the float64 argmin, faster where bf16 GEMMs are cheap
(AMX, AVX512-BF16): it scores every word in bf16, bounds the rounding error, and re-ranks in
float64 every word the bound cannot rule out (its docstring has the proof). ``dpspark.device.exact_index``
returns AdaptiveIndex where PyTorch and such a CPU are present (float32 first; once a process
has done enough work to repay importing PyTorch, CertifiedIndex if it is measured faster on the
process's own queries), ExactIndex elsewhere;
DPSPARK_EXACT=fp32 forces ExactIndex, DPSPARK_EXACT=bf16 CertifiedIndex.
"""

from __future__ import annotations

import importlib.util
import os
import time
import warnings
from functools import cached_property
from typing import Protocol

import numpy as np

from dpspark.errors import DPSparkWarning

QUERY_BLOCK = 512
WORD_BLOCK = 2048


class NeighbourIndex(Protocol):
    """Maps query points (n×d) to the rows of the nearest indexed vectors."""

    method: str

    def query(self, points: np.ndarray) -> np.ndarray: ...

    def params(self) -> dict: ...


class ExactIndex:
    """Exact Euclidean nearest neighbour by blocked float32 BLAS with a fused argmax."""

    method = "exact"

    def __init__(self, vectors: np.ndarray) -> None:
        x = np.asarray(vectors, dtype=np.float64)
        self.size, self.dim = x.shape
        # (d+1)×V, contiguous, so each word block is a column slice of one matrix.
        augmented = np.empty((self.dim + 1, self.size), dtype=np.float32)
        augmented[: self.dim] = x.T
        augmented[self.dim] = -0.5 * (x * x).sum(axis=1)
        self._xt = augmented

    def params(self) -> dict:
        return {"query_block": QUERY_BLOCK, "word_block": WORD_BLOCK}

    def query(self, points: np.ndarray) -> np.ndarray:
        points = np.asarray(points)
        n = points.shape[0]
        result = np.zeros(n, dtype=np.int64)
        if n == 0:
            return result
        q = np.empty((n, self.dim + 1), dtype=np.float32)
        q[:, : self.dim] = points
        q[:, self.dim] = 1.0
        best = np.full(n, -np.inf, dtype=np.float32)
        scores = np.empty((min(n, QUERY_BLOCK), WORD_BLOCK), dtype=np.float32)
        for qs in range(0, n, QUERY_BLOCK):
            qb = q[qs : qs + QUERY_BLOCK]
            rows = np.arange(len(qb))
            b, r = best[qs : qs + QUERY_BLOCK], result[qs : qs + QUERY_BLOCK]
            for ws in range(0, self.size, WORD_BLOCK):
                block = self._xt[:, ws : ws + WORD_BLOCK]
                out = scores[: len(qb), : block.shape[1]]
                np.matmul(qb, block, out=out)
                j = out.argmax(axis=1)
                top = out[rows, j]
                better = top > b
                b[better] = top[better]
                r[better] = j[better] + ws
        return result

    def within(self, centers: np.ndarray, radii: np.ndarray) -> list[np.ndarray]:
        """For each center, the rows whose distance to it may be below its radius.

        A superset by a small margin (float32 products): callers use it to *exclude*
        words, so erring towards inclusion keeps answers exact.
        """
        centers = np.asarray(centers, dtype=np.float32)
        out: list[np.ndarray] = []
        for s in range(0, len(centers), QUERY_BLOCK):
            c = centers[s : s + QUERY_BLOCK]
            scores = c @ self._xt[: self.dim] + self._xt[self.dim]  # c·x − ‖x‖²/2
            # ‖c − x‖² = ‖c‖² − 2(c·x − ‖x‖²/2)
            d2 = (c.astype(np.float64) ** 2).sum(axis=1)[:, None] - 2.0 * scores
            r2 = np.asarray(radii[s : s + QUERY_BLOCK], dtype=np.float64) ** 2
            limit = r2 * (1 + 1e-4) + 1e-3
            out.extend(np.flatnonzero(row < lim) for row, lim in zip(d2, limit))
        return out

    def query_among(self, points: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Nearest of ``rows`` (a subset of the index) to each point: same scores as ``query``."""
        sub = self._xt[:, rows]
        q = np.empty((len(points), self.dim + 1), dtype=np.float32)
        q[:, : self.dim] = points
        q[:, self.dim] = 1.0
        return rows[(q @ sub).argmax(axis=1)]

    def query_two(self, points: np.ndarray, among: np.ndarray | None = None) -> np.ndarray:
        """The two nearest rows to each point (n×2, nearest first), by the float32 scores of ``query``.

        The first column equals ``query(points)`` (``among`` None); ties go to the lower row in
        both columns. ``among`` (ascending rows of the index, at least two) limits the search
        to them. The blocked GEMM keeps a running best two per query: a block's largest score
        is found for every query, its second largest only for the queries whose best that
        block improves (rare after the first blocks), so the cost stays near that of ``query``.
        Exact up to float32 ties (relative 1e-6); callers that need the float64 order of the
        two re-rank them.
        """
        xt = self._xt if among is None else np.ascontiguousarray(self._xt[:, among])
        size = xt.shape[1]
        if size < 2:
            raise ValueError("query_two needs at least two indexed rows")
        points = np.asarray(points)
        n = points.shape[0]
        r1, r2 = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
        if n:
            q = np.empty((n, self.dim + 1), dtype=np.float32)
            q[:, : self.dim] = points
            q[:, self.dim] = 1.0
            b1, b2 = np.full(n, -np.inf, dtype=np.float32), np.full(n, -np.inf, dtype=np.float32)
            scores = np.empty((min(n, QUERY_BLOCK), WORD_BLOCK), dtype=np.float32)
            for qs in range(0, n, QUERY_BLOCK):
                qb = q[qs : qs + QUERY_BLOCK]
                rows = np.arange(len(qb))
                c1, i1 = b1[qs : qs + QUERY_BLOCK], r1[qs : qs + QUERY_BLOCK]  # views
                c2, i2 = b2[qs : qs + QUERY_BLOCK], r2[qs : qs + QUERY_BLOCK]
                for ws in range(0, size, WORD_BLOCK):
                    block = xt[:, ws : ws + WORD_BLOCK]
                    out = scores[: len(qb), : block.shape[1]]
                    np.matmul(qb, block, out=out)
                    j = out.argmax(axis=1)
                    top = out[rows, j]
                    new = top > c1  # this block holds the new best: its second may beat the old best
                    second = ~new & (top > c2)  # the block's best becomes the second
                    c2[second], i2[second] = top[second], j[second] + ws
                    if new.any():
                        k = np.flatnonzero(new)
                        sub = out[k]
                        at = np.arange(len(k))
                        sub[at, j[k]] = -np.inf
                        j2 = sub.argmax(axis=1)
                        t2 = sub[at, j2]
                        old = t2 <= c1[k]  # the old best stays second on ties (its row is lower)
                        c2[k] = np.where(old, c1[k], t2)
                        i2[k] = np.where(old, i1[k], j2 + ws)
                        c1[k], i1[k] = top[k], j[k] + ws
        pair = np.stack([r1, r2], axis=1)
        return pair if among is None else np.asarray(among, dtype=np.int64)[pair]


LOWP_QUERY_BLOCK = 8192  # queries per search: stage 2 visits each flagged word block once per search
LOWP_GEMM_ROWS = 2048  # queries per bf16 GEMM: 2048 × 512 bf16 scores (2 MiB) stay in L2
LOWP_WORD_BLOCK = 512
_MAX_NORM = 1e12  # larger norms could overflow bf16/float32 scores: such queries go to float64 alone
_PAIRS = 16_384  # candidate (query, word) pairs re-ranked per numpy call: bounds the float64 temporaries


class CertifiedIndex:
    """Exact nearest neighbour: low-precision scores, a proven error bound, float64 re-ranking.

    Returns, for every query q, exactly ``np.argmin(((q − X)**2).sum(axis=1))`` in
    float64 (ties: the lowest row) — the reference that ``ExactIndex`` meets only up to
    float32 rounding. The scores come from ``lowp`` (default: bf16 GEMMs in PyTorch/oneDNN,
    on AMX or AVX512-BF16); ``dpspark.device.exact_index`` moves to this class where that is fast.

    Scores. Word rows are (x, h, l, 1, 1) and query rows (q, 1, 1, a, b), rounded to the
    low-precision format (p significant bits; bf16: p = 8) and zero padded to K = d + 4
    rounded up to the backend's ``k_multiple`` (bf16: 32 for AMX tiles, 2 for AVX512-BF16),
    where h + l ≈ n = −‖x‖²/2 and a + b = C exactly (two-term splits, so the large norm terms
    lose almost nothing). A GEMM with float32 accumulation gives
    y ≈ t = s + C with s = q·x − ‖x‖²/2, and rounds y once more to p bits on output (ŝ).
    argmax s = argmin ‖q − x‖²; C, the same for every word of a query, is chosen below
    −max s so that every y < 0 (see ``_queries``), which lets the bf16 backend find each
    block's largest score with an int16 ``amin`` of the bit patterns.

    The bound. With u = 2⁻ᵖ + 2⁻²³ (input rounding; the extra term allows torch's double
    rounding float64 → float32 → bf16) and γ = K·2⁻²⁴/(1 − K·2⁻²⁴) (float32 accumulation
    of K terms in any order; products of two p-bit values are exact in float32 for p ≤ 12,
    so AMX, AVX-512, a split K or a plain float32 GEMM all fit):
      |Σ q̂ᵢx̂ᵢ − q·x| ≤ (2u + u²)·Σ|qᵢxᵢ| ≤ (2u + u²)·‖q‖‖x‖          (Cauchy–Schwarz)
      |h + l − n| ≤ (u² + (d+1)·2⁻⁵³)·|n|         (split residual; float64 ‖x‖²)
      accumulation ≤ γ·(Σ|q̂ᵢx̂ᵢ| + |h| + |l| + |a| + |b|)
    so |y − t| ≤ b(q, x) = c₁‖q‖‖x‖ + c₂(‖x‖²/2 + |C|) + η with c₁ = 2u + u² + γ(1+u)²
    (bf16: 2⁻⁷ + 2⁻¹⁵·⁵), c₂ = 1.001·(u² + (d+1)·2⁻⁵³ + γ(1+3u)) (bf16: ≈ 2⁻¹⁵·⁶) and
    η = 2⁻¹⁰⁰(1 + ‖q‖ + max‖x‖) for denormals flushed to zero. The output rounding is
    monotone with |ŝ − y| ≤ 2⁻ᵖ|y|; it is applied to thresholds, not to scores.

    Certificate. Stage 1 keeps, per query and block of words, the largest ŝ (M). The word
    behind the overall largest, G, has t ≥ G − 2⁻ᵖ|G|/(1 − 2⁻ᵖ) − B (B: the largest b in its
    block), so the best t is at least that; a word that float64 could prefer has t ≥ floor,
    that minus σ = (d+8)·2⁻⁵²·(‖q‖ + max‖x‖)² (the rounding of the float64 distances);
    hence its y ≥ floor − b and its ŝ ≥ (floor − b)(1 + 2⁻ᵖ) (negative values, monotone
    rounding). Stage 2 recomputes the scores of the blocks whose M passes that test with
    their largest b, keeps every word passing it, and re-ranks those in float64: the "within
    2×bound of the best" rule, made exact. Nothing limits how many survive: at worst every
    word is re-ranked (float64 brute force, slow, never wrong). Blocks keep memory bounded:
    LOWP_GEMM_ROWS × LOWP_WORD_BLOCK scores, one float32 maximum per query and word block
    (25 MB for 8,192 queries and 400,000 words) and about _PAIRS candidates at a time.
    """

    method = "exact"  # the answers are exact: bundles and manifests treat it as exact search

    def __init__(self, vectors: np.ndarray, lowp: _TorchBF16 | _Emulated | None = None) -> None:
        x = np.asarray(vectors)
        if x.ndim != 2 or len(x) == 0 or not np.isfinite(x).all():
            raise ValueError("CertifiedIndex needs a non-empty, finite V×d matrix")
        self._lowp = _TorchBF16() if lowp is None else lowp
        self._x = x  # the reference vectors (float32 or float64), not copied
        self.size, self.dim = x.shape
        self._k = -(-(self.dim + 4) // self._lowp.k_multiple) * self._lowp.k_multiple
        self._u = 2.0**-self._lowp.bits  # output rounding
        u = self._u + 2.0**-23
        # Products of two p-bit values are exact in float32 for p ≤ 12; float32 inputs (p = 24)
        # round each product once more, which one more term of γ covers.
        terms = self._k + (self._lowp.bits > 12)
        gamma = terms * 2.0**-24 / (1 - terms * 2.0**-24)
        self._c1 = 2 * u + u * u + gamma * (1 + u) ** 2
        self._c2 = 1.001 * (u * u + (self.dim + 1) * 2.0**-53 + gamma * (1 + 3 * u))
        sq = np.concatenate([np.einsum("ij,ij->i", c, c) for c in _chunks(x)])
        self._norm = np.sqrt(sq) * (1 + 2.0**-40)  # upper bounds of ‖x‖
        if self._norm.max() > _MAX_NORM:
            raise ValueError(f"word vectors longer than {_MAX_NORM:g}: use ExactIndex")
        parts = []
        for s, c in zip(range(0, self.size, 65_536), _chunks(x)):
            a = np.zeros((len(c), self._k))
            a[:, : self.dim] = self._lowp.round(c)
            a[:, self.dim], a[:, self.dim + 1] = self._split(-0.5 * sq[s : s + len(c)])
            a[:, self.dim + 2 : self.dim + 4] = 1.0
            parts.append(self._lowp.matrix(a))
        self._words, self._rblock = self._blocks(parts, self._norm)
        self._self_check()
        self.reranked = 0  # (query, word) pairs re-ranked in float64 so far: the certificate's cost

    def params(self) -> dict:
        return {"query_block": LOWP_QUERY_BLOCK, "word_block": LOWP_WORD_BLOCK, "scores": self._lowp.name}

    def query(self, points: np.ndarray) -> np.ndarray:
        q = np.asarray(points, dtype=np.float64).reshape(-1, self.dim)
        out, step = np.zeros(len(q), dtype=np.int64), self._query_block()
        for s in range(0, len(q), step):
            out[s : s + step] = self._search(q[s : s + step], None)
        return out

    def query_among(self, points: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Nearest of ``rows`` (a subset of the index) to each point, exact as ``query``
        (ties: the first of ``rows``)."""
        rows = np.asarray(rows, dtype=np.int64)
        q = np.asarray(points, dtype=np.float64).reshape(-1, self.dim)
        out, step = np.zeros(len(q), dtype=np.int64), self._query_block()
        for s in range(0, len(q), step):
            out[s : s + step] = rows[self._search(q[s : s + step], rows)]
        return out

    def within(self, centers: np.ndarray, radii: np.ndarray) -> list[np.ndarray]:
        """As ``ExactIndex.within`` (a superset of each ball), from a float32 index built on first use."""
        return self._float32.within(centers, radii)

    def query_two(self, points: np.ndarray, among: np.ndarray | None = None) -> np.ndarray:
        """The two float64-nearest rows of each point (n×2, nearest first), exactly: the first
        two of ``np.lexsort((rows, d))`` with d = ((q − X)**2).sum(axis=1) in float64.

        Ties at float64 (equal computed distances, duplicate words, a point exactly between two
        words) go to the lower row, in both columns; the first column equals ``query``. ``among``
        (rows of the index, at least two) limits the search to them, with the same certificate
        (ties: the first of ``among``). Non-finite points get rows 0 and 1, as the lexsort does.

        Certificate (as ``query``'s, with the second best): stage 1's two largest block maxima
        come from two different blocks, hence two different words whose t is at least the lower
        bound of the smaller one; a word that float64 puts in the top two has at most one word
        before it, so it is not behind both of those: its t is at least that bound minus σ. Stage
        2 keeps every word whose low-precision score reaches that threshold and keeps the best
        two of them by float64 distance. When the best two share a block, the second block's
        maximum gives a lower threshold (more candidates, never a wrong answer).
        """
        q = np.asarray(points, dtype=np.float64).reshape(-1, self.dim)
        rows = None if among is None else np.asarray(among, dtype=np.int64)
        if (self.size if rows is None else len(rows)) < 2:
            raise ValueError("query_two needs at least two indexed rows")
        out, step = np.zeros((len(q), 2), dtype=np.int64), self._query_block()
        for s in range(0, len(q), step):
            out[s : s + step] = self._search(q[s : s + step], rows, two=True)
        return out if rows is None else rows[out]

    def _query_block(self) -> int:
        """Queries per ``_search``."""
        return LOWP_QUERY_BLOCK

    @cached_property
    def _float32(self) -> ExactIndex:
        return ExactIndex(self._x)

    def _split(self, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """v ≈ hi + lo, both in the low-precision format: |v − hi − lo| ≤ u²|v|."""
        hi = self._lowp.round(v)
        return hi, self._lowp.round(v - hi)

    def _blocks(self, parts: list, norm: np.ndarray):
        """Word rows padded to whole blocks with rows that never win (score −2¹⁰⁰, exact in
        every format), and each block's largest norm."""
        n, nb = len(norm), -(-len(norm) // LOWP_WORD_BLOCK)
        pad = np.zeros((nb * LOWP_WORD_BLOCK - n, self._k))
        pad[:, self.dim] = -(2.0**100)
        rblock = np.zeros(nb * LOWP_WORD_BLOCK)
        rblock[:n] = norm
        return self._lowp.cat([*parts, self._lowp.matrix(pad)]), rblock.reshape(nb, -1).max(axis=1)

    def _queries(self, q: np.ndarray, rmax: float):
        """Low-precision query rows (q, 1, 1, a, b, 0…) and, per query, ‖q‖ (upper bound), |C|, η."""
        qn = np.sqrt(np.einsum("ij,ij->i", q, q)) * (1 + 2.0**-40)
        # s = q·x − ‖x‖²/2 ≤ max over r in [0, max‖x‖] of (‖q‖r − r²/2) = P.
        p = np.where(qn <= rmax, qn * qn / 2, qn * rmax - rmax * rmax / 2) * (1 + 2.0**-40)
        eta = 2.0**-100 * (1 + qn + rmax)
        b0 = self._c1 * qn * rmax + self._c2 * rmax * rmax / 2 + eta  # b without its c₂|C| part
        # C ≈ −P − δ with δ = 2·b0 + 4(c₂ + 2⁻¹⁵)P: every y ≤ P + C + b < 0, the split
        # residual of C (≤ 2⁻¹⁶|C| for bf16) and the c₂|C| part of b included.
        hi, lo = self._split(-p - 2 * b0 - 4 * (self._c2 + 2.0**-15) * p)
        rows = np.zeros((len(q), self._k), dtype=np.float32)  # every value rounded to p ≤ 24 bits: exact
        rows[:, : self.dim] = self._lowp.round(q)
        rows[:, self.dim : self.dim + 2] = 1.0
        rows[:, self.dim + 2], rows[:, self.dim + 3] = hi, lo
        return self._lowp.matrix(rows), qn, np.abs(hi + lo), eta

    def _search(self, q: np.ndarray, among: np.ndarray | None, two: bool = False) -> np.ndarray:
        """Positions (in the index, or in ``among``) of the float64 nearest word of each query;
        with ``two``, of the nearest two (n×2, nearest first, lower position on ties)."""
        if among is None:
            words, rblock, norm, source = self._words, self._rblock, self._norm, self._x
        else:
            norm, source = self._norm[among], self._x[among]
            words, rblock = self._blocks([self._lowp.take(self._words, among)], norm)
        # Non-finite queries: row 0 (and 1), as np.argmin (np.lexsort) over NaN/inf distances.
        result = np.tile(np.arange(2, dtype=np.int64), (len(q), 1)) if two else np.zeros(len(q), dtype=np.int64)
        big = np.sqrt(np.einsum("ij,ij->i", q, q))
        ok = big <= _MAX_NORM  # False for NaN and inf too
        for i in np.flatnonzero(np.isfinite(big) & ~ok):  # huge but finite: float64 brute force
            result[i] = _best_two64(source, q[i]) if two else _argmin64(source, q[i])
        if ok.any():
            ok = slice(None) if ok.all() else ok  # no copy of the queries when all are searched here
            result[ok] = self._certified(q[ok], words, rblock, norm, source, two)
        return result

    def _least(self, g, r_top, qn, c_abs, eta, rmax: float):
        """The certificate's threshold for scores ``g`` (the overall largest, or the second largest
        of two different words or blocks) reached by words of norm at most ``r_top``: (a, k,
        alpha) such that a word of norm at most R may be the answer to query i only if its score
        reaches a_i − k·(alpha_i·R + c₂R²/2) (rmax: the largest norm of the words searched).
        Arrays of float64, numpy's or torch's (dpspark.device computes it on the device)."""
        alpha, gamma = self._c1 * qn, self._c2 * c_abs + eta
        b_top = alpha * r_top + self._c2 * r_top**2 / 2 + gamma
        sigma = (self.dim + 8) * 2.0**-52 * (qn + rmax) ** 2
        floor = g - self._u * abs(g) / (1 - self._u) - b_top - sigma
        # The least output a word of block b may show and still be the answer to query i is
        # (floor − bound)(1 + 2⁻ᵖ), as floor − bound < 0; 2⁻³⁰ and 2⁻⁴⁰(|g| + b_top + σ + bound)
        # absorb this float64 arithmetic. Rearranged: A_i − k·(alpha_i·R_b + c₂R_b²/2).
        k = 1 + self._u + 2.0**-30 + 2.0**-40
        a = floor * (1 + self._u + 2.0**-30) - 2.0**-40 * (abs(g) + b_top + sigma) - k * gamma
        return a, k, alpha

    def _certified(self, q, words, rblock, norm, source, two: bool) -> np.ndarray:
        """``_search`` for finite queries of moderate norm: the two stages and the float64 re-rank."""
        lowp, n = self._lowp, len(norm)
        rmax = float(rblock.max())
        qt, qn, c_abs, eta = self._queries(q, rmax)
        nq, wb = len(q), LOWP_WORD_BLOCK

        # Stage 1: each block's largest low-precision score, per query (nb × nq, float32).
        m = lowp.block_maxima(qt, words, wb)
        if not two:
            g = m.max(axis=0).astype(np.float64)
        elif len(m) >= 2:  # the second largest block maximum (two different blocks reach it)
            g1, g2 = np.maximum(m[0], m[1]), np.minimum(m[0], m[1])
            for row in m[2:]:  # a running best two, row by row (np.partition across rows is slower)
                np.maximum(g2, np.minimum(g1, row), out=g2)
                np.maximum(g1, row, out=g1)
            g = g2.astype(np.float64)
        else:  # one block: every word is a candidate (at most LOWP_WORD_BLOCK per query)
            g = np.full(nq, -np.inf)
        r_top = np.zeros(nq)  # the largest norm among the blocks reaching G (no slow argmax on axis 0)
        for s in range(0, len(m), 64):
            np.maximum(r_top, np.where(m[s : s + 64] >= g, rblock[s : s + 64, None], 0.0).max(axis=0), out=r_top)
        # The bound of block b for query i is alpha_i·R_b + c₂R_b²/2 + gamma_i (R_b: its largest norm).
        a, k, alpha = self._least(g, r_top, qn, c_abs, eta, rmax)
        pairs = []
        for s in range(0, len(m), 64):
            least = (
                a
                - np.multiply.outer(k * rblock[s : s + 64], alpha)
                - (k * self._c2 / 2 * rblock[s : s + 64] ** 2)[:, None]
            )
            blk, qs = np.nonzero(m[s : s + 64] >= least)
            pairs.append((blk + s, qs, _down32(least[blk, qs])))
        blk, qs, limit = map(np.concatenate, zip(*pairs))  # (block, query) pairs, by block

        # Stage 2: in the blocks that reach it, recompute the scores, keep the words that
        # reach it and re-rank them by float64 distance. The block's largest b stands for each
        # word's own (a few more candidates, one comparison per score). The recomputation is
        # a float32 GEMM of the same low-precision values, which the same bound covers; and
        # unlike a oneDNN call per new row count, it compiles no kernels.
        cuts = np.flatnonzero(np.diff(blk)) + 1
        q32 = lowp.float32(qt)
        best, where = np.full((nq, 2), np.inf), np.full((nq, 2), -1, dtype=np.int64)
        keep = _keep_two if two else _keep_nearest
        if not two:
            best, where = best[:, 0], where[:, 0]
        pending: list[tuple[np.ndarray, np.ndarray]] = []
        count = 0
        for lo_pair, hi_pair in zip(np.r_[0, cuts], np.r_[cuts, len(blk)]):
            qi, lo = qs[lo_pair:hi_pair], blk[lo_pair] * wb
            s = q32[qi] @ lowp.float32(words[lo : min(lo + wb, n)]).T
            r, c = np.nonzero(s >= limit[lo_pair:hi_pair, None])
            pending.append((qi[r], lo + c))
            count += len(r)
            if count >= _PAIRS:
                keep(q, source, *map(np.concatenate, zip(*pending)), best, where)
                self.reranked += count
                pending, count = [], 0
        if pending:
            keep(q, source, *map(np.concatenate, zip(*pending)), best, where)
            self.reranked += count
        if two and (where[:, 1] < 0).any():  # never, by the certificate: at least two words pass
            raise RuntimeError("certified best-two search lost a candidate")
        return where

    def _self_check(self) -> None:
        """Check the bound and the sign of the scores on this machine's GEMM once (a backend
        that broke the float32-accumulation assumption would show); RuntimeError if not."""
        rng = np.random.default_rng(0)
        n = min(self.size, LOWP_WORD_BLOCK)
        x = self._x[:n].astype(np.float64)
        scale = np.median(self._norm[:n]) * rng.choice([0.01, 0.3, 1.0, 3.0, 30.0], (256, 1))
        q = x[rng.integers(0, n, 256)] + rng.standard_normal((256, self.dim)) * scale / np.sqrt(self.dim)
        qt, qn, c_abs, eta = self._queries(q, float(self._rblock.max()))
        s_hat = self._lowp.scores(qt, self._words[:n])
        sq = np.einsum("ij,ij->i", x, x)
        t = q @ x.T - sq / 2 - c_abs[:, None]
        b = self._c1 * qn[:, None] * self._norm[:n] + self._c2 * (sq / 2 + c_abs[:, None]) + eta[:, None]
        if not ((s_hat < 0).all() and (np.abs(s_hat - t) <= 1.01 * (b + self._u * np.abs(t))).all()):
            raise RuntimeError(f"{self._lowp.name} GEMM outside the certified error bound on this machine")


class _TorchBF16:
    """bf16 GEMMs in PyTorch (oneDNN: AMX where the CPU has it), float32 accumulation, bf16 output."""

    bits = 8
    name = "bf16 (torch), certified, float64 re-rank"

    def __init__(self) -> None:
        import torch

        self.torch = torch
        _follow_blas_threads(torch)
        # Rows padded to AMX's tile depth (32 bf16) where it runs; AVX512-BF16 multiplies pairs,
        # and padding beyond them is work: d = 50 pads to 54, not 64 (+13% queries/s on Zen 5).
        self.k_multiple = 32 if "amx_bf16" in _cpu_flags() else 2

    def round(self, a: np.ndarray) -> np.ndarray:
        return self.matrix(a).double().numpy()

    def matrix(self, a: np.ndarray):
        return self.torch.from_numpy(np.ascontiguousarray(a, dtype=np.float64)).to(self.torch.bfloat16)

    def cat(self, parts: list):
        return self.torch.cat(parts)

    def take(self, m, rows: np.ndarray):
        return m[self.torch.from_numpy(rows)]

    def float32(self, m) -> np.ndarray:
        return m.float().numpy()

    def scores(self, qt, words) -> np.ndarray:
        return self.torch.mm(qt, words.T).double().numpy()

    def block_maxima(self, qt, words, wb: int) -> np.ndarray:
        """Each block's largest score per query (blocks × queries), float32.

        Every score is negative, and the bit patterns of negative bf16 values, read as int16,
        sort in reverse: a smaller int16 is a larger score, and an int16 amin is ~7× faster
        than a bf16 amax. One output buffer for all GEMMs (no page faults per call)."""
        torch = self.torch
        nb, nq = len(words) // wb, len(qt)
        blocks = words.view(nb, wb, -1).transpose(1, 2).unbind(0)  # views: no Python slicing per call
        codes = torch.empty((nb, nq), dtype=torch.int16)
        buf = torch.empty((min(nq, LOWP_GEMM_ROWS), wb), dtype=torch.bfloat16)
        for s in range(0, nq, LOWP_GEMM_ROWS):
            n = min(LOWP_GEMM_ROWS, nq - s)
            rows, out = qt[s : s + n], buf[:n]
            out16 = out.view(torch.int16)
            for block, row in zip(blocks, codes[:, s : s + n].unbind(0)):
                torch.mm(rows, block, out=out)
                torch.amin(out16, dim=1, out=row)
        return codes.view(torch.bfloat16).float().numpy()


class _Emulated:
    """A numpy stand-in with ``bits`` significant bits (float32 GEMM, inputs and outputs rounded),
    to test the certificate without torch; coarse formats leave many candidates to re-rank."""

    k_multiple = 2

    def __init__(self, bits: int) -> None:
        self.bits = bits
        self.name = f"emulated {bits}-bit"

    def round(self, a: np.ndarray) -> np.ndarray:
        m, e = np.frexp(np.asarray(a, dtype=np.float64))
        return np.ldexp(np.round(m * 2.0**self.bits) / 2.0**self.bits, e)

    def matrix(self, a: np.ndarray) -> np.ndarray:
        return np.asarray(a, dtype=np.float32)

    def cat(self, parts: list) -> np.ndarray:
        return np.concatenate(parts)

    def take(self, m: np.ndarray, rows: np.ndarray) -> np.ndarray:
        return m[rows]

    def float32(self, m: np.ndarray) -> np.ndarray:
        return m

    def scores(self, qt: np.ndarray, words: np.ndarray) -> np.ndarray:
        return self.round(qt @ words.T)

    def block_maxima(self, qt: np.ndarray, words: np.ndarray, wb: int) -> np.ndarray:
        maxima = [self.scores(qt, words[s : s + wb]).max(axis=1) for s in range(0, len(words), wb)]
        return np.stack(maxima).astype(np.float32)


def _chunks(x: np.ndarray, rows: int = 65_536):
    """float64 copies of consecutive row blocks (no float64 copy of the whole matrix)."""
    return (x[s : s + rows].astype(np.float64) for s in range(0, len(x), rows))


def _down32(v: np.ndarray) -> np.ndarray:
    """float32 values ≤ v: comparing scores exact in float32 with them excludes nothing."""
    v32 = v.astype(np.float32)
    return np.where(v32 > v, np.nextafter(v32, np.float32(-np.inf)), v32)


def _keep_nearest(q, source, qi, pos, best, where) -> None:
    """Fold candidates (query qi, position pos) into the running best (float64 distance, lowest
    position on ties); successive calls bring ascending positions, so earlier ones win ties."""
    d = ((source[pos].astype(np.float64) - q[qi]) ** 2).sum(axis=1)
    order = np.lexsort((pos, d, qi))
    qs = qi[order]
    first = order[np.r_[True, qs[1:] != qs[:-1]]]
    better = d[first] < best[qi[first]]
    best[qi[first[better]]] = d[first[better]]
    where[qi[first[better]]] = pos[first[better]]


def _keep_two(q, source, qi, pos, best, where) -> None:
    """As ``_keep_nearest`` for the best two (best, where: n×2, nearest first, where −1 while
    empty): the new candidates and the current two of their queries, ordered by (query, float64
    distance, position); the first two of each query stay."""
    d = ((source[pos].astype(np.float64) - q[qi]) ** 2).sum(axis=1)
    u = np.unique(qi)
    held = where[u] >= 0
    qi = np.concatenate([qi, np.repeat(u, 2)[held.ravel()]])
    pos = np.concatenate([pos, where[u][held]])
    d = np.concatenate([d, best[u][held]])
    order = np.lexsort((pos, d, qi))
    qs = qi[order]
    start = np.flatnonzero(np.r_[True, qs[1:] != qs[:-1]])
    first = order[start]
    best[qs[start], 0], where[qs[start], 0] = d[first], pos[first]
    nxt = start + 1
    has = nxt < len(order)
    has[has] = qs[nxt[has]] == qs[start[has]]
    second = order[nxt[has]]
    best[qs[start[has]], 1], where[qs[start[has]], 1] = d[second], pos[second]


def _best_two64(source: np.ndarray, point: np.ndarray) -> np.ndarray:
    """The first two of np.lexsort((rows, float64 distances)) from one point to every row, in chunks."""
    d = np.concatenate([((c - point) ** 2).sum(axis=1) for c in _chunks(source)])
    return np.lexsort((np.arange(len(d)), d))[:2].astype(np.int64)


def _argmin64(source: np.ndarray, point: np.ndarray) -> int:
    """np.argmin of the float64 distances from one point to every row, in chunks."""
    best, where = np.inf, 0
    for s, c in zip(range(0, len(source), 65_536), _chunks(source)):
        d = ((c - point) ** 2).sum(axis=1)
        j = int(d.argmin())
        if d[j] < best:
            best, where = d[j], s + j
    return where


def _follow_blas_threads(torch) -> None:
    """One thread per Spark task: give torch the thread count dpspark gave BLAS (threadpoolctl
    limits, else OMP/OPENBLAS/MKL_NUM_THREADS); leave it alone when nothing is limited."""
    counts = []
    try:
        import threadpoolctl

        if int(threadpoolctl.__version__.split(".")[0]) >= 3:
            counts = [i["num_threads"] for i in threadpoolctl.threadpool_info() if i.get("user_api") == "blas"]
    except ImportError:
        pass
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        if os.environ.get(var, "").isdigit() and int(os.environ[var]) > 0:
            counts.append(int(os.environ[var]))
    if counts and min(counts) < torch.get_num_threads():
        torch.set_num_threads(min(counts))


def _cpu_flags() -> set[str]:
    """This CPU's flags from /proc/cpuinfo (no torch import)."""
    from dpspark._blas import cpu_fields

    return set(cpu_fields().get("flags", "").split())


def _bf16_cpu() -> bool:
    """A CPU with bf16 GEMM instructions (AMX-BF16 or AVX512-BF16) and PyTorch installed;
    reads /proc/cpuinfo only (no torch import)."""
    return bool(_cpu_flags() & {"amx_bf16", "avx512_bf16"}) and importlib.util.find_spec("torch") is not None


def lowp_available() -> bool:
    """Whether CertifiedIndex may run fast here: PyTorch with oneDNN on a CPU with AMX-BF16 or
    AVX512-BF16. Measured on one core at 400,000 words against float32 ExactIndex: 3.5× on
    Intel with AMX (bench/bench_search.py); 1.6× on AMD Zen 4 with AVX512-BF16 (1.5× at
    50,000 words; bench/bench_perturb.py, tokens/s of the whole perturber); 2.1× on Zen 5
    (rows of 54 rather than 64 bf16); but 0.75× on an Intel Xeon with AVX512-BF16 and no AMX,
    which is why AdaptiveIndex races the two rather than trusting the flags. Imports torch only
    on such CPUs."""
    if not _bf16_cpu():
        return False
    import torch

    return bool(torch.backends.mkldnn.is_available())


# Float32 word scores a process computes before AdaptiveIndex tries CertifiedIndex. Trying
# costs ≈ 1.5 s once per process (torch import ≈ 1.0 s, the bf16 matrix and oneDNN's first
# kernels ≈ 0.5 s, measured on Zen 4) and then saves ≈ 0.4 ns per score where bf16 is faster
# (float32 with OpenBLAS's Haswell kernels 0.85–1.2 ns per score, certified bf16 0.7–0.8 ns, at
# 50,000 and 400,000 words): ≈ 4e9 scores repay it. Trying once that much work is done is the
# rent-or-buy rule: never more than twice the cost of the better choice made in hindsight.
LOWP_SWITCH_SCORES = 4e9
# Word scores per run of the race between the two indexes (two runs each, on the same queries):
# ≈ 0.1–0.3 s per run at 50,000 and 400,000 words, long enough to time on a busy machine.
LOWP_RACE_SCORES = 2e8


class AdaptiveIndex:
    """Exact search that starts as ExactIndex (float32) and, once this process has scored
    LOWP_SWITCH_SCORES (query, word) pairs, races CertifiedIndex (bf16, certified) against it
    and keeps the faster.

    Small jobs (a notebook sample, an hourly ETL partition, ``make demo``) never pay for
    importing PyTorch; large ones (privacy-stats, big corpora) try the bf16 search after the
    first ≈ 4e9 scores (10,000 queries at 400,000 words, 80,000 at 50,000). The race is measured,
    not assumed from the CPU's flags: the first call with at least LOWP_RACE_SCORES scores runs
    its first queries twice on each index, alternating, and the lower of each index's two times
    decides (on an Intel Xeon with AVX512-BF16 and no AMX, float32 OpenBLAS was 1.3× faster
    than the certified bf16 search; on Zen 4, Zen 5 and AMX the bf16 search is 1.6–3.5× faster).
    Both answer the nearest word: ExactIndex up to float32 ties, CertifiedIndex exactly the
    float64 argmin. ``choice`` says which one answers and why.
    """

    method = "exact"

    def __init__(self, vectors: np.ndarray) -> None:
        self._x = vectors
        self.size, self.dim = np.shape(vectors)
        self._float32 = ExactIndex(vectors)
        self._certified: CertifiedIndex | None = None  # the race's winner, when bf16 won
        self._challenger: CertifiedIndex | None = None  # built, not raced yet
        self._scored = 0.0
        self.choice = "float32"

    def params(self) -> dict:
        return {**self._float32.params(), "bf16_certified_after_scores": LOWP_SWITCH_SCORES}

    def _run(self, method: str, points: np.ndarray, *rows: np.ndarray) -> np.ndarray:
        """``method`` of the index in use (``rows``: the subset ``query_among``/``query_two`` take)."""
        points = np.asarray(points)
        n = self.size if not rows or rows[0] is None else len(rows[0])
        if self._certified is None and self._challenger is None and self._scored >= LOWP_SWITCH_SCORES:
            self._scored = -np.inf  # one attempt per process
            try:
                if lowp_available():
                    self._challenger = CertifiedIndex(self._x)
            except (RuntimeError, ValueError) as e:
                warnings.warn(f"exact search stays float32: {e}", DPSparkWarning, stacklevel=3)
        self._scored += len(points) * n
        if self._challenger is not None and len(points) * n >= LOWP_RACE_SCORES:
            return self._race(method, points, rows, n)
        return getattr(self._certified or self._float32, method)(points, *rows)

    def _race(self, method: str, points: np.ndarray, rows: tuple, n: int) -> np.ndarray:
        """Answer ``points`` while timing both indexes on their first LOWP_RACE_SCORES scores."""
        probe = points[: max(1, int(-(-LOWP_RACE_SCORES // n)))]
        seconds: dict[str, list[float]] = {"float32": [], "bf16": []}
        answers = {}
        for _ in range(2):
            for name, index in (("float32", self._float32), ("bf16", self._challenger)):
                start = time.perf_counter()
                answers[name] = getattr(index, method)(probe, *rows)
                seconds[name].append(time.perf_counter() - start)
        fp32, bf16 = min(seconds["float32"]), min(seconds["bf16"])
        name = "bf16" if bf16 < fp32 else "float32"
        self._certified = self._challenger if name == "bf16" else None
        self._challenger = None
        self.choice = (
            f"{'certified bf16' if name == 'bf16' else 'float32'}: measured "
            f"{max(fp32, bf16) / min(fp32, bf16):.2f}x faster than {'float32' if name == 'bf16' else 'certified bf16'}"
        )
        rest = points[len(probe) :]
        if len(rest) == 0:
            return answers[name]
        return np.concatenate([answers[name], getattr(self._certified or self._float32, method)(rest, *rows)])

    def query(self, points: np.ndarray) -> np.ndarray:
        return self._run("query", points)

    def query_among(self, points: np.ndarray, rows: np.ndarray) -> np.ndarray:
        return self._run("query_among", points, rows)

    def within(self, centers: np.ndarray, radii: np.ndarray) -> list[np.ndarray]:
        return self._float32.within(centers, radii)

    def query_two(self, points: np.ndarray, among: np.ndarray | None = None) -> np.ndarray:
        """The two nearest rows (n×2): ``ExactIndex.query_two`` (float32) or, where the race chose
        it, ``CertifiedIndex.query_two`` (exactly the float64 best two); the scores count as ``query``'s."""
        return self._run("query_two", points, among)


class AnnoyIndex:
    """Annoy (spotify/annoy) Euclidean forest: approximate by design, memory-mapped from a file.

    ``search_k`` = −1 is annoy's default (n_trees × k nodes); larger values inspect
    more nodes and approach exact search at a cost in speed.
    """

    method = "annoy"

    def __init__(self, path: str, dim: int, n_trees: int, search_k: int = -1) -> None:
        from annoy import AnnoyIndex as _Annoy

        self.path, self.dim, self.n_trees, self.search_k = path, dim, n_trees, search_k
        self._index = _Annoy(dim, "euclidean")
        self._index.load(path)  # memory-mapped: every process shares the pages

    @classmethod
    def build(cls, vectors: np.ndarray, path: str, n_trees: int = 50, search_k: int = -1, seed: int = 0) -> AnnoyIndex:
        """Build a forest over ``vectors`` and save it to ``path``.

        The build seed only shapes the (public) tree structure, never the noise; a fixed
        value makes the index file reproducible for a given vocabulary.
        """
        from annoy import AnnoyIndex as _Annoy

        vectors = np.asarray(vectors, dtype=np.float32)
        index = _Annoy(vectors.shape[1], "euclidean")
        index.set_seed(seed)
        for i, v in enumerate(vectors):
            index.add_item(i, v)
        index.build(n_trees, n_jobs=1)
        index.save(os.fspath(path))
        index.unload()
        return cls(os.fspath(path), vectors.shape[1], n_trees, search_k)

    def params(self) -> dict:
        return {"n_trees": self.n_trees, "search_k": self.search_k}

    def query(self, points: np.ndarray) -> np.ndarray:
        # annoy has no batch query: one C++ call per point (this is annoy's cost, not ours).
        get = self._index.get_nns_by_vector
        k = self.search_k
        return np.fromiter(
            (get(p, 1, search_k=k)[0] for p in np.asarray(points, dtype=np.float32)), np.int64, len(points)
        )


def recall_at_1(index: NeighbourIndex, reference: NeighbourIndex, points: np.ndarray) -> float:
    """Share of ``points`` whose neighbour from ``index`` equals the reference (exact) one."""
    if len(points) == 0:
        return 1.0
    return float(np.mean(index.query(points) == reference.query(points)))
