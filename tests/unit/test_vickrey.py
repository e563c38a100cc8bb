"""The Vickrey mechanism (dpspark.mechanisms.vickrey): search, choice, copies, parameters."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpspark.errors import ConfigError
from dpspark.mechanisms import REGISTRY, parse, sample_noise
from dpspark.mechanisms.base import Space
from dpspark.mechanisms.noise import CHUNK, Laplace, Mahalanobis
from dpspark.mechanisms.vickrey import Vickrey, VickreySampler, choose_first
from dpspark.neighbours import QUERY_BLOCK, WORD_BLOCK, AdaptiveIndex, CertifiedIndex, ExactIndex, _Emulated

# runtime: numpy, pyarrow and Python differ across the Databricks runtimes (CONTRIBUTING.md)
pytestmark = pytest.mark.runtime


@pytest.fixture(scope="module")
def space20k(glove):
    rows = np.arange(20_000)
    return Space(glove.vectors, rows, index=ExactIndex(glove.vectors[rows]))


def top_two64(vectors, queries):
    """Brute-force float64 best two (n×2 rows, nearest first) and their distances, 16 queries at a time."""
    x = vectors.astype(np.float64)
    rows, dist = [], []
    for s in range(0, len(queries), 16):
        q = queries[s : s + 16].astype(np.float64)
        d = np.sqrt(((q[:, None, :] - x[None, :, :]) ** 2).sum(axis=2))
        best = np.argsort(d, axis=1, kind="stable")[:, :2]
        rows.append(best)
        dist.append(np.take_along_axis(d, best, axis=1))
    return np.concatenate(rows), np.concatenate(dist)


@pytest.mark.parametrize("epsilon", [5.0, 10.0, 40.0])
def test_best_two_equals_brute_force(glove, epsilon):
    rng = np.random.default_rng(1)
    # More queries and words than one block, sizes that are not multiples of it.
    sub = glove.vectors[: 3 * WORD_BLOCK + 5]
    queries = sub[rng.integers(0, len(sub), QUERY_BLOCK + 37)] + sample_noise(QUERY_BLOCK + 37, 50, epsilon, rng)
    index = ExactIndex(sub)
    found = index.query_two(queries)
    np.testing.assert_array_equal(found[:, 0], index.query(queries))
    expected, dist = top_two64(sub, queries)
    same = (np.sort(found, axis=1) == np.sort(expected, axis=1)).all(axis=1)
    assert same.mean() > 0.998
    # Elsewhere (float32 ties) the distances of the two found are those of the true two.
    d_found = np.sort(np.sqrt(((queries[:, None, :] - sub[found].astype(np.float64)) ** 2).sum(axis=2)), axis=1)
    np.testing.assert_allclose(d_found, dist, rtol=1e-5)

    # Among a subset (ascending rows): the best two of the subset.
    among = np.sort(rng.choice(len(sub), 2_500, replace=False))
    expected_among, _ = top_two64(sub[among], queries)
    got = index.query_two(queries, among)
    assert (np.sort(got, axis=1) == np.sort(among[expected_among], axis=1)).all(axis=1).mean() > 0.998

    # The sampler's step 2: float64 distances, ordered; the same pair as the brute force.
    space = Space(sub, np.arange(len(sub)), index=index)
    w1, w2, r1, r2 = Vickrey(epsilon=epsilon).build(space).best_two(queries)
    assert (r1 <= r2).all()
    keep = same
    np.testing.assert_array_equal(w1[keep], expected[keep, 0])
    np.testing.assert_array_equal(w2[keep], expected[keep, 1])
    np.testing.assert_allclose(np.c_[r1, r2], dist, rtol=1e-12)


def test_best_two_of_the_other_exact_indexes(glove):
    sub = glove.vectors[:3_000]
    rng = np.random.default_rng(2)
    queries = sub[rng.integers(0, len(sub), 300)] + sample_noise(300, 50, 10.0, rng)
    expected = ExactIndex(sub).query_two(queries)
    np.testing.assert_array_equal(AdaptiveIndex(sub).query_two(queries), expected)
    np.testing.assert_array_equal(CertifiedIndex(sub, lowp=_Emulated(8)).query_two(queries), expected)
    with pytest.raises(ValueError):
        ExactIndex(sub[:1]).query_two(queries)


@pytest.mark.parametrize("lam", [0.0, 1.0])
def test_t0_is_cmp_draw_for_draw(space20k, glove, lam):
    rows = np.random.default_rng(4).integers(0, 30_000, CHUNK + 1_500)  # two chunks, words in and out of W
    cmp = (Laplace(epsilon=10) if lam == 0 else Mahalanobis(epsilon=10, lam=lam)).build(space20k)
    vickrey = Vickrey(epsilon=10, t=0, lam=lam).build(space20k)
    expected = cmp.sample(rows, np.random.default_rng(5))
    np.testing.assert_array_equal(vickrey.sample(rows, np.random.default_rng(5)), expected)
    # t > 0 on the same noise moves some tokens to the second nearest word, and only those.
    moved = Vickrey(epsilon=10, t=0.5, lam=lam).build(space20k).sample(rows, np.random.default_rng(5))
    assert 0.2 < (moved != expected).mean() < 0.6


class FixedNoise:
    """A generator whose noise is one fixed vector Z (every draw) and whose uniforms are real."""

    def __init__(self, direction: np.ndarray, radius: float, seed: int) -> None:
        self.direction, self.radius = direction, radius
        self.uniforms = np.random.default_rng(seed)

    def standard_normal(self, size):
        return np.broadcast_to(self.direction, size).copy()

    def gamma(self, shape, scale, size):
        return np.full(size, self.radius)

    def random(self, size):
        return self.uniforms.random(size)


def choice_probability(t, r1, r2):
    den = t * r1 + (1 - t) * r2
    return (1 - t) * r2 / den if den > 0 else 1 - t


@pytest.mark.parametrize("t", [0.25, 0.5, 0.75])
def test_choice_rate_given_the_noise(glove, t):
    vocab = np.arange(5_000)
    space = Space(glove.vectors, vocab, index=ExactIndex(glove.vectors[vocab]))
    mech = Vickrey(epsilon=10, t=t).build(space)
    rng = np.random.default_rng(6)
    direction = rng.standard_normal(50)
    radius = 3.0
    word = 123
    v = glove.vectors[word].astype(np.float64) + radius * direction / np.linalg.norm(direction)
    (w1, w2), (r1, r2) = (a[0] for a in top_two64(glove.vectors[vocab], v[None]))
    n = 20_000
    out = mech.sample(np.full(n, word), FixedNoise(direction, radius, seed=7))
    assert set(np.unique(out)) <= {w1, w2}
    rate = (out == w1).mean()
    p = choice_probability(t, r1, r2)
    half = 3.29 * math.sqrt(p * (1 - p) / n)  # 99.9% normal interval of a binomial rate
    assert abs(rate - p) <= half
    assert abs(rate - choice_probability(t + 0.1, r1, r2)) > half  # power: t + 0.1 is told apart


def test_choose_first_edges():
    r1, r2 = np.array([0.0, 1.0, 2.0, 0.0]), np.array([0.0, 3.0, 2.0, 1.0])
    u = np.array([0.0, 0.5, 0.999999, 0.3])
    assert choose_first(r1, r2, 0.0, u).all()  # t = 0: CMP
    # t = 1: p = 0 (the denominator t·r1 is 0 where r1 = 0: p = 1 − t = 0 too)
    assert not choose_first(r1, r2, 1.0, u).any()
    # r1 = r2 = 0: p = 1 − t.
    assert choose_first(np.zeros(2), np.zeros(2), 0.3, np.array([0.69, 0.71])).tolist() == [True, False]
    # t = 0.5, r1 = 1, r2 = 3: p = 3/4.
    assert choose_first(np.ones(2), 3 * np.ones(2), 0.5, np.array([0.74, 0.76])).tolist() == [True, False]


@pytest.mark.parametrize("epsilon", [10.0, 40.0, 200.0])
def test_copies_equal_sample_on_the_same_noise(space20k, glove, epsilon, monkeypatch):
    mech = Vickrey(epsilon=epsilon, t=0.5).build(space20k)
    rows = np.array([0, 5, 17, 400, 9_999, 19_999, 25_000])  # the last one is not in W
    copies = 40
    # Injected noise: the certificate's best two equal the full search's.
    z = sample_noise(len(rows) * copies, 50, epsilon, np.random.default_rng(8)).reshape(len(rows), copies, 50)
    searched = []
    best_two = mech.best_two

    def spy(noisy, among=None):
        searched.append(None if among is None else len(among))
        return best_two(noisy, among)

    monkeypatch.setattr(mech, "best_two", spy)
    got = mech.copies_best_two(rows, z)
    full = best_two((glove.vectors[rows].astype(np.float64)[:, None, :] + z).reshape(-1, 50))
    for a, b in zip(got, full):
        np.testing.assert_array_equal(a, b.reshape(len(rows), copies))
    subsets = [s for s in searched if s is not None]
    if epsilon == 200.0:  # the certificate answers every word of W from a few candidates
        assert len(subsets) == len(rows) - 1 and max(subsets) < 100
    if epsilon == 10.0:  # in 50-d its ball holds most of W: the full search answers
        assert not subsets
    # The same generator: the same draws and outputs as sample on the repeated rows.
    np.testing.assert_array_equal(
        mech.sample_copies(rows, copies, np.random.default_rng(9)),
        mech.sample(np.repeat(rows, copies), np.random.default_rng(9)).reshape(len(rows), copies),
    )


def test_copies_beyond_one_chunk(space20k):
    mech = Vickrey(epsilon=40, t=0.3).build(space20k)
    rows = np.array([3, 400, 21_000])
    copies = CHUNK // 2 + 1  # the noise spans several chunks
    np.testing.assert_array_equal(
        mech.sample_copies(rows, copies, np.random.default_rng(10)),
        mech.sample(np.repeat(rows, copies), np.random.default_rng(10)).reshape(len(rows), copies),
    )


def test_the_input_word_is_never_excluded(glove):
    """All of W, not W ∖ {w}: the input word comes out with positive frequency (ε = 20, t = 0.5)."""
    space = Space(glove.vectors, np.arange(50_000))  # the default exact index
    mech = Vickrey(epsilon=20).build(space)
    rows = np.random.default_rng(11).choice(50_000, 30, replace=False)
    out = mech.sample_copies(rows, 40, np.random.default_rng(12))
    kept = out == rows[:, None]
    assert 0.05 < kept.mean() < 0.95
    assert (kept.sum(axis=1) > 0).mean() > 0.5


def test_spec_parameters_and_guards(space20k):
    assert REGISTRY["vickrey"] is Vickrey
    spec = parse({"name": "vickrey", "epsilon": 10})
    assert (spec.t, spec.lam) == (0.5, 0.0)
    assert spec.axes() == {"t": 0.5, "lambda": 0.0}
    assert spec.prepare(space20k) == []  # λ = 0: A = I, nothing to ship
    assert Vickrey.parameter_names() == ["t", "lambda"]
    spec = parse({"name": "vickrey", "epsilon": 5, "t": 0.25, "lambda": 1})
    assert spec.axes() == {"t": 0.25, "lambda": 1.0}
    assert len(spec.prepare(space20k)) == 1  # A of λ = 1, shipped as an artefact
    assert spec.label() == "vickrey ε=5 t=0.25 lambda=1"
    assert isinstance(spec.build(space20k), VickreySampler)
    assert parse({"name": "vickrey", "epsilon": 5, "t": 0}).t == 0.0
    assert parse({"name": "vickrey", "epsilon": 5, "t": 1}).t == 1.0
    for bad in (-0.1, 1.5, math.nan, math.inf, "x", True):
        with pytest.raises(ConfigError, match="t must be"):
            parse({"name": "vickrey", "epsilon": 5, "t": bad})
    for bad in (-0.1, 1.5, "x"):
        with pytest.raises(ConfigError, match="lambda"):
            parse({"name": "vickrey", "epsilon": 5, "lambda": bad})
    with pytest.raises(ConfigError, match="not a parameter"):
        parse({"name": "vickrey", "epsilon": 5, "k": 3})
    facts = Vickrey(epsilon=10, t=0.5).facts(space20k)
    assert facts["guarantee_type"] == "metric" and "2104.11838" in facts["paper"]
    assert "exp(10 * sum_i" in facts["guarantee"] and "post-processing" in facts["guarantee"]
    assert Vickrey(epsilon=10).build(space20k).distribution(np.array([0])) is None
