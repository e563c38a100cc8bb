from __future__ import annotations

import numpy as np
import pytest

from dpspark.mechanisms import sample_noise
from dpspark.neighbours import QUERY_BLOCK, WORD_BLOCK, AnnoyIndex, ExactIndex, recall_at_1

# runtime: numpy, pyarrow and Python differ across the Databricks runtimes (CONTRIBUTING.md)
pytestmark = pytest.mark.runtime


@pytest.fixture(scope="module")
def vocab(glove):
    return glove.vectors[:20_000]


def brute_force_distances(vectors, queries, chunk=16):
    """Squared float64 distances (queries × words), as differences, a few queries at a time
    (one (chunk, words, dim) temporary instead of one for all queries)."""
    x, q = vectors.astype(np.float64), queries.astype(np.float64)
    dist = np.empty((len(q), len(x)))
    for s in range(0, len(q), chunk):
        dist[s : s + chunk] = ((q[s : s + chunk, None, :] - x[None, :, :]) ** 2).sum(axis=2)
    return dist


@pytest.mark.parametrize("epsilon", [5.0, 10.0, 20.0, 40.0])
def test_exact_search_equals_brute_force_argmin(vocab, epsilon):
    rng = np.random.default_rng(0)
    # More queries and words than one block, and sizes that are not multiples of it.
    queries = vocab[rng.integers(0, len(vocab), QUERY_BLOCK + 37)] + sample_noise(QUERY_BLOCK + 37, 50, epsilon, rng)
    sub = vocab[: 3 * WORD_BLOCK + 5]
    found = ExactIndex(sub).query(queries)
    dist = brute_force_distances(sub, queries)
    expected = dist.argmin(axis=1)
    rows = np.arange(len(queries))
    # Identical except at float32 ties, where both answers are at the minimum distance.
    mismatch = found != expected
    assert mismatch.mean() < 1e-3
    np.testing.assert_allclose(dist[rows, found], dist[rows, expected], rtol=1e-5)


def test_exact_search_finds_the_word_itself(vocab):
    idx = ExactIndex(vocab)
    ids = np.arange(0, len(vocab), 97)
    assert (idx.query(vocab[ids]) == ids).all()
    assert idx.query(np.zeros((0, 50), np.float32)).shape == (0,)


def test_annoy_interface_and_recall(vocab, tmp_path):
    sub = vocab[:3000]
    annoy = AnnoyIndex.build(sub, str(tmp_path / "i.ann"), n_trees=10)
    ids = np.arange(0, 3000, 7)
    # Queries at the words themselves: any reasonable forest finds them.
    assert recall_at_1(annoy, ExactIndex(sub), sub[ids]) > 0.95
    reopened = AnnoyIndex(str(tmp_path / "i.ann"), 50, 10)
    np.testing.assert_array_equal(reopened.query(sub[ids]), annoy.query(sub[ids]))
    assert annoy.params() == {"n_trees": 10, "search_k": -1}


@pytest.mark.parametrize("epsilon", [10.0, 40.0, 200.0])
def test_copies_through_the_certificate_equal_the_full_search(glove, epsilon):
    from dpspark.mechanisms import Space, parse

    vocab = np.arange(20_000)
    index = ExactIndex(glove.vectors[vocab])
    mech = parse({"name": "mahalanobis", "epsilon": epsilon, "lambda": 1.0}).build(Space(glove.vectors, vocab, index))
    rows = np.array([0, 5, 17, 400, 9_999, 19_999, 25_000])  # the last one is not in the vocabulary
    got = mech.sample_copies(rows, 40, np.random.default_rng(3))
    z = sample_noise(len(rows) * 40, 50, epsilon, np.random.default_rng(3), mech.a)
    full = index.query(np.repeat(glove.vectors[rows], 40, axis=0) + z).reshape(len(rows), 40)
    np.testing.assert_array_equal(got, full)


def test_within_is_a_superset_of_the_ball(vocab):
    idx = ExactIndex(vocab[:5000])
    centers = vocab[[3, 100]]
    found = idx.within(centers, np.array([3.0, 4.0]))
    for c, r, rows in zip(centers, (3.0, 4.0), found):
        d = np.linalg.norm(vocab[:5000].astype(np.float64) - c, axis=1)
        assert set(np.flatnonzero(d < r)) <= set(rows.tolist())
        assert set(rows.tolist()) <= set(np.flatnonzero(d < r * 1.01 + 0.05))
