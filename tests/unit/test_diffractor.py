"""1-Diffractor: the public list (a greedy nearest-neighbour chain, exact) and the clipped two-sided
geometric on list positions (dpspark.mechanisms.diffractor)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpspark.errors import ConfigError
from dpspark.mechanisms import REGISTRY, Space, parse
from dpspark.mechanisms.diffractor import Diffractor, chain


def brute_chain(space: Space) -> np.ndarray:
    """From the most frequent word, each step to the nearest word left (float64, ties to the lower position)."""
    left = np.ones(space.size, dtype=bool)
    order = [int(np.argmin(space.vocab_rows))]
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
