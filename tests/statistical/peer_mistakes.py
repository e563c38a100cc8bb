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

The paper's closed forms (``tem_probabilities``, ``santext_probabilities``) sit beside the
mistaken ones: the suite also uses them as independent references for the registered TEM and
SanText.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from dpspark.mechanisms import Space, WordMechanism, sample_noise


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
        super().__init__(space, SimpleNamespace(name=f"{self.bottom}-tem", epsilon=float(epsilon)))
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
        super().__init__(space, SimpleNamespace(name="santext", epsilon=float(epsilon)))

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
        super().__init__(space, SimpleNamespace(name="vickrey-without-input", epsilon=float(epsilon)))
        self.t = float(t)
        self.a = space.a(lam)

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
