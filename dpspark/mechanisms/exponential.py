"""The exponential mechanism with utility −min(d, γ): the exact sampler TEM and SanText share.

Pr[y | w] = exp(−ε·min(d(w, y), γ)/2) / Σ_{y'∈W} exp(−ε·min(d(w, y'), γ)/2) for y in W,
d the Euclidean distance of the embedding. γ = ∞ is SanText (Yue et al. 2021); a finite γ
is TEM (Carvalho et al. 2023): the words within γ of w (L_w) are scored by their distance,
every other word by γ, which is the same as TEM's ⊥ (score −γ + (2/ε)·ln|W ∖ L_w|, then a
uniform word of W ∖ L_w). min(d, γ) is 1-Lipschitz in φ(w), so both are ε·d-private for
every γ (the 2 in the exponent pays for the normaliser).

The sampler is exact in distribution and draws with one uniform per token (inverse CDF in
float64 cumulative weights), never one Gumbel per candidate:

- the batch is grouped by distinct input row; each distinct word's weights are built once
  (one O(V) distance row, or its ball L_w when that is small) and every token of it takes one
  uniform. Zipfian text has far fewer distinct words than tokens.
- weights are exp(−ε(min(d, γ) − c)/2) in float64 with c the word's smallest score, so the
  largest weight is 1 and nothing overflows.
- TEM with a small ball (|L_w| ≤ V/8): L_w from the exact index's ball search, membership
  decided on distances recomputed directly in float64; S = Σ_{L_w} weights,
  M⊥ = (V − |L_w|)·e^{−ε(γ − c)/2}. A token's u·(S + M⊥) below S is an inverse-CDF draw in
  L_w; otherwise the token takes an integer j uniform in [0, V − |L_w|), mapped to the j-th
  word of W not in L_w (no rejection). Larger balls use the full distance row: the same
  distribution. Which of the two a word takes is a matter of speed only: while most balls of
  a block of words are small the next block searches balls, else it goes straight to rows.
- a full row is searched in two levels: the sums of chunks of CHUNK_WORDS words, then the
  cumulative sum of the one chunk a token lands in (a cumulative sum over all of V costs
  more than the distances themselves); a word with many tokens takes one cumulative row.

The draws are a pure function of the generator passed in: one ``rng.random(n)`` for the
batch, then one ``rng.integers`` call for the tokens that fall outside their ball.
"""

from __future__ import annotations

import math

import numpy as np

from dpspark.mechanisms.base import TILE_ALIGN, MechanismSpec, Space, WordMechanism

# A ball holding more than this fraction of W is sampled from the full distance row instead.
BALL_FRACTION = 1 / 8
# Words per chunk of the two-level inverse CDF over a full row (distance tiles start at multiples of it).
CHUNK_WORDS = TILE_ALIGN
# Words whose ball sizes decide how the next block is drawn (speed only).
PROBE = 32


def group_tokens(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct rows of a batch and where their tokens are.

    Returns ``(distinct, order, bounds)``: the tokens of ``distinct[k]`` are
    ``order[bounds[k]:bounds[k + 1]]`` (positions in ``rows``, ascending).
    """
    distinct, inverse = np.unique(rows, return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    bounds = np.zeros(len(distinct) + 1, dtype=np.int64)
    np.cumsum(np.bincount(inverse, minlength=len(distinct)), out=bounds[1:])
    return distinct, order, bounds


def inverse_cdf(cumulative: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Index i with cumulative[i−1] ≤ t < cumulative[i] for each target t in [0, cumulative[−1]).

    Entries of zero weight are never returned: a target rounded up to the total goes to the
    last entry of positive weight.
    """
    last = np.searchsorted(cumulative, cumulative[-1], side="left")
    return np.minimum(np.searchsorted(cumulative, targets, side="right"), last)


def nth_outside(inside: np.ndarray, j: np.ndarray) -> np.ndarray:
    """The j-th (0-based) non-negative integer not in ``inside`` (sorted, distinct), for each j."""
    return j + np.searchsorted(inside - np.arange(len(inside)), j, side="right")


def chunk_sums(weights: np.ndarray, start: int, sums: np.ndarray) -> None:
    """The sums of the CHUNK_WORDS-word chunks of ``weights`` (b × n, the columns from ``start``, a
    multiple of CHUNK_WORDS; the last chunk may be short) into their columns of ``sums``."""
    b, n = weights.shape
    whole, first = n // CHUNK_WORDS, start // CHUNK_WORDS
    sums[:, first : first + whole] = weights[:, : whole * CHUNK_WORDS].reshape(b, whole, CHUNK_WORDS).sum(axis=2)
    if n % CHUNK_WORDS:
        sums[:, first + whole] = weights[:, whole * CHUNK_WORDS :].sum(axis=1)


def bottom_probability(size: int, epsilon: float, gamma: float) -> float:
    """Pr[⊥] of TEM for a vocabulary word whose ball is itself alone: the largest it can be,
    (V − 1)·e^{−εγ/2} / (1 + (V − 1)·e^{−εγ/2})."""
    if size <= 1 or not math.isfinite(gamma):
        return 0.0
    m = (size - 1) * math.exp(-epsilon * gamma / 2.0)
    return m / (1.0 + m)


class TruncatedExponential(WordMechanism):
    """Pr[y | w] ∝ exp(−ε·min(d(w, y), γ)/2) over W (γ = ∞: no truncation).

    Args:
        space: the public space (W, its exact index, float64 distance rows).
        spec: the mechanism's spec (ε).
        gamma: the truncation radius γ ≥ 0, or ``math.inf``.
    """

    def __init__(self, space: Space, spec: MechanismSpec, gamma: float) -> None:
        super().__init__(space, spec)
        self.gamma = float(gamma)

    # ---- the closed form -------------------------------------------------------------------

    def _scores(self, rows: np.ndarray) -> np.ndarray:
        """−u(w, y) for every row w and y in W (n × V float64, consumed by ``_weights``): the distance
        d(w, y) here; a subclass with another utility overrides it (the ball search assumes d)."""
        return self.space.distance_rows(rows)

    def _weights(self, dist: np.ndarray) -> np.ndarray:
        """exp(−ε(min(d, γ) − c)/2) per row in place (c: each row's smallest score)."""
        if math.isfinite(self.gamma):
            np.minimum(dist, self.gamma, out=dist)
        low = dist.min(axis=1, keepdims=True)
        if low.any():  # 0 for every word of W
            dist -= low
        dist *= -self.epsilon / 2.0
        np.exp(dist, out=dist)
        return dist

    def distribution(self, rows: np.ndarray) -> np.ndarray:
        """The exact P(u | w): an (n × V) float64 array from ``Space.distance_rows``, rows summing to 1."""
        rows = np.asarray(rows, dtype=np.int64)
        out = np.empty((len(rows), self.space.size), dtype=np.float64)
        step = self.space.block
        for s in range(0, len(rows), step):
            w = self._weights(self._scores(rows[s : s + step]))
            w /= w.sum(axis=1, keepdims=True)
            out[s : s + step] = w
        return out

    # ---- the sampler ----------------------------------------------------------------------

    def sample(self, rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One independent output per token (positions in W, int64), exact in distribution."""
        rows = np.asarray(rows, dtype=np.int64)
        out = np.empty(rows.shape, dtype=np.int64)
        if rows.size == 0:
            return out
        flat = out.reshape(-1)
        u = rng.random(rows.size)
        distinct, order, bounds = group_tokens(rows.reshape(-1))
        # (tokens, sorted L_w) of the words some of whose tokens fall outside their ball.
        outside: list[tuple[np.ndarray, np.ndarray]] = []
        truncated = math.isfinite(self.gamma) and self.space.size > 1
        limit = self.space.size * BALL_FRACTION
        # Speed only: search balls while most of them are small (large ε), else go straight to
        # distance rows; each block of words decides for the next.
        balls = truncated
        step = self.space.block
        # A small first block: a ball search that turns out to hold most of W costs little.
        starts = [0, *range(min(step, PROBE), len(distinct), step)]
        for s, e in zip(starts, [*starts[1:], len(distinct)]):
            block = np.arange(s, e)
            if balls:
                found = self.space.exact.within(self.vectors[distinct[block]], np.full(len(block), self.gamma))
                large = np.array([len(c) > limit for c in found], dtype=bool)
                for k, candidates in zip(block[~large], (c for c, x in zip(found, large) if not x)):
                    drawn = self._draw_ball(distinct[k], candidates, order[bounds[k] : bounds[k + 1]], u, flat)
                    if drawn is not None:
                        outside.append(drawn)
                balls = 2 * np.count_nonzero(large) <= len(block)
                block = block[large]
                if not len(block):
                    continue
                weights, sums, _ = self._weight_rows(distinct[block])
            else:
                weights, sums, inside = self._weight_rows(distinct[block])
                if truncated:
                    probe = inside[:PROBE] > limit
                    balls = 2 * np.count_nonzero(probe) <= len(probe)
            self._draw_rows(weights, sums, block, order, bounds, u, flat)
        if outside:
            sizes = np.concatenate([np.full(len(t), self.space.size - len(ball)) for t, ball in outside])
            j = rng.integers(0, sizes)
            at = 0
            for t, ball in outside:
                flat[t] = nth_outside(ball, j[at : at + len(t)])
                at += len(t)
        return out

    def _weight_rows(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``self._weights(self._scores(rows))`` (b × V), the sums of its chunks of CHUNK_WORDS
        words (b × ⌈V/CHUNK_WORDS⌉), and each row's count of words within γ (its ball's size; of the
        first PROBE rows at least, which is what ``sample`` reads).

        With this class's own distance scores and weights and every row in W (so each row's
        smallest score is its distance to itself, 0, and nothing is subtracted), the weights and
        their chunk sums are made tile by tile inside ``Space.distance_rows`` while each tile is
        in cache: the same values, without passing over a b × V array ten times.
        """
        fused = (
            TILE_ALIGN % CHUNK_WORDS == 0  # every tile holds whole chunks
            and type(self)._scores is TruncatedExponential._scores
            and type(self)._weights is TruncatedExponential._weights
            and self.space.positions(rows)[1].all()
        )
        sums = np.empty((len(rows), -(-self.space.size // CHUNK_WORDS)), dtype=np.float64)
        inside = np.zeros(len(rows), dtype=np.int64)
        if not fused:
            dist = self._scores(rows)
            if math.isfinite(self.gamma):
                inside[:PROBE] = np.count_nonzero(dist[:PROBE] <= self.gamma, axis=1)
            weights = self._weights(dist)
            chunk_sums(weights, 0, sums)
            return weights, sums, inside
        scale, gamma = -self.epsilon / 2.0, self.gamma

        def finish(tile: np.ndarray, start: int) -> None:
            if math.isfinite(gamma):
                inside[:] += np.count_nonzero(tile <= gamma, axis=1)
                np.minimum(tile, gamma, out=tile)
            tile *= scale
            np.exp(tile, out=tile)
            chunk_sums(tile, start, sums)

        return self.space.distance_rows(rows, each=finish), sums, inside

    def _draw_rows(
        self,
        weights: np.ndarray,
        sums: np.ndarray,
        block: np.ndarray,
        order: np.ndarray,
        bounds: np.ndarray,
        u: np.ndarray,
        out: np.ndarray,
    ) -> None:
        """Inverse-CDF draws of the tokens of the words ``block`` from their weight rows (b × V, consumed)
        and the sums of their chunks (``chunk_sums``).

        Two levels instead of one cumulative sum over V per word (the slow part): the sums of
        chunks of CHUNK_WORDS words, then a cumulative sum inside the one chunk a token lands in.
        The same partition of [0, total) into the words' weights, up to float64 rounding.
        """
        size = weights.shape[1]
        cumulative = np.cumsum(sums, axis=1)
        span = np.arange(CHUNK_WORDS)
        for i, k in enumerate(block):
            tokens = order[bounds[k] : bounds[k + 1]]
            if len(tokens) > sums.shape[1]:  # many tokens: one cumulative row is cheaper
                row = np.cumsum(weights[i])
                out[tokens] = inverse_cdf(row, u[tokens] * row[-1])
                continue
            targets = u[tokens] * cumulative[i, -1]
            chunk = inverse_cdf(cumulative[i], targets)
            targets -= np.where(chunk > 0, cumulative[i, chunk - 1], 0.0)
            cols = (chunk * CHUNK_WORDS)[:, None] + span
            local = weights[i, np.minimum(cols, size - 1)]
            local[cols >= size] = 0.0
            np.cumsum(local, axis=1, out=local)
            # searchsorted(side="right") per token, kept off the chunk's trailing zero weights.
            at = np.count_nonzero(local <= targets[:, None], axis=1)
            last = np.count_nonzero(local < local[:, -1:], axis=1)
            out[tokens] = cols[:, 0] + np.minimum(at, last)

    def _draw_ball(
        self, row: int, candidates: np.ndarray, tokens: np.ndarray, u: np.ndarray, out: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """Draw the tokens of one word from its ball L_w and the uniform remainder.

        Writes the tokens that land in L_w; returns (the other tokens, sorted L_w) for the
        uniform draw over W ∖ L_w, or None when every token landed in L_w.
        """
        dist = self.space.distances(row, candidates)
        keep = dist <= self.gamma
        ball = candidates[keep]  # ascending: ``within`` lists positions in order
        dist = dist[keep]
        c = dist.min() if len(ball) else self.gamma
        weights = np.exp(-self.epsilon / 2.0 * (dist - c))
        cumulative = np.cumsum(weights)
        inner = float(cumulative[-1]) if len(ball) else 0.0
        rest = (self.space.size - len(ball)) * math.exp(-self.epsilon / 2.0 * (self.gamma - c))
        targets = u[tokens] * (inner + rest)
        # rest = 0: L_w is W (or the far words' weights underflow float64): every token is in L_w.
        hit = targets < inner if rest > 0.0 else np.ones(len(tokens), dtype=bool)
        if hit.any():
            out[tokens[hit]] = ball[inverse_cdf(cumulative, targets[hit])]
        if hit.all():
            return None
        return tokens[~hit], ball
