"""TEM and SanText (dpspark.mechanisms.tem, .santext, .exponential): the closed forms, the
exact samplers against them (χ² with power), the ⊥ branch, the parameter guards.

GloVe 6B 50-d with the first 5,000 words as W; row 7,000 is a word outside W.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from dpspark._pydantic import ValidationError
from dpspark.errors import ConfigError
from dpspark.mechanisms import REGISTRY, Space, base, exponential, parse
from dpspark.mechanisms.santext import SanText
from dpspark.mechanisms.tem import TEM, gamma_from_beta

# runtime: numpy, pyarrow and Python differ across the Databricks runtimes (CONTRIBUTING.md)
pytestmark = pytest.mark.runtime

V = 5000
WORDS = np.array([0, 17, 450, 7000])  # three words of W (frequent to rarer) and one outside it
DRAWS = 50_000


@pytest.fixture(scope="module")
def space(glove):
    return Space(glove.vectors, np.arange(V))


def direct_distances(space, row):
    """d(w, y) for every y in W by differences in float64 (not the GEMM of distance_rows)."""
    diff = space.vocab64 - np.asarray(space.vectors[row], dtype=np.float64)
    return np.sqrt((diff * diff).sum(axis=1))


def pooled_chisquare(counts, probabilities):
    """p-value of Pearson's χ², bins of expected count < 5 pooled into one."""
    expected = probabilities * counts.sum()
    small = expected < 5
    obs = np.append(counts[~small], counts[small].sum())
    exp = np.append(expected[~small], expected[small].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    return stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue


def counts_of(mech, words, draws, seed):
    out = mech.sample(np.repeat(words, draws), np.random.default_rng(seed)).reshape(len(words), draws)
    return np.stack([np.bincount(row, minlength=V) for row in out])


# ---- closed forms ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "values",
    [
        {"name": "tem", "epsilon": 5},
        {"name": "tem", "epsilon": 10},
        {"name": "santext", "epsilon": 1},
        {"name": "santext", "epsilon": 3},
    ],
)
def test_distribution_rows_sum_to_one(space, values):
    p = parse(values).build(space).distribution(WORDS)
    assert p.shape == (len(WORDS), V) and p.dtype == np.float64
    assert (p >= 0).all()
    np.testing.assert_allclose(p.sum(axis=1), 1.0, rtol=1e-12)


@pytest.mark.parametrize("epsilon", [2.0, 5.0, 10.0])
def test_tem_distribution_is_the_papers_construction(space, epsilon):
    """L_w scored −d, ⊥ scored −γ + (2/ε)·ln|W ∖ L_w|, ⊥'s mass spread uniformly over W ∖ L_w."""
    spec = TEM(epsilon=epsilon)
    gamma = (2 / epsilon) * math.log((1 - spec.beta) * (V - 1) / spec.beta)
    assert spec.gamma_for(space) == pytest.approx(gamma, rel=1e-15)
    p = spec.build(space).distribution(WORDS)
    for row, got in zip(WORDS, p):
        d = direct_distances(space, row)
        ball = d <= gamma
        inner = np.exp(epsilon / 2 * -d[ball])
        outer = (~ball).sum()
        bottom = np.exp(epsilon / 2 * (-gamma + 2 / epsilon * math.log(outer))) if outer else 0.0
        z = inner.sum() + bottom
        expected = np.empty(V)
        expected[ball] = inner / z
        expected[~ball] = bottom / z / max(outer, 1)
        np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-300)


def test_tem_with_huge_gamma_is_santext(space):
    tem = TEM(epsilon=3, gamma=1e6).build(space)
    santext = SanText(epsilon=3).build(space)
    np.testing.assert_allclose(tem.distribution(WORDS), santext.distribution(WORDS), rtol=1e-12)
    rows = np.repeat(WORDS, 50)
    np.testing.assert_array_equal(
        tem.sample(rows, np.random.default_rng(5)), santext.sample(rows, np.random.default_rng(5))
    )


def test_santext_distribution_is_exp_minus_half_epsilon_d(space):
    p = SanText(epsilon=2).build(space).distribution(WORDS)
    for row, got in zip(WORDS, p):
        w = np.exp(-direct_distances(space, row))
        np.testing.assert_allclose(got, w / w.sum(), rtol=1e-9)


def test_bottom_probability_is_at_most_beta(space):
    """Pr[output ∉ L_w] ≤ β for every word of W, = β for a word alone in its ball (its own
    weight 1 and (V − 1)·e^{−εγ/2} = β/(1 − β) by the choice of γ)."""
    spec = TEM(epsilon=10)
    gamma = spec.gamma_for(space)
    rows = np.arange(0, V, 7)
    p = spec.build(space).distribution(rows)
    dist = space.distance_rows(rows)
    bottom = np.where(dist > gamma, p, 0.0).sum(axis=1)
    assert bottom.max() <= spec.beta * (1 + 1e-9)
    alone = (dist <= gamma).sum(axis=1) == 1
    assert alone.any()
    np.testing.assert_allclose(bottom[alone], spec.beta, rtol=1e-9)
    assert exponential.bottom_probability(V, 10, gamma) == pytest.approx(spec.beta, rel=1e-12)


# ---- samplers -------------------------------------------------------------------------------

# (spec, seed): TEM ε = 10 draws from balls (L_w small; 7,000's is empty), TEM ε = 5 from full
# rows (balls hold most of W), SanText ε = 3 from full rows.
CASES = [(TEM(epsilon=10), 11), (TEM(epsilon=5), 12), (SanText(epsilon=3), 13)]


@pytest.mark.parametrize("spec, seed", CASES, ids=lambda c: getattr(c, "name", "") + f" {getattr(c, 'epsilon', '')}")
def test_sampler_matches_distribution_with_power(space, spec, seed):
    counts = counts_of(spec.build(space), WORDS, DRAWS, seed)
    p = spec.build(space).distribution(WORDS)
    wrong = spec.copy(update={"epsilon": spec.epsilon * 0.8}).build(space).distribution(WORDS)
    for c, q, r in zip(counts, p, wrong):
        assert c.sum() == DRAWS and (c[q == 0] == 0).all()
        assert pooled_chisquare(c, q) > 1e-3
        assert pooled_chisquare(c, r) < 1e-6


def test_sampler_switches_between_balls_and_rows(space, monkeypatch):
    """One word per block: 0 and 17 have large balls at γ = 4.5 (rows from then on), 450 is
    drawn from a row but has a small ball (balls again), 7,000 from its ball."""
    monkeypatch.setattr(Space, "block", 1)
    spec = TEM(epsilon=6, gamma=4.5)
    calls = {"within": 0, "rows": 0}
    within, rows = space.exact.within, space.distance_rows
    monkeypatch.setattr(
        space.exact, "within", lambda *a: calls.__setitem__("within", calls["within"] + 1) or within(*a)
    )
    monkeypatch.setattr(
        space, "distance_rows", lambda r, **kw: calls.__setitem__("rows", calls["rows"] + 1) or rows(r, **kw)
    )
    counts = counts_of(spec.build(space), WORDS, DRAWS, 14)
    assert calls == {"within": 2, "rows": 3}
    monkeypatch.undo()
    p = spec.build(space).distribution(WORDS)
    wrong = spec.copy(update={"epsilon": 4.8}).build(space).distribution(WORDS)
    for c, q, r in zip(counts, p, wrong):
        assert pooled_chisquare(c, q) > 1e-3
        assert pooled_chisquare(c, r) < 1e-6


def test_two_level_inverse_cdf(space, monkeypatch):
    """Words with few tokens draw through chunk sums then one chunk's cumulative sum: χ² against
    the closed form, and the same outputs as one cumulative row for the same uniforms."""
    mech = SanText(epsilon=3).build(space)
    monkeypatch.setattr(exponential, "CHUNK_WORDS", 16)  # 313 chunks: up to 313 tokens a word go by chunks
    rng = np.random.default_rng(21)
    out = np.concatenate([mech.sample(np.repeat(WORDS, 250), rng).reshape(len(WORDS), -1) for _ in range(80)], axis=1)
    p = mech.distribution(WORDS)
    for row, q in zip(out, p):
        assert pooled_chisquare(np.bincount(row, minlength=V), q) > 1e-3
    rows = np.repeat(WORDS, 200)
    chunked = mech.sample(rows, np.random.default_rng(22))
    monkeypatch.setattr(exponential, "CHUNK_WORDS", V)  # one chunk: more than one token goes by one row
    whole = mech.sample(rows, np.random.default_rng(22))
    assert np.mean(chunked == whole) > 0.999


def test_complement_draw_is_uniform(space):
    """A small γ sends most tokens to ⊥: the outputs outside L_w are uniform over W ∖ L_w."""
    spec = TEM(epsilon=1, gamma=1.0)
    mech = spec.build(space)
    row = 450
    ball = direct_distances(space, row) <= 1.0
    assert 1 <= ball.sum() < V // 8  # drawn by the ball branch
    out = mech.sample(np.full(200_000, row), np.random.default_rng(31))
    far = out[~ball[out]]
    assert len(far) > 0.9 * len(out)
    counts = np.bincount(far, minlength=V)[~ball]
    assert stats.chisquare(counts).pvalue > 1e-3
    assert counts.min() > 0  # every word of W ∖ L_w is reached (≈ 40 expected each)
    bottom = mech.distribution(np.array([row]))[0][~ball].sum()
    assert stats.binomtest(len(far), len(out), bottom).pvalue > 1e-3


def test_nth_outside():
    inside = np.array([0, 3, 4, 9])
    outside = np.setdiff1d(np.arange(20), inside)
    j = np.arange(len(outside))
    np.testing.assert_array_equal(exponential.nth_outside(inside, j), outside)
    np.testing.assert_array_equal(exponential.nth_outside(np.array([], dtype=np.int64), j), j)


def test_draws_are_a_function_of_the_generator(space):
    rows = np.array([0, 5, 5, 7000, 0, 120, 4999] * 30)
    for spec in (TEM(epsilon=10), TEM(epsilon=5), TEM(epsilon=1, gamma=1.0), SanText(epsilon=3)):
        mech = spec.build(space)
        a = mech.sample(rows, np.random.default_rng(41))
        b = mech.sample(rows, np.random.default_rng(41))
        np.testing.assert_array_equal(a, b)
        assert a.dtype == np.int64 and a.shape == rows.shape and a.min() >= 0 and a.max() < V
    assert mech.sample(np.array([], dtype=np.int64), np.random.default_rng(0)).shape == (0,)


def test_sample_copies_builds_one_row_per_distinct_word(space, monkeypatch):
    mech = SanText(epsilon=3).build(space)
    built = []
    original = space.distance_rows
    monkeypatch.setattr(space, "distance_rows", lambda rows, **kw: built.append(len(rows)) or original(rows, **kw))
    out = mech.sample_copies(np.array([3, 3, 8]), 500, np.random.default_rng(51))
    assert out.shape == (3, 500) and sum(built) == 2


# ---- specs ----------------------------------------------------------------------------------


def test_registry_and_facts(space):
    assert REGISTRY["tem"] is TEM and REGISTRY["santext"] is SanText
    tem = parse({"name": "tem", "epsilon": "10"})
    assert tem.beta == 0.001 and tem.gamma is None and tem.axes() == {"beta": 0.001}
    assert tem.label() == "tem ε=10 beta=0.001"
    assert TEM(epsilon=10, gamma=2.5).axes() == {"gamma": 2.5}
    assert TEM.parameter_names() == ["beta", "gamma"] and SanText.parameter_names() == []
    facts = tem.facts(space)
    assert facts["guarantee_type"] == "metric" and facts["outside_guarantee"] == []
    assert f"gamma = {tem.gamma_for(space):.6g}" in facts["guarantee"] and "beta = 0.001" in facts["guarantee"]
    assert "exp(10 *" in facts["guarantee"]
    assert "SDM 2023" in TEM.paper and "Findings of ACL 2021" in SanText.paper
    assert "V = 5000" in SanText(epsilon=1).guarantee(space)
    assert TEM.summary and SanText.summary


@pytest.mark.parametrize(
    "values",
    [
        {"beta": 0},
        {"beta": 1},
        {"beta": -0.1},
        {"beta": "nan"},
        {"beta": True},
        {"gamma": 0},
        {"gamma": -1.0},
        {"gamma": "inf"},
        {"gamma": "x"},
        {"beta": 0.01, "gamma": 2.0},
        {"beta": 0.001, "gamma": 2.0},
    ],
)
def test_tem_parameter_guards(values):
    with pytest.raises(ConfigError, match="beta|gamma"):
        parse({"name": "tem", "epsilon": 5, **values})
    with pytest.raises(ValidationError):
        TEM(epsilon=5, **values)


def test_tem_unset_parameters_take_their_defaults():
    spec = parse({"name": "tem", "epsilon": 5, "beta": None, "gamma": ""})
    assert spec.beta == 0.001 and spec.gamma is None
    assert parse({"name": "tem", "epsilon": 5, "beta": None, "gamma": 3}).gamma == 3.0
    with pytest.raises(ConfigError, match="not a parameter of santext"):
        parse({"name": "santext", "epsilon": 5, "beta": 0.1})


def test_gamma_from_beta_edges():
    assert gamma_from_beta(5, 0.001, 1) == math.inf
    assert gamma_from_beta(5, 0.9, 3) == 0.0  # ln((0.1·2)/0.9) < 0: L_w = {w}
    assert gamma_from_beta(10, 0.001, 50_000) == pytest.approx(0.2 * math.log(0.999 * 49_999 / 0.001))


def test_distance_rows_tile_by_tile(space, monkeypatch):
    """Tiles of 256 columns agree with one tile to 1e-13, distance_rows' stated accuracy (BLAS may
    sum a narrower remainder tile in another order: 1.5e-14 apart seen with the runtimes' OpenBLAS),
    both within 1e-12 of direct differences, a word's distance to itself 0;
    ``each`` sees every tile once, at multiples of TILE_ALIGN, and the result holds what it leaves."""
    rows = np.array([3, 0, 4999, 7000, 250, 17])
    monkeypatch.setattr(base, "DISTANCE_TILE_BYTES", 8 * len(rows) * 256)
    seen = []
    tiled = space.distance_rows(rows, each=lambda tile, start: seen.append((start, tile.shape)))
    assert [s for s, _ in seen] == list(range(0, V, 256)) and all(shape[0] == len(rows) for _, shape in seen)
    assert sum(shape[1] for _, shape in seen) == V
    monkeypatch.setattr(base, "DISTANCE_TILE_BYTES", 2**40)
    whole = space.distance_rows(rows)
    np.testing.assert_allclose(tiled, whole, rtol=0, atol=1e-13)
    for i, row in enumerate(rows):
        np.testing.assert_allclose(whole[i], direct_distances(space, row), rtol=0, atol=1e-12)
    assert (whole[[0, 1, 2, 4, 5], [3, 0, 4999, 250, 17]] == 0).all() and (whole[3] > 0).all()
    monkeypatch.setattr(base, "DISTANCE_TILE_BYTES", 8 * len(rows) * 256)

    def halve(tile, start):
        tile *= 0.5

    np.testing.assert_array_equal(space.distance_rows(rows, each=halve), tiled * 0.5)


@pytest.mark.parametrize("spec", [TEM(epsilon=6, gamma=4.5), SanText(epsilon=3)], ids=["tem", "santext"])
def test_weights_made_tile_by_tile_equal_the_plain_ones(space, monkeypatch, spec):
    """Rows of W take the fused path (weights and chunk sums per tile): the same bits as
    _weights(_scores(...)) and chunk_sums on the whole rows, and each row's ball size; a block
    with a word outside W takes the plain path."""
    monkeypatch.setattr(base, "DISTANCE_TILE_BYTES", 8 * 4 * 512)  # tiles of 512 columns
    mech = spec.build(space)
    rows = np.array([0, 17, 450, 4999])
    weights, sums, inside = mech._weight_rows(rows)
    dist = space.distance_rows(rows)
    plain = mech._weights(dist.copy())
    expected = np.empty_like(sums)
    exponential.chunk_sums(plain, 0, expected)
    np.testing.assert_array_equal(weights, plain)
    np.testing.assert_array_equal(sums, expected)
    if math.isfinite(mech.gamma):
        np.testing.assert_array_equal(inside, np.count_nonzero(dist <= mech.gamma, axis=1))
    called = []
    monkeypatch.setattr(space, "distance_rows", lambda r, **kw: called.append(kw) or base.Space.distance_rows(space, r))
    mixed, _, _ = mech._weight_rows(np.array([0, 7000]))
    assert called == [{}]  # the word outside W: its smallest score is not 0, the plain path
    np.testing.assert_array_equal(mixed[0], plain[0])
