from __future__ import annotations

import numpy as np
import pytest

from dpspark.mechanisms import sample_noise
from dpspark.neighbours import QUERY_BLOCK, WORD_BLOCK, AnnoyIndex, ExactIndex, recall_at_1


@pytest.fixture(scope="module")
def vocab(glove):
    return glove.vectors[:20_000]


def brute_force_distances(vectors, queries):
    x, q = vectors.astype(np.float64), queries.astype(np.float64)
    return ((q[:, None, :] - x[None, :, :]) ** 2).sum(axis=2)


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
