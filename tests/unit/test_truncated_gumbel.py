"""The Truncated Gumbel mechanism (dpspark.mechanisms.truncated_gumbel): its constants Δ, Δ0, the
threshold on ε, K_max, the truncated Gumbel noise, the exact k nearest words, the quadrature law
and the sampler against it. W is the first VOCAB words of GloVe 6B 50-d; fixed seeds throughout."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, special, stats

from dpspark.errors import ConfigError
from dpspark.mechanisms import REGISTRY, Space, parse
from dpspark.mechanisms import truncated_gumbel as tg

# runtime: numpy, pyarrow and Python differ across the Databricks runtimes (CONTRIBUTING.md)
pytestmark = pytest.mark.runtime

VOCAB = 2000
SEED = 20240917


@pytest.fixture(scope="module")
def space(glove) -> Space:
    return Space(glove.vectors, np.arange(VOCAB))


@pytest.fixture(scope="module")
def constants(space) -> np.ndarray:
    return tg.diameters(space.vocab64)


def brute_force(x: np.ndarray) -> tuple[float, float, int]:
    """(max, min, count) of sqrt(Σ(a − b)²) over pairs of distinct rows (np.unique after −0.0 → 0.0)."""
    u = np.unique(x + 0.0, axis=0)
    far, near = 0.0, math.inf
    for i in range(len(u) - 1):
        diff = u[i + 1 :] - u[i]
        d = np.sqrt(np.einsum("ij,ij->i", diff, diff))
        far, near = max(far, d.max()), min(near, d.min())
    return far, near, len(u)


def pair_distance(x: np.ndarray, a: float, b: float) -> float:
    return float(np.linalg.norm(x[int(a)] - x[int(b)]))


# --------------------------------------------------------------------------------------------
# Δ and Δ0


@pytest.mark.parametrize("tile,shell", [(tg.TILE, tg.SHELL), (64, 4), (100, 1)])
def test_diameters_equal_brute_force_with_duplicates(glove, tile, shell):
    x = np.array(glove.vectors[:3000], dtype=np.float64)
    x[2500] = x[7]
    x[2501] = x[7]
    x[9, 0] = 0.0
    x[2502] = x[9]
    x[2502, 0] = -0.0  # the same point, other bytes
    far, near, count = brute_force(x)
    got = tg.diameters(x, tile=tile, shell=shell)
    assert int(got[2]) == count == 2997
    np.testing.assert_allclose(got[:2], [far, near], rtol=1e-14, atol=0)
    assert near > 0.0  # without deduplication Δ0 would be 0
    np.testing.assert_allclose(pair_distance(x, got[3], got[4]), far, rtol=1e-14)
    np.testing.assert_allclose(pair_distance(x, got[5], got[6]), near, rtol=1e-14)


def test_diameters_of_random_clusters_with_pruning():
    """Tight clusters far apart: most tile pairs are ruled out, the extremes still exact."""
    rng = np.random.default_rng(SEED)
    centers = rng.standard_normal((20, 8)) * 10
    x = (centers[:, None, :] + rng.standard_normal((20, 150, 8)) * 0.05).reshape(-1, 8)
    far, near, count = brute_force(x)
    got = tg.diameters(x, tile=32, shell=4)
    np.testing.assert_allclose(got[:3], [far, near, count], rtol=1e-14, atol=0)


def test_diameters_need_two_distinct_vectors():
    with pytest.raises(ConfigError, match="at least two distinct vectors"):
        tg.diameters(np.ones((5, 3)))


# --------------------------------------------------------------------------------------------
# The threshold on ε and b


def test_threshold_is_where_b_turns_positive(space, constants):
    delta, delta0 = constants[:2]
    size = space.size
    limit = (5 + 2 * math.log(size)) / delta0
    assert tg.threshold(size, delta0) == pytest.approx(limit, rel=1e-15)
    # At the threshold α·Δ0 = 1: ln(αΔ0) = 0 and b = 2Δ/0.
    alpha = (limit - 2 * (1 + math.log(size)) / delta0) / 3
    assert alpha * delta0 == pytest.approx(1.0, rel=1e-12)
    for epsilon in (limit * (1 + 1e-6), limit + 1, 2 * limit, 100 * limit):
        b = tg.gumbel_scale(epsilon, size, delta, delta0)
        a = (epsilon - 2 * (1 + math.log(size)) / delta0) / 3
        expected = 2 * delta / min(special.lambertw(2 * a * delta, 0).real, math.log(a * delta0))
        assert b > 0 and math.isfinite(b) and b == pytest.approx(expected, rel=1e-12)
    # b falls with ε (only logarithmically).
    bs = [tg.gumbel_scale(e, size, delta, delta0) for e in limit * np.array([1.01, 1.5, 3, 10, 100])]
    assert all(np.diff(bs) < 0)


def test_prepare_and_build_refuse_epsilon_below_the_threshold(space, constants):
    limit = tg.threshold(space.size, constants[1])
    for epsilon in (1.0, 10.0, limit * (1 - 1e-6), limit):
        spec = parse({"name": "truncated-gumbel", "epsilon": epsilon})
        for step in (spec.prepare, spec.build):
            with pytest.raises(ConfigError, match=f"epsilon > .* = {limit:.6g} on this vocabulary") as caught:
                step(space)
            assert "larger epsilon" in str(caught.value) and f"V = {space.size}" in str(caught.value)
    spec = parse({"name": "truncated-gumbel", "epsilon": limit * (1 + 1e-6)})
    assert spec.prepare(space) == [tg.ARTEFACT]
    mechanism = spec.build(space)
    assert mechanism.b == tg.gumbel_scale(spec.epsilon, space.size, *constants[:2])
    assert mechanism.distribution(np.arange(3)) is None


def test_constants_are_kept_per_vocabulary(glove, tmp_path):
    """The artefact is written once per φ(W) and read back by another Space over the same W."""
    first = Space(glove.vectors, np.arange(500), cache_dir=tmp_path)
    spec = parse({"name": "truncated-gumbel", "epsilon": 1000})
    assert spec.prepare(first) == [tg.ARTEFACT]
    assert len(list(tmp_path.glob("dpspark-artefact-*.npy"))) == 1

    def never() -> np.ndarray:
        raise AssertionError("computed again")

    again = Space(glove.vectors, np.arange(500), cache_dir=tmp_path)
    np.testing.assert_array_equal(again.artefact(tg.ARTEFACT, never, store=True), first.artefact(tg.ARTEFACT, never))
    other = Space(glove.vectors, np.arange(501), cache_dir=tmp_path)
    spec.prepare(other)
    assert len(list(tmp_path.glob("dpspark-artefact-*.npy"))) == 2


# --------------------------------------------------------------------------------------------
# k and K_max


def truncated_tail(k: int, size: int) -> float:
    """P(k' > k) for k' ~ Poisson(ln V) given 1 ≤ k' ≤ V, from scipy's survival function."""
    lam = math.log(size)
    return (stats.poisson.sf(k, lam) - stats.poisson.sf(size, lam)) / (stats.poisson.cdf(size, lam) - math.exp(-lam))


@pytest.mark.parametrize("size,expected", [(50_000, 46), (400_000, 50), (2000, 38), (3, 3)])
def test_k_max_rule(size, expected):
    got = tg.k_max(size)
    assert got == expected
    assert truncated_tail(got, size) < 1e-15
    if got < size:
        assert truncated_tail(got - 1, size) >= 1e-15


def test_k_law_is_the_truncated_poisson(space):
    p = tg.k_law(space.size, space.size)
    assert p.sum() == pytest.approx(1.0, abs=1e-14)
    lam = math.log(space.size)
    np.testing.assert_allclose(p[:30], stats.poisson.pmf(np.arange(1, 31), lam) / (1 - math.exp(-lam)), rtol=1e-12)


def test_draw_k_follows_the_law_on_both_paths(space, constants):
    """K_max = 8 (``most``): a third of the draws take the conditional tail law; both against P(k)."""
    b = tg.gumbel_scale(1000, space.size, *constants[:2])
    mechanism = tg.TruncatedGumbelSampler(
        space, parse({"name": "truncated-gumbel", "epsilon": 1000}), b, constants[0], 8
    )
    k = mechanism.draw_k(200_000, np.random.default_rng(SEED))
    assert k.min() >= 1 and k.max() <= space.size and (k > 8).mean() > 0.2
    p = tg.k_law(space.size, 40)
    observed = np.bincount(np.minimum(k, 25), minlength=26)[1:]
    expected = np.append(p[:24], p[24:].sum() + (1 - p.sum())) * len(k)
    result = stats.chisquare(observed, expected)
    assert result.pvalue > 1e-4, result
    wrong = tg.k_law(space.size + 500, 40)  # Poisson(ln 2500): power
    expected = np.append(wrong[:24], 1 - wrong[:24].sum()) * len(k)
    assert stats.chisquare(observed, expected * len(k) / expected.sum()).pvalue < 1e-6


# --------------------------------------------------------------------------------------------
# The truncated Gumbel noise


@pytest.mark.parametrize("b,delta", [(105.9, 21.1), (23.2, 21.1), (2.0, 21.1), (0.3, 0.5)])
def test_truncated_gumbel_draws(b, delta):
    g = tg.sample_gumbel(200_000, b, delta, np.random.default_rng(SEED))
    assert g.min() >= -delta and g.max() <= delta
    result = stats.kstest(g, lambda x: tg.gumbel_cdf(x, b, delta))
    assert result.pvalue > 1e-4, result
    # Power: a scale 30% off is rejected (near-uniform noise, b ≫ Δ, needs the larger change).
    wrong = 0.7 * b if b < 4 * delta else 0.3 * b
    assert stats.kstest(g, lambda x: tg.gumbel_cdf(x, wrong, delta)).pvalue < 1e-6


def test_truncated_gumbel_cdf_is_the_formula():
    b, delta = 23.2, 21.1
    x = np.linspace(-30, 30, 601)

    def F(v):
        return np.exp(-np.exp(-v / b))

    naive = np.clip((F(x) - F(-delta)) / (F(delta) - F(-delta)), 0, 1)
    np.testing.assert_allclose(tg.gumbel_cdf(x, b, delta), naive, atol=1e-14)


# --------------------------------------------------------------------------------------------
# The k nearest words


def test_nearest_is_exact(glove):
    vectors = np.array(glove.vectors[:3000])
    vectors[2999] = vectors[5]  # an identical pair: each word is still its own first neighbour
    space = Space(vectors, np.arange(VOCAB))
    rows = np.array([0, 5, 17, 300, 1999, 2500, 2999])  # the last two are outside W
    pos, dist = tg.nearest(space, rows, 46)
    for i, row in enumerate(rows):
        exact = np.sqrt(((space.vocab64 - vectors[row].astype(np.float64)) ** 2).sum(axis=1))
        order = np.lexsort((np.arange(VOCAB), np.arange(VOCAB) != row, exact))[:46]
        np.testing.assert_array_equal(pos[i], order)
        np.testing.assert_allclose(dist[i], exact[order], rtol=1e-14, atol=1e-15)
    assert pos[1, 0] == 5 and dist[1, 0] == 0.0
    assert pos[-1, 0] == 5 and dist[-1, 0] == 0.0  # outside W: its nearest word of W is its twin, at 0
    whole, _ = tg.nearest(space, rows[:2], VOCAB)  # k = V: every word, in order
    assert sorted(whole[0]) == list(range(VOCAB))


# --------------------------------------------------------------------------------------------
# The law by quadrature, and the sampler against it


@pytest.fixture(scope="module")
def sampler(space, constants):
    return parse({"name": "truncated-gumbel", "epsilon": 2 * tg.threshold(space.size, constants[1])}).build(space)


def test_law_sums_to_one_and_converges(sampler, glove):
    row = glove.index_of("monday")
    pos, p = sampler.law(row)
    assert pos[0] == row and (p > 0).all()
    cap = len(p)
    assert p.sum() == pytest.approx(1.0 - truncated_tail(cap, sampler.space.size), abs=1e-13)
    _, dist = tg.nearest(sampler.space, np.array([row]), cap)
    finer = tg.output_law(dist[0], sampler.b, sampler.delta, tg.k_law(sampler.space.size, cap), nodes=24)
    np.testing.assert_allclose(p, finer, rtol=0, atol=1e-14)


def test_law_matches_adaptive_quadrature(sampler, glove):
    """P(u_j | w) for one j by scipy.integrate.quad of f_t(x)·Σ_k P(k)·Π_{i≠j}(1 − F_t(d_j + x − d_i))."""
    row = glove.index_of("paris")
    _, dist = tg.nearest(sampler.space, np.array([row]), 20)
    d, b, delta = dist[0], sampler.b, sampler.delta
    pk = tg.k_law(sampler.space.size, 20)
    law = tg.output_law(d, b, delta, pk)
    f = tg.gumbel_cdf

    def density(x):  # F'(x) / (F(Δ) − F(−Δ)), F(x) = exp(−e^{−x/b})
        mass = np.exp(-np.exp(-delta / b)) - np.exp(-np.exp(delta / b))
        return np.exp(-x / b) * np.exp(-np.exp(-x / b)) / (b * mass)

    for j in (0, 3, 9):

        def integrand(x, j=j):
            survive = 1.0 - f(d[j] + x - d, b, delta)
            survive[j] = 1.0
            return density(x) * (pk[j:] @ np.cumprod(survive)[j:])

        kinks = sorted({v for v in np.concatenate([d - d[j] - delta, d - d[j] + delta]) if -delta < v < delta})
        value, error = integrate.quad(integrand, -delta, delta, points=kinks, limit=500, epsabs=1e-14, epsrel=1e-12)
        assert error < 1e-13 and law[j] == pytest.approx(value, abs=1e-13)


def pooled_chi2(counts: np.ndarray, p: np.ndarray) -> float:
    """χ² p-value of counts against p (bins of expected count < 5 pooled into one)."""
    n = counts.sum()
    alone = n * p >= 5
    obs = np.append(counts[alone], counts[~alone].sum() + n - counts.sum())
    exp = np.append(n * p[alone], n - n * p[alone].sum())
    return float(stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue)


def draws_against_law(mechanism, row: int, draws: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    pos, p = mechanism.law(row)
    out = mechanism.sample(np.full(draws, row), np.random.default_rng(seed))
    assert np.isin(out, pos).all()
    counts = np.array([(out == u).sum() for u in pos])
    return counts, p


@pytest.mark.parametrize("word", ["monday", "paris"])
def test_sampler_against_the_law(sampler, glove, word):
    counts, p = draws_against_law(sampler, glove.index_of(word), 200_000, SEED)
    assert pooled_chi2(counts, p) > 1e-4
    # Power: the law with b halved is rejected (b matters little while it is comparable to Δ).
    wrong = tg.TruncatedGumbelSampler(sampler.space, sampler.spec, sampler.b / 2, sampler.delta)
    assert pooled_chi2(counts, wrong.law(glove.index_of(word))[1]) < 1e-6


def test_sampler_exact_path_for_large_k(sampler, glove):
    """With 12 neighbours kept, ≈ 6% of tokens take the exact top-k query: the law is unchanged."""
    few = tg.TruncatedGumbelSampler(sampler.space, sampler.spec, sampler.b, sampler.delta, 12)
    counts, p = draws_against_law(few, glove.index_of("monday"), 40_000, SEED + 1)
    assert pooled_chi2(counts, p) > 1e-4


def test_sample_shapes_and_words_outside_w(sampler, glove):
    rng = np.random.default_rng(SEED)
    assert sampler.sample(np.array([], dtype=np.int64), rng).shape == (0,)
    rows = np.array([[1, 2, 3], [2500, 3000, 1]])  # 2500, 3000: embedded words outside W
    out = sampler.sample(rows, rng)
    assert out.shape == rows.shape and out.dtype == np.int64 and out.min() >= 0 and out.max() < VOCAB
    copies = sampler.sample_copies(np.array([2500]), 500, rng)
    near, _ = tg.nearest(sampler.space, np.array([2500]), sampler.k_max)
    assert np.isin(copies, near).all()


# --------------------------------------------------------------------------------------------
# The spec


def test_parameter_guards_through_parse():
    assert REGISTRY["truncated-gumbel"] is tg.TruncatedGumbel
    assert tg.TruncatedGumbel.parameter_names() == []
    for bad in (-1, 0, "many", float("nan"), float("inf")):
        with pytest.raises(ConfigError, match="epsilon"):
            parse({"name": "truncated-gumbel", "epsilon": bad})
    with pytest.raises(ConfigError, match="is not a parameter of truncated-gumbel"):
        parse({"name": "truncated-gumbel", "epsilon": 100, "k": 5})
    spec = parse({"name": "truncated-gumbel", "epsilon": "100"})
    assert spec.epsilon == 100.0 and spec.axes() == {} and spec.label() == "truncated-gumbel ε=100"


def test_the_manifest_says_the_guarantee_is_unverified(space, constants):
    limit = tg.threshold(space.size, constants[1])
    spec = parse({"name": "truncated-gumbel", "epsilon": 2 * limit})
    facts = spec.facts(space)
    assert facts["guarantee_type"] == "none"  # the claimed metric DP is contradicted by the exact law
    for text in (facts["guarantee"], " ".join(facts["outside_guarantee"]), facts["paper"]):
        assert "unverified" in text and "doi:10.32473/flairs.v34i1.128463" in text
    assert f"{limit:.6g}" in facts["guarantee"] and "could not be read" in facts["guarantee"]
    assert "contradicts" in facts["guarantee"] and "contradicts" in facts["outside_guarantee"][0]
