"""The noise of the metric mechanisms (pure numpy): vectors with density ∝ exp(−ε‖z‖_RM), drawn as in Xu et
al. (2020), Algorithm 1 (``dpspark.mechanisms.noise`` has the derivation). Below every mechanism: the noise
family samples with it, ``WordMechanism.noisy_points`` (the recall probe) and PrivEmb too.
"""

from __future__ import annotations

import numpy as np

from dpspark.params import check_epsilon


def token_epsilons(rows: np.ndarray, epsilons: np.ndarray) -> np.ndarray:
    """``epsilons`` checked as one ε per row of ``rows`` (float64, each > 0 and finite): a privacy unit's
    allocation (``dpspark.units``) as the samplers take it."""
    eps = np.asarray(epsilons, dtype=np.float64)
    if eps.shape != np.shape(rows):
        raise ValueError(f"one epsilon per token: {eps.shape} epsilons for {np.shape(rows)} tokens")
    if eps.size and not (np.isfinite(eps).all() and eps.min() > 0):
        check_epsilon(eps[~(np.isfinite(eps) & (eps > 0))][0])  # names the first bad one
    return eps


def sample_noise(
    n: int, dim: int, epsilon: float | np.ndarray, rng: np.random.Generator, a: np.ndarray | None = None
) -> np.ndarray:
    """Draw n noise vectors with density ∝ exp(−ε‖z‖_RM) (Algorithm 1), float64 n×d.

    Args:
        n: number of vectors.
        dim: d.
        epsilon: ε > 0, or one ε per vector (n of them: a privacy unit's per-token ε); with n equal ε the
            draws are those of that one ε.
        rng: the generator (secure or per-batch keyed; see dpspark.rng).
        a: A = (λΣ+(1−λ)I)^½, or None for A = I (Laplace).
    """
    if np.ndim(epsilon) == 0:
        scale: float | np.ndarray = 1.0 / check_epsilon(epsilon)
    else:
        scale = 1.0 / token_epsilons(np.empty(n), epsilon)
    z = sample_radial(n, dim, scale, rng)
    return z if a is None else z @ a.T


def sample_radial(n: int, dim: int, scale: float | np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """n vectors with density ∝ exp(−‖z‖/scale) in R^dim: radius Gamma(dim, scale), uniform direction
    (``scale``: one for all, or one per vector)."""
    z = rng.standard_normal((n, dim))
    radius = rng.gamma(shape=dim, scale=scale, size=n)
    # In place: X = N/‖N‖ scaled by Y, without temporaries of the size of N.
    z *= (radius / np.sqrt(np.einsum("ij,ij->i", z, z)))[:, None]
    return z
