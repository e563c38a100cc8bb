"""Real mistakes of the peer implementations (mechanisms.md, "Pitfalls"), as test fixtures.

Each class is a ``WordMechanism`` over the same ``Space`` as the registered mechanisms, so the
conformance suite (``test_conformance.py``) runs its checks on them unchanged and its own tests
show that each check fails on a mistake that was actually published. They are **never**
registered in ``dpspark.mechanisms.REGISTRY``.

- ``MldpTem``: TEM with the MLDP benchmark's ⊥ score f(⊥) = −γ + (2/ε)·ln(V/|L_w|) (also
  mldp-text 0.1.2) instead of the paper's −γ + (2/ε)·ln|W ∖ L_w|. Its sampler and its closed
  form agree with each other, so only the privacy-loss audit (and a comparison with the paper's
  formula) can catch it.
- ``ThreeCoordinateSanText``: SanText whose sampler measures d(x, y) on the first 3 coordinates
  only (the MLDP benchmark), while it claims SanText's distribution exp(−ε·d/2): the χ² test
  catches it. (Measured on 3 coordinates it is still ε·d-private, d₃ ≤ d: the audit cannot.)
- ``VickreyWithoutInput``: Vickrey with the two nearest words taken over W ∖ {w} (the MLDP
  appendix's literal pseudocode): it never outputs its input, so P(w | w) = 0 < P(w | w′) and no
  finite ε holds; it has no closed form, so the checks that catch it work on draws.
- ``PypanteraTem``: TEM whose ⊥ returns the input word (pypantera 1.0.2), claiming the paper's
  closed form: the χ² test catches it where the ⊥ bucket is large (β = 0.2).
- ``PypanteraCusText``: CusText with an independent top-K output set per word (pypantera 1.0.2), no
  shared groups, while claiming the paper's groups: the group audit catches it (an output possible
  from one word of a group and impossible from another). With ``ascending`` (pypantera's cosine
  mode) it samples among the K least similar words: the χ² test against the paper's closed form
  catches it.
- ``MldpTruncatedGumbel``: the Truncated Gumbel mechanism run below its threshold
  ε > (5 + 2 ln V)/Δ0 (the MLDP benchmark's ε = 1, 5, 10) with b from the real part of the complex
  Lambert W: b barely moves with ε, so neither do the draws. The registered mechanism refuses such ε.

The paper's closed forms (``tem_probabilities``, ``santext_probabilities``,
``custext_probabilities`` with the sequential mapping ``custext_groups``) sit beside the mistaken
ones: the suite also uses them as independent references for the registered TEM, SanText and
CusText.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from scipy import special

from dpspark.mechanisms import Space, WordMechanism, sample_noise
from dpspark.mechanisms.noise import rm_matrix
from dpspark.mechanisms.truncated_gumbel import TruncatedGumbelSampler


def _rows_in_blocks(space: Space, rows: np.ndarray):
    rows = np.asarray(rows, dtype=np.int64)
    for start in range(0, len(rows), space.block):
        yield start, rows[start : start + space.block]


def _coordinate_distances(space: Space, rows: np.ndarray, coordinates: int) -> np.ndarray:
    """d(w, u) on the first ``coordinates`` coordinates, (n × V) float64."""
    x = np.asarray(space.vectors[rows, :coordinates], dtype=np.float64)
    w = space.vocab64[:, :coordinates]
    d2 = (x * x).sum(axis=1)[:, None] + (w * w).sum(axis=1)[None, :] - 2.0 * x @ w.T
    return np.sqrt(np.maximum(d2, 0.0))


def tem_probabilities(
    space: Space, rows: np.ndarray, epsilon: float, gamma: float, bottom: str = "paper"
) -> np.ndarray:
    """TEM's P(y | w) for each row (n × V float64).

    ``bottom="paper"``: f(⊥) = −γ + (2/ε)·ln|W ∖ L_w|, so every y ∉ L_w gets weight e^{−εγ/2}
    (Pr[y | w] ∝ exp(−ε·min(d, γ)/2)). ``bottom="mldp"``: f(⊥) = −γ + (2/ε)·ln(V/|L_w|), so the
    ⊥ bucket's weight e^{−εγ/2}·V/|L_w| is shared by the V − |L_w| words outside L_w.
    """
    out = np.empty((len(rows), space.size))
    for start, block in _rows_in_blocks(space, rows):
        d = space.distance_rows(block)
        inside = d <= gamma
        weights = np.exp(-0.5 * epsilon * d)
        outside = np.exp(-0.5 * epsilon * gamma)
        if bottom == "mldp":
            n_in = inside.sum(axis=1, keepdims=True)
            n_out = space.size - n_in
            outside = np.where(n_out > 0, outside * space.size / n_in / np.maximum(n_out, 1), 0.0)
        elif bottom != "paper":
            raise ValueError(f"bottom must be 'paper' or 'mldp', got {bottom!r}")
        weights = np.where(inside, weights, outside)
        out[start : start + len(block)] = weights / weights.sum(axis=1, keepdims=True)
    return out


def santext_probabilities(space: Space, rows: np.ndarray, epsilon: float, coordinates: int | None = None) -> np.ndarray:
    """SanText's P(y | w) ∝ exp(−ε·d(w, y)/2) over W (n × V float64); d on the first
    ``coordinates`` coordinates when given (the MLDP benchmark's mistake)."""
    out = np.empty((len(rows), space.size))
    for start, block in _rows_in_blocks(space, rows):
        if coordinates is None:
            d = space.distance_rows(block)
        else:
            d = _coordinate_distances(space, block, coordinates)
        d -= d.min(axis=1, keepdims=True)  # weights ≤ 1: no overflow at any ε
        weights = np.exp(-0.5 * epsilon * d)
        out[start : start + len(block)] = weights / weights.sum(axis=1, keepdims=True)
    return out


def santext_plus_probabilities(
    space: Space, rows: np.ndarray, epsilon: float, protected: np.ndarray, p: float
) -> np.ndarray:
    """SanText+'s P(y | w) (n × V float64): ∝ exp(−ε·d(w, y)/2) over the protected positions only; a word
    of W outside them is sampled so with probability p and kept otherwise (the authors' SanText_plus,
    with rows and words attached correctly)."""
    mask = np.zeros(space.size, dtype=bool)
    mask[protected] = True
    out = np.zeros((len(rows), space.size))
    for start, block in _rows_in_blocks(space, rows):
        d = space.distance_rows(block)[:, mask]
        d -= d.min(axis=1, keepdims=True)
        weights = np.exp(-0.5 * epsilon * d)
        out[start : start + len(block), mask] = weights / weights.sum(axis=1, keepdims=True)
    plain = np.flatnonzero(~mask[rows])  # W's positions are the embedding's rows in the suite
    out[plain] *= p
    out[plain, rows[plain]] += 1.0 - p
    return out


def syntf_probabilities(space: Space, rows: np.ndarray, epsilon: float) -> np.ndarray:
    """SynTF's word draw: P(y | w) ∝ exp(ε·max(0, cos(φ(w), φ(y)))/2) over W (n × V float64)."""
    unit = space.vocab64 / np.linalg.norm(space.vocab64, axis=1, keepdims=True)
    x = np.asarray(space.vectors[rows], dtype=np.float64)
    rho = np.maximum((x / np.linalg.norm(x, axis=1, keepdims=True)) @ unit.T, 0.0)
    weights = np.exp(0.5 * epsilon * (rho - 1.0))
    return weights / weights.sum(axis=1, keepdims=True)


def clipped_geometric_probabilities(order: np.ndarray, index: np.ndarray, epsilon: float) -> np.ndarray:
    """1-Diffractor's P(y | w) over W (n × V float64) for words at list positions ``index`` of the list
    ``order`` (positions of W): the two-sided geometric α^{|k|}(1 − α)/(1 + α), α = e^{−ε}, on the list
    index, clipped to its ends (summed there by brute force over k, not by the closed-form tails)."""
    size = len(order)
    alpha = np.exp(-epsilon)
    k = np.arange(-2 * size, 2 * size + 1)
    law = (1 - alpha) / (1 + alpha) * alpha ** np.abs(k)
    out = np.zeros((len(index), size))
    for n, i in enumerate(index):
        by_index = np.bincount(np.clip(i + k, 0, size - 1), weights=law, minlength=size)
        out[n, order] = by_index
    return out


def sample_from_rows(space: Space, probabilities, rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One draw per token from ``probabilities(distinct rows)`` by inverse CDF, one row per distinct word."""
    rows = np.asarray(rows, dtype=np.int64)
    distinct, inverse = np.unique(rows, return_inverse=True)
    u = rng.random(len(rows))
    order = np.argsort(inverse, kind="stable")
    bounds = np.searchsorted(inverse[order], np.arange(len(distinct) + 1))
    out = np.empty(len(rows), dtype=np.int64)
    for start, block in _rows_in_blocks(space, distinct):
        cdf = np.cumsum(probabilities(block), axis=1)
        for j in range(len(block)):
            tokens = order[bounds[start + j] : bounds[start + j + 1]]
            at = np.searchsorted(cdf[j], u[tokens] * cdf[j, -1], side="right")
            out[tokens] = np.minimum(at, space.size - 1)
    return out


class PaperTem(WordMechanism):
    """The paper's TEM by its closed form (inverse CDF): the control beside ``MldpTem``."""

    bottom = "paper"

    def __init__(self, space: Space, epsilon: float, gamma: float) -> None:
        super().__init__(
            space, SimpleNamespace(name=f"{self.bottom}-tem", epsilon=float(epsilon), guarantee_type="metric")
        )
        self.gamma = float(gamma)

    def distribution(self, rows: np.ndarray) -> np.ndarray:
        return tem_probabilities(self.space, rows, self.epsilon, self.gamma, bottom=self.bottom)

    def sample(self, rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        # Gumbel-max over L_w ∪ {⊥}, then a uniform word of W ∖ L_w, is this distribution exactly.
        return sample_from_rows(self.space, self.distribution, rows, rng)


class MldpTem(PaperTem):
    """TEM with MLDP's ⊥ score ln(V/|L_w|): sampler and closed form of that mistake (not ε·d-private)."""

    bottom = "mldp"


class PaperSanText(WordMechanism):
    """The paper's SanText by its closed form (inverse CDF): the control beside ``ThreeCoordinateSanText``."""

    def __init__(self, space: Space, epsilon: float) -> None:
        super().__init__(space, SimpleNamespace(name="santext", epsilon=float(epsilon), guarantee_type="metric"))

    def distribution(self, rows: np.ndarray) -> np.ndarray:
        return santext_probabilities(self.space, rows, self.epsilon)

    def sample(self, rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return sample_from_rows(self.space, self.distribution, rows, rng)


class ThreeCoordinateSanText(PaperSanText):
    """SanText sampled with d on the first 3 coordinates, claiming SanText's closed form on all of them."""

    coordinates = 3

    def sample(self, rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        def mistaken(block: np.ndarray) -> np.ndarray:
            return santext_probabilities(self.space, block, self.epsilon, coordinates=self.coordinates)

        return sample_from_rows(self.space, mistaken, rows, rng)


class VickreyWithoutInput(WordMechanism):
    """Vickrey (k = 2) with the two nearest words of v = φ(w) + Z taken over W ∖ {w}: never outputs w."""

    def __init__(self, space: Space, epsilon: float, t: float = 0.5, lam: float = 0.0) -> None:
        super().__init__(
            space, SimpleNamespace(name="vickrey-without-input", epsilon=float(epsilon), guarantee_type="metric")
        )
        self.t = float(t)
        self.a = rm_matrix(space, lam)

    def sample(self, rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        rows = np.asarray(rows, dtype=np.int64)
        space = self.space
        v = space.vectors[rows].astype(np.float64) + sample_noise(len(rows), space.dim, self.epsilon, rng, self.a)
        pos, found = space.positions(rows)
        first = np.empty(len(rows), dtype=np.int64)
        second = np.empty(len(rows), dtype=np.int64)
        norms = np.einsum("ij,ij->i", space.vocab64, space.vocab64)
        for start in range(0, len(rows), space.block):
            part = v[start : start + space.block]
            d2 = norms[None, :] - 2.0 * part @ space.vocab64.T
            here = np.flatnonzero(found[start : start + space.block])
            d2[here, pos[start + here]] = np.inf  # the mistake: the input word is no candidate
            two = np.argpartition(d2, 1, axis=1)[:, :2]
            swap = d2[np.arange(len(part))[:, None], two]
            two = np.where((swap[:, :1] <= swap[:, 1:]), two, two[:, ::-1])
            first[start : start + len(part)], second[start : start + len(part)] = two[:, 0], two[:, 1]
        r1 = np.linalg.norm(space.vocab64[first] - v, axis=1)
        r2 = np.linalg.norm(space.vocab64[second] - v, axis=1)
        denominator = self.t * r1 + (1 - self.t) * r2
        with np.errstate(invalid="ignore", divide="ignore"):
            p = np.where(denominator > 0, (1 - self.t) * r2 / denominator, 1 - self.t)
        return np.where(rng.random(len(rows)) < p, first, second)


class PypanteraTem(PaperTem):
    """TEM whose ⊥ branch returns the input word (pypantera 1.0.2: an exception is caught and the
    word kept), claiming the paper's closed form. Pr[⊥] ≤ β: at β = 0.001 its excess on P(w | w)
    hides in the draws' noise; a setting with a large ⊥ bucket exposes it."""

    def sample(self, rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        rows = np.asarray(rows, dtype=np.int64)
        out = super().sample(rows, rng)
        far = np.linalg.norm(self.space.vocab64[out] - self.space.vectors[rows].astype(np.float64), axis=1)
        pos, _ = self.space.positions(rows)
        return np.where(far > self.gamma, pos, out)


# ---- CusText (Chen et al., Findings of ACL 2023) --------------------------------------------

_CUSTEXT_GROUPS: dict[tuple, tuple[list[np.ndarray], np.ndarray]] = {}


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _custext_scores(space: Space, x: np.ndarray, positions: np.ndarray, similarity: str) -> np.ndarray:
    """s(x, y) for one vector x and the words of W at ``positions``: the cosine, or minus the Euclidean distance."""
    y = space.vocab64[positions]
    if similarity == "cosine":
        return (_unit(y) * _unit(x)).sum(axis=1)
    return -np.linalg.norm(y - x, axis=1)


class _RoughScores:
    """The scores of a seed against every word by one matrix-vector product (W's unit vectors, or
    ‖y‖² − 2x·y for the distance), within 1e-12 of ``_custext_scores``: ``candidates`` keeps, of the words
    at ``alive`` (the seed first), those within a margin of 1e-9 of the top_k-th rough score. Every word of
    the exact top_k (ties included) is among them, so the plain rule run on them alone gives the same group
    (test_conformance.py: test_custext_groups_on_rough_candidates_are_the_plain_rules). On the 50,000 words of
    the conformance suite, every group of its three settings was measured equal."""

    def __init__(self, space: Space, similarity: str):
        w = space.vocab64
        self.cosine = similarity == "cosine"
        self.w = _unit(w) if self.cosine else w
        self.norms = None if self.cosine else (w * w).sum(axis=1)

    def candidates(self, alive: np.ndarray, top_k: int) -> np.ndarray:
        x = self.w[alive[0]]
        if self.cosine:
            scores, scale = self.w @ x, 1.0
        else:  # −‖y − x‖² + ‖x‖²: the same order as minus the distance
            scores, scale = 2 * (self.w @ x) - self.norms, float(self.norms.max() + x @ x)
        s = scores[alive]
        kth = np.partition(s, len(s) - top_k)[len(s) - top_k]
        keep = s >= kth - 1e-9 * scale
        keep[0] = True  # the seed stays first
        return alive[keep]


def custext_groups(
    space: Space, top_k: int, similarity: str, stop: tuple[int, ...] = (), rough: bool = True
) -> tuple[list[np.ndarray], np.ndarray]:
    """Chen et al.'s mapping, one seed at a time (slow, plain): (the groups as W positions, each position's
    group). Walk W in the embedding's row order (most frequent first) without the ``stop`` positions; the
    first word not yet assigned takes its ``top_k`` most similar words among those not yet assigned (itself
    included; ties to the more frequent word), and all of them share that set. Each stop word is a group of
    its own (CusText+). ``rough``: the plain rule runs on ``_RoughScores``' candidates only (the same groups,
    8x faster at 50,000 words). Cached per space and setting."""
    key = (id(space), top_k, similarity, tuple(stop), rough)
    if key not in _CUSTEXT_GROUPS:
        order = np.argsort(space.vocab_rows, kind="stable")
        rank = np.empty(space.size, dtype=np.int64)
        rank[order] = np.arange(space.size)
        free = np.ones(space.size, dtype=bool)
        free[list(stop)] = False
        groups = []
        shortcut = _RoughScores(space, similarity) if rough else None
        while free.any():
            alive = order[free[order]]
            if shortcut is not None and len(alive) > top_k:  # the words that can be among the top_k: no other
                alive = shortcut.candidates(alive, top_k)
            s = _custext_scores(space, space.vocab64[alive[0]], alive, similarity)
            if len(alive) > top_k:  # the top_k largest (and any ties at the top_k-th), then sorted
                near = s >= np.sort(s)[len(alive) - top_k]
                alive, s = alive[near], s[near]
            group = alive[np.lexsort((rank[alive], -s))[:top_k]]
            groups.append(group)
            free[group] = False
        groups += [np.array([p]) for p in stop]
        owner = np.full(space.size, -1, dtype=np.int64)
        for g, group in enumerate(groups):
            owner[group] = g
        _CUSTEXT_GROUPS[key] = (groups, owner)
    return _CUSTEXT_GROUPS[key]


def custext_weights(space: Space, x: np.ndarray, outputs: np.ndarray, epsilon: float, similarity: str) -> np.ndarray:
    """Pr[y | x] ∝ exp(ε·u(x, y)/2) over y in ``outputs``, u = (s − min s)/(max s − min s) (1 when max = min)."""
    s = _custext_scores(space, x, outputs, similarity)
    span = s.max() - s.min()
    u = (s - s.min()) / span if span > 0 else np.ones(len(s))
    w = np.exp(0.5 * epsilon * u)
    return w / w.sum()


def custext_probabilities(
    space: Space, rows: np.ndarray, epsilon: float, top_k: int, similarity: str, stop: tuple[int, ...] = ()
) -> np.ndarray:
    """CusText's P(y | w) (n × V float64) for words of W: the exponential mechanism over w's group."""
    groups, owner = custext_groups(space, top_k, similarity, stop)
    pos, found = space.positions(rows)
    assert found.all(), "the reference covers words of W only"
    out = np.zeros((len(rows), space.size))
    for i, p in enumerate(pos):
        group = groups[owner[p]]
        out[i, group] = custext_weights(space, space.vocab64[p], group, epsilon, similarity)
    return out


class PaperCusText(WordMechanism):
    """Chen et al.'s CusText by the reference above (closed form, inverse-CDF draws): each word's outputs are
    its group. ``group_of`` gives the paper's groups, which the suite's group audit reads."""

    def __init__(self, space: Space, epsilon: float, top_k: int = 20, similarity: str = "cosine") -> None:
        spec = SimpleNamespace(name="custext", epsilon=float(epsilon), guarantee_type="group")
        super().__init__(space, spec)
        self.top_k, self.similarity = int(top_k), similarity
        self.groups, self.owner = custext_groups(space, self.top_k, similarity)

    def group_of(self, rows: np.ndarray) -> np.ndarray:
        pos, _ = self.space.positions(rows)
        return self.owner[pos]

    def outputs(self, position: int) -> np.ndarray:
        """The output set of the word at ``position`` of W."""
        return self.groups[self.owner[position]]

    def distribution(self, rows: np.ndarray) -> np.ndarray:
        pos, _ = self.space.positions(rows)
        out = np.zeros((len(rows), self.space.size))
        for i, p in enumerate(pos):
            y = self.outputs(p)
            out[i, y] = custext_weights(self.space, self.space.vocab64[p], y, self.epsilon, self.similarity)
        return out

    def sample(self, rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return sample_from_rows(self.space, self.distribution, rows, rng)


class PypanteraCusText(PaperCusText):
    """pypantera 1.0.2's CusText: each word's outputs are its **own** K most similar words of W (no shared
    groups), or with ``ascending`` (its cosine mode) its K **least** similar; the weights exp(ε·u/2) as the
    paper's. ``group_of`` still claims the paper's groups: two words of one group have different output sets,
    so some y has P(y | x) > 0 = P(y | x′) and no finite ε holds within the group."""

    def __init__(
        self, space: Space, epsilon: float, top_k: int = 20, similarity: str = "cosine", ascending: bool = False
    ) -> None:
        super().__init__(space, epsilon, top_k, similarity)
        self.ascending = ascending

    def outputs(self, position: int) -> np.ndarray:
        everyone = np.arange(self.space.size)
        s = _custext_scores(self.space, self.space.vocab64[position], everyone, self.similarity)
        return first_k(s if self.ascending else -s, self.top_k)


def first_k(key: np.ndarray, k: int) -> np.ndarray:
    """The positions of ``np.argsort(key, kind="stable")[:k]``, sorted (ties to the lower position), in
    O(len(key)): the keys below the k-th smallest, then the lowest positions of the keys equal to it."""
    kth = np.partition(key, k - 1)[k - 1]
    below = np.flatnonzero(key < kth)
    return np.sort(np.concatenate([below, np.flatnonzero(key == kth)[: k - len(below)]]))


def mldp_gumbel_scale(epsilon: float, size: int, delta: float, delta0: float) -> float:
    """The MLDP benchmark's b at any ε: 2Δ / min(Re W₀(2αΔ), ln(αΔ0)), α = (ε − 2(1 + ln V)/Δ0)/3.

    Below the threshold α < 0: 2αΔ < −1/e, where W₀ is complex, and its real part is taken; ln(αΔ0)
    of a negative number is NaN (numpy), which Python's ``min`` drops (NaN < x is false). mechanisms.md
    records the real part; the NaN falling out of ``min`` is this fixture's reading of it."""
    alpha = (epsilon - 2.0 * (1.0 + np.log(size)) / delta0) / 3.0
    with np.errstate(invalid="ignore"):
        log_term = float(np.log(alpha * delta0))
    return 2.0 * delta / min(float(special.lambertw(2.0 * alpha * delta, 0).real), log_term)


class MldpTruncatedGumbel(TruncatedGumbelSampler):
    """The Truncated Gumbel sampler with the MLDP benchmark's b (``mldp_gumbel_scale``), at an ε below the
    threshold that the registered mechanism refuses. ``delta``, ``delta0``: Δ and Δ0 of W."""

    def __init__(self, space: Space, epsilon: float, delta: float, delta0: float) -> None:
        spec = SimpleNamespace(name="mldp-truncated-gumbel", epsilon=float(epsilon))
        super().__init__(space, spec, mldp_gumbel_scale(epsilon, space.size, delta, delta0), delta)
