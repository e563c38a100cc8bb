"""Distribution tests of the noise (Algorithm 1) with fixed seeds.

Each test uses a two-sided Kolmogorov–Smirnov test at a false-alarm rate of
ALPHA = 0.001 per assertion, and a *power check*: the same test must reject the
distribution with ε off by 30% (or a direction that is not uniform), so a sampler
with the wrong scale cannot pass.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from dpspark.embeddings import select_vocabulary
from dpspark.mechanisms import sample_noise
from dpspark.mechanisms.geometry import geometry

pytestmark = pytest.mark.statistical

ALPHA = 1e-3
N = 20_000
EPSILON = 10.0


@pytest.fixture(scope="module")
def sigma_geometry(glove):
    rows = select_vocabulary(glove, 20_000)
    return {lam: geometry(glove.vectors[rows], lam) for lam in (0.0, 0.5, 1.0)}


@pytest.mark.parametrize("lam", [0.0, 0.5, 1.0])
def test_rm_norm_is_gamma_d_over_epsilon(sigma_geometry, lam):
    g = sigma_geometry[lam]
    z = sample_noise(N, g.dim, EPSILON, np.random.default_rng(1), g.a)
    # ‖Z‖_RM through Σ's eigendecomposition, independently of how A was formed.
    r = g.rm_norm(z)
    assert stats.kstest(r, stats.gamma(a=g.dim, scale=1 / EPSILON).cdf).pvalue > ALPHA
    # Power: ε 30% too large or too small must be rejected.
    for wrong in (0.7 * EPSILON, 1.3 * EPSILON):
        assert stats.kstest(r, stats.gamma(a=g.dim, scale=1 / wrong).cdf).pvalue < ALPHA


@pytest.mark.parametrize("lam", [0.0, 0.5, 1.0])
def test_direction_of_a_inverse_z_is_uniform(sigma_geometry, lam):
    g = sigma_geometry[lam]
    z = sample_noise(N, g.dim, EPSILON, np.random.default_rng(2), g.a)
    u = np.linalg.solve(g.a, z.T).T
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    # For u uniform on S^{d-1} and a fixed unit e, (u·e + 1)/2 ~ Beta((d−1)/2, (d−1)/2).
    beta = stats.beta((g.dim - 1) / 2, (g.dim - 1) / 2)
    rng = np.random.default_rng(3)
    axes = [g.eigenvectors[:, 0], g.eigenvectors[:, -1], *rng.standard_normal((3, g.dim))]
    for e in axes:
        e = e / np.linalg.norm(e)
        assert stats.kstest((u @ e + 1) / 2, beta.cdf).pvalue > ALPHA


def test_direction_test_has_power_against_elliptical_noise(sigma_geometry):
    """The uniformity test must reject Z's own direction when λ = 1 (Z is elliptical)."""
    g = sigma_geometry[1.0]
    z = sample_noise(N, g.dim, EPSILON, np.random.default_rng(4), g.a)
    u = z / np.linalg.norm(z, axis=1, keepdims=True)
    e = g.eigenvectors[:, -1]  # the largest-variance axis of Σ
    beta = stats.beta((g.dim - 1) / 2, (g.dim - 1) / 2)
    assert stats.kstest((u @ e + 1) / 2, beta.cdf).pvalue < ALPHA


def test_laplace_noise_is_isotropic_with_gamma_radius():
    d = 50
    z = sample_noise(N, d, 5.0, np.random.default_rng(5))
    r = np.linalg.norm(z, axis=1)
    assert stats.kstest(r, stats.gamma(a=d, scale=1 / 5.0).cdf).pvalue > ALPHA
    assert stats.kstest(r, stats.gamma(a=d, scale=1 / 6.5).cdf).pvalue < ALPHA
    # Mean radius d/ε: in 50 dimensions ε = 10 moves a point by 5 on average (design §2).
    r10 = np.linalg.norm(sample_noise(N, d, 10.0, np.random.default_rng(6)), axis=1)
    half_width = 4 * np.sqrt(d) / 10 / np.sqrt(N)  # 4 standard errors of the mean
    assert abs(r10.mean() - 5.0) < half_width


def test_lambda_zero_is_the_laplace_mechanism(sigma_geometry):
    g = sigma_geometry[0.0]
    np.testing.assert_allclose(g.a, np.eye(g.dim), atol=1e-12)
    a = sample_noise(1000, g.dim, EPSILON, np.random.default_rng(7), g.a)
    b = sample_noise(1000, g.dim, EPSILON, np.random.default_rng(7), None)
    np.testing.assert_allclose(a, b, atol=1e-12)
