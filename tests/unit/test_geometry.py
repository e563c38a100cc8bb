from __future__ import annotations

import numpy as np
import pytest

from dpspark.errors import ConfigError, EmbeddingError
from dpspark.mechanisms.geometry import check_lambda, geometry, scaled_covariance

# runtime: numpy, pyarrow and Python differ across the Databricks runtimes (CONTRIBUTING.md)
pytestmark = pytest.mark.runtime


@pytest.fixture(scope="module")
def vectors():
    rng = np.random.default_rng(0)
    # Anisotropic, correlated data so that Σ is far from I.
    return rng.standard_normal((2000, 8)) @ rng.standard_normal((8, 8)) * np.arange(1, 9)


def test_trace_of_scaled_covariance_is_d(vectors, glove):
    assert np.trace(scaled_covariance(vectors)) == pytest.approx(8, rel=1e-12)
    assert np.trace(scaled_covariance(glove.vectors[:5000])) == pytest.approx(50, rel=1e-12)


def test_scaled_covariance_is_sample_covariance_times_d_over_trace(vectors):
    s = np.cov(vectors.T, ddof=1)
    np.testing.assert_allclose(scaled_covariance(vectors), s * 8 / np.trace(s), rtol=1e-10)


@pytest.mark.parametrize("lam", [0.0, 0.25, 0.5, 0.75, 1.0])
def test_a_squared_is_regularized_covariance(vectors, lam):
    g = geometry(vectors, lam)
    np.testing.assert_allclose(g.a @ g.a, lam * g.sigma + (1 - lam) * np.eye(8), atol=1e-10)
    np.testing.assert_allclose(g.a, g.a.T, atol=1e-12)


def test_rm_norm_matches_definition(vectors):
    g = geometry(vectors, 0.6)
    x = np.random.default_rng(1).standard_normal((10, 8))
    inv = np.linalg.inv(0.6 * g.sigma + 0.4 * np.eye(8))
    expected = np.sqrt(np.einsum("ij,jk,ik->i", x, inv, x))
    np.testing.assert_allclose(g.rm_norm(x), expected, rtol=1e-10)


def test_euclidean_epsilon_bound_holds(vectors):
    g = geometry(vectors, 1.0)
    x = np.random.default_rng(2).standard_normal((500, 8))
    bound = g.euclidean_epsilon(1.0)
    assert bound == pytest.approx(1 / np.sqrt(g.xi_min))
    assert (g.rm_norm(x) <= bound * np.linalg.norm(x, axis=1) + 1e-12).all()
    assert geometry(vectors, 0.0).euclidean_epsilon(3.0) == pytest.approx(3.0)


def test_rank_deficient_vocabulary_is_rejected():
    x = np.random.default_rng(3).standard_normal((5, 8))  # 5 points span at most 4 dimensions
    with pytest.raises(EmbeddingError, match="a vocabulary of 5 words cannot give a positive-definite covariance"):
        geometry(x, 1.0)
    # more words than dimensions, all in a 3-dimensional subspace: the eigenvalue check refuses it
    y = np.random.default_rng(4).standard_normal((20, 3)) @ np.random.default_rng(5).standard_normal((3, 8))
    with pytest.raises(EmbeddingError, match="not positive definite"):
        geometry(y, 1.0)


@pytest.mark.parametrize("lam", [-0.1, 1.5, float("nan")])
def test_lambda_outside_unit_interval(lam):
    with pytest.raises(ConfigError, match="lambda"):
        check_lambda(lam)
