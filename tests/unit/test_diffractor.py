"""1-Diffractor: the public lists (greedy nearest-neighbour chains, exact), the clipped two-sided geometric
and TEM on list positions, several lists (dpspark.mechanisms.diffractor)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from dpspark.config import StatsConfig
from dpspark.errors import ConfigError, RenamedParameterWarning
from dpspark.mechanisms import REGISTRY, Space, parse
from dpspark.mechanisms.diffractor import Diffractor, chain, neighbour_lists

# runtime: numpy, pyarrow and Python differ across the Databricks runtimes (CONTRIBUTING.md)
pytestmark = pytest.mark.runtime


def brute_chain(space: Space, start: int | None = None) -> np.ndarray:
    """From the most frequent word (or ``start``), each step to the nearest word left (float64, ties to the lower
    position)."""
    left = np.ones(space.size, dtype=bool)
    order = [int(np.argmin(space.vocab_rows)) if start is None else start]
    left[order[0]] = False
    while left.any():
        rest = np.flatnonzero(left)
        d = np.sqrt(((space.vocab64[rest] - space.vocab64[order[-1]]) ** 2).sum(axis=1))
        order.append(int(rest[np.argmin(d)]))
        left[order[-1]] = False
    return np.array(order)


@pytest.fixture(scope="module")
def space(glove) -> Space:
    return Space(glove.vectors, np.arange(3000), words=glove.word_rows)


@pytest.mark.parametrize("neighbours", [2, 8, 32])
def test_chain_is_the_greedy_nearest_neighbour_chain(space, neighbours):
    """Few neighbours per word force the recomputation among the words left and the scans."""
    np.testing.assert_array_equal(chain(space, neighbours), brute_chain(space))


def test_neighbour_lists_are_the_exact_nearest_other_words(glove):
    """Against a float64 brute force, ties to the lower position; duplicated vectors (distance 0 to another word)
    and a vocabulary smaller than the GEMM's classes included."""
    vectors = np.array(glove.vectors[:700], dtype=np.float32)
    vectors[[10, 20, 30]] = vectors[5]  # four identical vectors: ties at distance 0
    for size, k in ((700, 12), (40, 39), (3, 1)):
        space = Space(vectors[:size], np.arange(size))
        d = np.sqrt(((space.vocab64[:, None, :] - space.vocab64[None, :, :]) ** 2).sum(axis=2))
        np.fill_diagonal(d, np.inf)
        expected = np.argsort(d, axis=1, kind="stable")[:, :k]
        np.testing.assert_array_equal(neighbour_lists(space, k), expected)


def test_chain_from_another_start_is_the_greedy_chain_from_there(space):
    np.testing.assert_array_equal(chain(space, 8, start=1234), brute_chain(space, 1234))


def test_chain_of_a_shuffled_vocabulary_starts_at_its_most_frequent_word(glove):
    rows = np.random.default_rng(0).permutation(np.arange(200, 1200))
    space = Space(glove.vectors, rows)
    order = chain(space, 4)
    assert space.vocab_rows[order[0]] == 200
    np.testing.assert_array_equal(order, brute_chain(space))


def test_distribution_is_the_clipped_two_sided_geometric(space):
    epsilon = 0.7
    mech = parse({"name": "1-diffractor", "epsilon": epsilon}).build(space)
    rank = np.argsort(mech.order)
    rows = np.array([mech.order[0], mech.order[1], mech.order[1500], mech.order[-1]])
    p = mech.distribution(rows)
    np.testing.assert_allclose(p.sum(axis=1), 1.0, atol=1e-12)
    alpha = math.exp(-epsilon)
    k = np.arange(-6000, 6001)
    law = (1 - alpha) / (1 + alpha) * alpha ** np.abs(k)
    for n, i in enumerate(rank[rows]):
        expected = np.bincount(np.clip(i + k, 0, space.size - 1), weights=law, minlength=space.size)
        np.testing.assert_allclose(p[n, mech.order], expected, rtol=1e-9, atol=1e-300)
    # Far positions underflow float64; their logarithm is exact: ln c − ε·|j − i| (+ the end's tail).
    logp = mech.log_distribution(rows[:1])[0, mech.order]
    assert np.isfinite(logp).all() and p[0, mech.order[-2]] == 0.0
    c = math.log((1 - alpha) / (1 + alpha))
    assert logp[2000] == pytest.approx(c - epsilon * 2000, rel=1e-12)


def test_sample_moves_along_the_list_and_clips_at_its_ends(space):
    mech = parse({"name": "1-diffractor", "epsilon": 1.0}).build(space)
    rank = np.argsort(mech.order)
    rng = np.random.default_rng(1)
    first = mech.order[0]
    out = mech.sample(np.full(20000, first), rng)
    moved = rank[out]
    assert moved.min() == 0
    alpha = math.exp(-1.0)
    # P(stay at index 0) = Σ_{k ≤ 0} law(k) = 1/(1 + α); binomial error at 20,000 draws < 0.004.
    assert abs((moved == 0).mean() - 1 / (1 + alpha)) < 0.012
    out = mech.sample(np.full((50, 4), mech.order[1500]), rng)
    assert out.shape == (50, 4)


def test_a_word_outside_the_vocabulary_takes_its_nearest_words_position(glove, space):
    mech = parse({"name": "1-diffractor", "epsilon": 1.0}).build(space)
    outside = np.array([5000, 7000])
    nearest = space.exact.query(glove.vectors[outside])
    np.testing.assert_array_equal(mech.rank_of(outside), mech.rank_of(nearest))


def test_the_list_travels_as_an_artefact(space, glove):
    spec = parse({"name": "1-diffractor", "epsilon": 2.0})
    names = spec.prepare(space)
    shipped = Space(glove.vectors, np.arange(3000), artefacts=space.artefacts(names))
    a = spec.build(space).sample(np.arange(100), np.random.default_rng(3))
    b = spec.build(shipped).sample(np.arange(100), np.random.default_rng(3))
    np.testing.assert_array_equal(a, b)


def test_registered_with_its_guarantee_type():
    assert REGISTRY["1-diffractor"] is Diffractor and Diffractor.guarantee_type == "rank"
    with pytest.raises(ConfigError, match="is not a parameter of 1-diffractor"):
        parse({"name": "1-diffractor", "epsilon": 1.0, "t": 0.5})


def tem_by_position(i: int, size: int, epsilon: float, gamma: float) -> np.ndarray:
    """Carvalho et al.'s TEM on list positions, by brute force: ∝ exp(−ε·min(|i − j|, γ)/2)."""
    w = np.exp(-epsilon * np.minimum(np.abs(np.arange(size) - i), gamma) / 2)
    return w / w.sum()


@pytest.mark.parametrize("gamma", [0.5, 3.0, 5, 1e9])
def test_tem_distribution_and_draws_on_a_small_list(glove, gamma):
    """A 25-word list: windows cut by both ends, γ below one position (every other position alike) and beyond
    the list (no truncation). Draws against the closed form: χ², p > 1e-4 per word (fixed seed)."""
    space = Space(glove.vectors, np.arange(25))
    mech = parse({"name": "1-diffractor", "epsilon": 1.5, "noise": "tem", "position_gamma": gamma}).build(space)
    rank = np.argsort(mech.order)
    rows = mech.order[[0, 2, 12, 24]]
    p = mech.distribution(rows)
    for n, i in enumerate(rank[rows]):
        np.testing.assert_allclose(p[n, mech.order], tem_by_position(i, 25, 1.5, gamma), rtol=1e-12)
    draws = 40_000
    out = mech.sample(np.repeat(rows, draws), np.random.default_rng(7)).reshape(len(rows), draws)
    for n in range(len(rows)):
        counts = np.bincount(out[n], minlength=25)
        assert stats.chisquare(counts, draws * p[n]).pvalue > 1e-4
    # power: the same draws against ε = 1.2, all words' χ² added
    wrong = parse({"name": "1-diffractor", "epsilon": 1.2, "noise": "tem", "position_gamma": gamma}).build(space)
    q = wrong.distribution(rows)
    total = sum(stats.chisquare(np.bincount(out[n], minlength=25), draws * q[n]).statistic for n in range(len(rows)))
    if gamma >= 3:  # below one position every other position weighs the same: ε moves P(w | w) alone, by 0.007
        assert stats.chi2.sf(total, 24 * len(rows)) < 1e-6


def test_tem_on_a_long_list_reaches_every_position_outside_its_window(space):
    mech = parse({"name": "1-diffractor", "epsilon": 2.0, "noise": "tem", "position_gamma": 5}).build(space)
    rank = np.argsort(mech.order)
    word = mech.order[1500]
    out = rank[mech.sample(np.full(200_000, word), np.random.default_rng(2))]
    p = mech.distribution(np.array([word]))[0, mech.order]
    np.testing.assert_allclose(p, tem_by_position(1500, space.size, 2.0, 5), rtol=1e-12)
    window = np.abs(out - 1500) < 5
    # the far positions are equally likely: P(outside) = (V − 9)·e^{−5} / Σ, within 5 binomial SEs
    outside = p[np.abs(np.arange(space.size) - 1500) >= 5].sum()
    assert abs((~window).mean() - outside) < 5 * math.sqrt(outside * (1 - outside) / len(out))
    far = out[~window]
    assert far.min() < 100 and far.max() > space.size - 100
    # uniform over the far positions: χ² over 20 groups of them in list order
    positions = np.flatnonzero(np.abs(np.arange(space.size) - 1500) >= 5)
    group = np.searchsorted(positions, far) * 20 // len(positions)
    sizes = np.bincount(np.arange(len(positions)) * 20 // len(positions), minlength=20)
    assert stats.chisquare(np.bincount(group, minlength=20), len(far) * sizes / sizes.sum()).pvalue > 1e-4


def test_several_lists_start_across_the_frequency_order_and_mix_uniformly(space):
    spec = parse({"name": "1-diffractor", "epsilon": 1.0, "lists": 3})
    starts = spec.starts(space)
    np.testing.assert_array_equal(starts, [0, 1000, 2000])  # W is GloVe's first 3,000 rows: rank = position
    mech = spec.build(space)
    assert mech.orders.shape == (3, space.size)
    np.testing.assert_array_equal(mech.orders[0], parse({"name": "1-diffractor", "epsilon": 1.0}).build(space).order)
    np.testing.assert_array_equal(mech.orders[2], brute_chain(space, 2000))
    rows = np.array([5, 700, 2999])
    expected = np.zeros((len(rows), space.size))
    for order in mech.orders:
        single = Space(space.vectors, space.vocab_rows, artefacts={"1-diffractor/list/v1": order})
        expected += parse({"name": "1-diffractor", "epsilon": 1.0}).build(single).distribution(rows) / 3
    np.testing.assert_allclose(mech.distribution(rows), expected, rtol=1e-9, atol=1e-300)
    ranks = mech.ranks_of(rows)
    np.testing.assert_array_equal(mech.rank_distance(rows[:1], rows[1:2]), np.abs(ranks[:, 0] - ranks[:, 1]).max())
    # each draw is a list's candidate: 3 lists → the draws' law is the mixture (χ² with the same seed as above)
    draws = 60_000
    out = mech.sample(np.full(draws, rows[1]), np.random.default_rng(11))
    p = mech.distribution(rows[1:2])[0]
    keep = p * draws >= 5
    counts = np.bincount(out, minlength=space.size)
    observed = np.append(counts[keep], counts[~keep].sum())
    assert stats.chisquare(observed, draws * np.append(p[keep], p[~keep].sum())).pvalue > 1e-4


def test_the_guarantee_states_the_noise_and_the_largest_distance_over_the_lists(space):
    text = parse({"name": "1-diffractor", "epsilon": 1.0, "lists": 2, "noise": "tem", "position_gamma": 7}).guarantee(
        space
    )
    assert "largest over 2 public lists" in text and "not their sum" in text and "gamma = 7" in text
    text = parse({"name": "1-diffractor", "epsilon": 1.0}).guarantee(space)
    assert "G1, G2 geometric" in text and "lists" not in text
    facts = parse({"name": "1-diffractor", "epsilon": 1.0, "noise": "tem"}).facts(space)
    assert facts["parameters"]["position_gamma"] == 5.0 and facts["parameters"]["lists"] == 1


def test_several_lists_are_stored_one_artefact_each(space):
    spec = parse({"name": "1-diffractor", "epsilon": 1.0, "lists": 2})
    names = spec.prepare(space)
    assert names == ["1-diffractor/list/v1", "1-diffractor/list/v1/start=1500"]
    shipped = Space(space.vectors, space.vocab_rows, artefacts=space.artefacts(names))
    a = spec.build(space).sample(np.arange(100), np.random.default_rng(3))
    b = spec.build(shipped).sample(np.arange(100), np.random.default_rng(3))
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    "values,message",
    [
        ({"position_gamma": 3}, "give it with noise tem"),
        ({"noise": "laplace"}, "noise must be one of geometric, tem"),
        ({"noise": "tem", "position_gamma": 0}, "position_gamma must be a positive finite number"),
        ({"lists": 0}, "lists must be a whole number >= 1"),
        ({"lists": 1.5}, "lists must be a whole number >= 1"),
    ],
)
def test_bad_settings_are_refused_by_name(values, message):
    with pytest.raises(ConfigError, match=message):
        parse({"name": "1-diffractor", "epsilon": 1.0, **values})


def test_the_old_spelling_gamma_works_for_one_release_with_a_warning():
    """1-diffractor's TEM truncation was ``gamma``, the name of TEM's own γ in embedding distance: it is
    ``position_gamma`` now; ``gamma`` still sets it, with a RenamedParameterWarning, and both at once are refused."""
    with pytest.warns(RenamedParameterWarning, match="gamma is now called position_gamma"):
        old = parse({"name": "1-diffractor", "epsilon": 1.0, "noise": "tem", "gamma": 7})
    assert old == parse({"name": "1-diffractor", "epsilon": 1.0, "noise": "tem", "position_gamma": 7})
    assert old.axes()["position_gamma"] == 7.0 and "gamma" not in old.axes()
    with pytest.raises(ConfigError, match="give position_gamma only"):
        parse({"name": "1-diffractor", "epsilon": 1.0, "noise": "tem", "gamma": 7, "position_gamma": 7})
    # a grid: position_gamma is 1-diffractor's axis alone; the old gamma axis still reaches it, warned
    config = StatsConfig.parse(
        {"mechanisms": "tem,1-diffractor", "epsilons": [2], "grid": "position_gamma=3 noise=tem"}
    )
    assert [(s.name, s.axes().get("gamma"), s.axes().get("position_gamma")) for s in config.settings()] == [
        ("tem", None, None),
        ("1-diffractor", None, 3.0),
    ]
    with pytest.warns(RenamedParameterWarning):
        config = StatsConfig.parse({"mechanisms": "1-diffractor", "epsilons": [2], "grid": "gamma=3 noise=tem"})
        assert config.settings()[0].axes()["position_gamma"] == 3.0


def test_more_lists_than_words_is_refused(glove):
    space = Space(glove.vectors, np.arange(4))
    with pytest.raises(ConfigError, match="lists = 5 is more than the V = 4 words"):
        parse({"name": "1-diffractor", "epsilon": 1.0, "lists": 5}).prepare(space)
