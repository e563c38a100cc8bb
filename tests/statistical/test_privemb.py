"""PrivEmb (Feyisetan & Kasiviswanathan 2021, Algorithm 1): Φ, the noise radius and direction.

KS tests at a false-alarm rate ALPHA = 0.001 per assertion, each with a power check
(the same test rejects a scale 30% off, or a non-uniform direction).
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from dpspark.errors import ConfigError
from dpspark.privemb import draw_projection, m1, privemb, projection_dim

pytestmark = pytest.mark.statistical
ALPHA = 1e-3


def test_projection_entries_have_variance_one_over_m():
    m, d = 60, 300
    phi = draw_projection(m, d, np.random.default_rng(0))
    x = phi.ravel() * np.sqrt(m)  # standard normal if the variance is 1/m
    assert stats.kstest(x, "norm").pvalue > ALPHA
    assert stats.kstest(x * 1.3, "norm").pvalue < ALPHA
    # Chi-square interval for the variance (99.9%).
    n = x.size
    lo, hi = stats.chi2.ppf([ALPHA / 2, 1 - ALPHA / 2], n - 1) / (n - 1)
    assert lo / m <= phi.var(ddof=1) <= hi / m


@pytest.mark.parametrize("epsilon,beta", [(1.0, 0.5), (5.0, 0.8)])
def test_noise_radius_is_gamma_m_and_direction_uniform(epsilon, beta):
    m, d, n = 47, 300, 20_000
    phi = np.zeros((m, d))  # Φx = 0: the release is the noise itself
    k = privemb(np.zeros((n, d)), phi, epsilon, beta, np.random.default_rng(1))
    r = np.linalg.norm(k, axis=1)
    scale = (1 + beta) / epsilon
    assert stats.kstest(r, stats.gamma(a=m, scale=scale).cdf).pvalue > ALPHA
    for wrong in (0.7 * scale, 1.3 * scale):
        assert stats.kstest(r, stats.gamma(a=m, scale=wrong).cdf).pvalue < ALPHA
    u = k / r[:, None]
    beta_dist = stats.beta((m - 1) / 2, (m - 1) / 2)
    e = np.random.default_rng(2).standard_normal(m)
    e /= np.linalg.norm(e)
    assert stats.kstest((u @ e + 1) / 2, beta_dist.cdf).pvalue > ALPHA
    # Power: a direction squeezed along e is rejected.
    squeezed = u + 0.3 * e
    squeezed /= np.linalg.norm(squeezed, axis=1, keepdims=True)
    assert stats.kstest((squeezed @ e + 1) / 2, beta_dist.cdf).pvalue < ALPHA


def test_m1_radius_is_gamma_d():
    d, n = 50, 20_000
    r = np.linalg.norm(m1(np.zeros((n, d)), 2.0, np.random.default_rng(3)), axis=1)
    assert stats.kstest(r, stats.gamma(a=d, scale=0.5).cdf).pvalue > ALPHA
    assert stats.kstest(r, stats.gamma(a=d, scale=0.65).cdf).pvalue < ALPHA


def test_projection_dimension_formula():
    # ⌈(sqrt(ln d) + sqrt(ln 1/δ))² / β²⌉, δ = 1e-6 as in the paper's experiments.
    assert [projection_dim(300, 1e-6, b) for b in (0.5, 0.6, 0.7, 0.8, 0.9)] == [150, 104, 77, 59, 47]
    assert projection_dim(50, 1e-6, 0.5) == 130  # m > d: no room to gain at d = 50
    expected = int(np.ceil((np.sqrt(np.log(300)) + np.sqrt(np.log(1e3))) ** 2 / 0.75**2))
    assert projection_dim(300, 1e-3, 0.75) == expected


@pytest.mark.parametrize("delta,beta", [(0.0, 0.5), (1.0, 0.5), (1e-6, 0.0), (1e-6, 1.0), (1e-6, float("nan"))])
def test_invalid_delta_beta(delta, beta):
    with pytest.raises(ConfigError):
        projection_dim(300, delta, beta)
