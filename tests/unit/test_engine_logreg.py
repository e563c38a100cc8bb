"""The utility commands' classifier (``dpspark.engine.logreg``) without a JVM: its features computed
independently (hashlib, a loop over tokens), its objective's gradient checked numerically, the objective a
combiner (blocks in any split sum to the whole), and the fit equal to scikit-learn's logistic regression with
the same L2 objective (binomial and multinomial)."""

from __future__ import annotations

import hashlib
from collections import Counter

import numpy as np
import pytest
from scipy import optimize

from dpspark.embeddings import WordRows
from dpspark.engine import logreg
from dpspark.text import tokenize

pytestmark = pytest.mark.runtime  # numpy, scipy and Python's versions


def corpus(n: int, classes: int, seed: int = 0) -> tuple[list[str | None], np.ndarray]:
    """Texts whose words depend on their class (each class favours its own words), with a null text."""
    rng = np.random.default_rng(seed)
    shared = [f"w{i}" for i in range(40)]
    own = [[f"c{k}x{i}" for i in range(8)] for k in range(classes)]
    y = rng.integers(0, classes, n)
    texts: list[str | None] = []
    for label in y:
        words = rng.choice(shared, rng.integers(3, 12)).tolist() + rng.choice(own[label], rng.integers(0, 3)).tolist()
        texts.append(" ".join(rng.permutation(words)) + "!")
    texts[3] = None
    return texts, y


def test_hashed_counts_are_blake2b_buckets_of_the_release_tokenizer():
    texts = ["The cat, the CAT!", None, "", "naïve café don't"]
    x = logreg.hashed_counts(texts)
    assert x.shape == (4, logreg.HASHING_FEATURES)
    for i, text in enumerate(texts):
        want = Counter(bucket(token) for token in (tokenize(text)[0] if text else []))
        row = x.getrow(i)
        assert dict(zip(row.indices.tolist(), row.data.tolist())) == want
    assert x[0].sum() == 6  # the, cat, ",", the, cat, "!"
    assert x[1].nnz == 0 and x[2].nnz == 0


def bucket(token: str) -> int:
    digest = hashlib.blake2b(token.encode("utf-8"), digest_size=4).digest()
    return int.from_bytes(digest, "little") % logreg.HASHING_FEATURES


def test_idf_is_log_of_documents_plus_one_over_frequency_plus_one():
    x = logreg.hashed_counts(["a b b", "b c", "c", None])
    df = logreg.document_frequency(x)
    assert [df[bucket(t)] for t in "abc"] == [1, 2, 2] and df.sum() == 5
    assert np.allclose(logreg.idf(np.array([0, 1, 4]), 4), np.log([5 / 1, 5 / 2, 5 / 5]))


@pytest.mark.parametrize("classes", [2, 3])
def test_the_gradient_is_the_objectives_derivative(classes):
    texts, y = corpus(30, classes)
    x = logreg.weighted(logreg.hashed_counts(texts), np.full(logreg.HASHING_FEATURES, 1.3))
    cols = np.unique(x.indices)
    x = x[:, cols]  # the used buckets only: a small problem to difference numerically
    n_features = x.shape[1]
    rng = np.random.default_rng(1)
    flat = rng.normal(0, 0.3, logreg.n_weights(n_features, classes))

    def f(w):
        return logreg.objective(logreg.loss_grad(x, y, w, classes), w, len(y), n_features, classes)[0]

    def g(w):
        return logreg.objective(logreg.loss_grad(x, y, w, classes), w, len(y), n_features, classes)[1]

    assert optimize.check_grad(f, g, flat, epsilon=1e-6) < 1e-5 * max(1.0, np.linalg.norm(g(flat)))


@pytest.mark.parametrize("classes", [2, 3])
def test_blocks_in_any_split_sum_to_the_whole(classes):
    texts, y = corpus(50, classes)
    x = logreg.hashed_counts(texts)
    flat = np.random.default_rng(2).normal(0, 0.1, logreg.n_weights(x.shape[1], classes))
    whole = logreg.loss_grad(x, y, flat, classes)
    parts = [logreg.loss_grad(x[a:b], y[a:b], flat, classes) for a, b in [(0, 7), (7, 31), (31, 50)]]
    assert np.isclose(sum(p[0] for p in parts), whole[0], rtol=1e-12)
    assert np.allclose(sum(p[1] for p in parts), whole[1], rtol=1e-10, atol=1e-12)
    assert np.array_equal(
        sum(logreg.document_frequency(x[a:b]) for a, b in [(0, 20), (20, 50)]), logreg.document_frequency(x)
    )


@pytest.mark.parametrize("classes", [2, 3])
def test_the_fit_equals_scikit_learns_logistic_regression(classes):
    """The same objective, (1/n) Σ log-loss + λ/2 ‖W‖² with the intercept unpenalized, is scikit-learn's with
    C = 1/(n λ): the fitted probabilities agree to 1e-4 and the predictions row for row."""
    linear_model = pytest.importorskip("sklearn.linear_model")
    texts, y = corpus(400, classes)
    fitted = logreg.fit_held(
        [logreg.block("tfidf-logreg", texts[:150], y[:150]), logreg.block("tfidf-logreg", texts[150:], y[150:])],
        classes,
    )
    raw_x, _ = logreg.block("tfidf-logreg", texts, y)
    x = logreg.weighted(raw_x, fitted.idf)
    theirs = linear_model.LogisticRegression(C=1 / (len(y) * logreg.REG_PARAM), tol=1e-10, max_iter=2000).fit(x, y)
    z = logreg._margins(x, fitted.weights, classes)
    ours = (
        np.column_stack([1 - logreg._sigmoid(z[:, 0]), logreg._sigmoid(z[:, 0])])
        if classes == 2
        else (np.exp(z - z.max(1, keepdims=True)) / np.exp(z - z.max(1, keepdims=True)).sum(1, keepdims=True))
    )
    assert np.abs(ours - theirs.predict_proba(x)).max() < 1e-4
    prediction, score = logreg.scored(fitted, (raw_x, y))[1:]
    assert np.array_equal(prediction, theirs.predict(x))
    assert (score is None) == (classes > 2)
    assert (prediction == y).mean() > 0.8  # the classes' own words are learned
    assert fitted.idf is not None and fitted.iterations < logreg.MAX_ITER


def test_mean_vector_features_and_their_fit():
    words = WordRows(["good", "bad", "movie"])
    vectors = np.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0]])
    texts = ["good movie", "bad", None, "unknown words"]
    x, y = logreg.block("embedding-logreg", texts, [1.0, 0.0, 0.0, 1.0], vectors, words)
    assert np.allclose(x, [[0.5, 0.5], [-1.0, 0.0], [0.0, 0.0], [0.0, 0.0]]) and y.tolist() == [1, 0, 0, 1]
    fitted = logreg.fit_held([(x, y)], 2)
    assert fitted.idf is None and fitted.weights.shape == (3,)
    assert logreg.scored(fitted, (x, y))[1][:2].tolist() == [1, 0]


def test_params_state_the_model():
    p = logreg.params("tfidf-logreg")
    assert p["reg_param"] == logreg.REG_PARAM and p["hashing_features"] == logreg.HASHING_FEATURES
    assert "idf" in p and "features" in logreg.params("embedding-logreg")
