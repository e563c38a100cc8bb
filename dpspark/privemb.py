"""Private release of embedding vectors: PrivEmb and its M1 baseline (pure numpy).

Feyisetan & Kasiviswanathan (2021), "Private Release of Text Embedding Vectors",
Algorithm 1 (PrivEmb, "M2"): draw Φ ∈ R^{m×d} with i.i.d. N(0, 1/m) entries once per
release (Φ is public), and release w = Φx + κ with κ of density ∝ exp(−ε‖z‖/(1+β)) in
R^m, i.e. radius Gamma(m, (1+β)/ε) and a uniform direction. Φ keeps every distance
within a factor 1 ± β with probability ≥ 1 − δ when
m = Ω((ω + sqrt(ln(1/δ)))² / β²), ω the Gaussian width of the input set, so the
sensitivity of x ↦ Φx is at most 1 + β and the release is (ε, δ)-Lipschitz private
for any β ∈ (0, 1) (Propositions 5–7).

The Ω hides a constant. dpspark uses constant 1 and ω = sqrt(ln d), as the paper's
own experiments do (§5: δ = 1e-6, ω(Ran(M)) = sqrt(log d)); ``--dim`` sets m
explicitly. With d = 300, δ = 1e-6: β = 0.5 gives m = 150, β = 0.9 gives m = 47.
With d = 50 the formula gives m ≥ d for β < 0.8: no room to gain.

Baseline M1 (Feyisetan et al. 2020): w = x + N, N of density ∝ exp(−ε‖z‖) in R^d
(radius Gamma(d, 1/ε)): ε-Lipschitz private with sensitivity 1 and no projection.
"""

from __future__ import annotations

import math

import numpy as np

from dpspark.errors import ConfigError
from dpspark.mechanisms import sample_radial
from dpspark.params import check_beta, check_delta, check_epsilon

M_FORMULA = "m = ceil((sqrt(ln d) + sqrt(ln(1/delta)))^2 / beta^2)  (constant of the Omega taken as 1)"


def projection_dim(d: int, delta: float, beta: float) -> int:
    """m = ⌈(sqrt(ln d) + sqrt(ln(1/δ)))² / β²⌉ (see the module docstring for the constant)."""
    check_delta(delta)
    check_beta(beta)
    if d < 2:
        raise ConfigError(f"vectors need at least 2 dimensions, got {d}")
    return int(math.ceil((math.sqrt(math.log(d)) + math.sqrt(math.log(1.0 / delta))) ** 2 / beta**2))


def draw_projection(m: int, d: int, rng: np.random.Generator) -> np.ndarray:
    """Φ ∈ R^{m×d}, entries i.i.d. N(0, 1/m). Public: it may be recorded with the release."""
    if m < 1:
        raise ConfigError(f"projection dimension m must be at least 1, got {m}")
    return rng.standard_normal((m, d)) / math.sqrt(m)


def privemb(x: np.ndarray, phi: np.ndarray, epsilon: float, beta: float, rng: np.random.Generator) -> np.ndarray:
    """PrivEmb (M2): Φx + κ, κ ∝ exp(−ε‖z‖/(1+β)). Rows of ``x`` are vectors of dimension d."""
    epsilon, beta = check_epsilon(epsilon), check_beta(beta)
    x = np.asarray(x, dtype=np.float64)
    return x @ phi.T + sample_radial(len(x), phi.shape[0], (1.0 + beta) / epsilon, rng)


def m1(x: np.ndarray, epsilon: float, rng: np.random.Generator) -> np.ndarray:
    """Baseline M1: x + N, N ∝ exp(−ε‖z‖) in R^d."""
    epsilon = check_epsilon(epsilon)
    x = np.asarray(x, dtype=np.float64)
    return x + sample_radial(len(x), x.shape[1], 1.0 / epsilon, rng)
