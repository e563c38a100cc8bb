"""The noise of the metric mechanisms (pure numpy): vectors with density ∝ exp(−ε‖z‖_RM), drawn as in Xu et
al. (2020), Algorithm 1 (``dpspark.mechanisms.noise`` has the derivation). Below every mechanism: the noise
family samples with it, ``WordMechanism.noisy_points`` (the recall probe) and PrivEmb too.
"""

from __future__ import annotations

import numpy as np

from dpspark.params import check_epsilon


def sample_noise(n: int, dim: int, epsilon: float, rng: np.random.Generator, a: np.ndarray | None = None) -> np.ndarray:
    """Draw n noise vectors with density ∝ exp(−ε‖z‖_RM) (Algorithm 1), float64 n×d.

    Args:
        n: number of vectors.
        dim: d.
        epsilon: ε > 0.
        rng: the generator (secure or per-batch keyed; see dpspark.rng).
        a: A = (λΣ+(1−λ)I)^½, or None for A = I (Laplace).
    """
    z = sample_radial(n, dim, 1.0 / check_epsilon(epsilon), rng)
    return z if a is None else z @ a.T


def sample_radial(n: int, dim: int, scale: float, rng: np.random.Generator) -> np.ndarray:
    """n vectors with density ∝ exp(−‖z‖/scale) in R^dim: radius Gamma(dim, scale), uniform direction."""
    z = rng.standard_normal((n, dim))
    radius = rng.gamma(shape=dim, scale=scale, size=n)
    # In place: X = N/‖N‖ scaled by Y, without temporaries of the size of N.
    z *= (radius / np.sqrt(np.einsum("ij,ij->i", z, z)))[:, None]
    return z
