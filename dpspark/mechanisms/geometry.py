"""Geometry of the embedding space: scaled covariance, A = (λΣ + (1−λ)I)^½, the RM norm.

Xu et al. (2020), "A Differentially Private Text Perturbation Method Using a
Regularized Mahalanobis Metric", §3: Σ is the sample covariance of the vocabulary's
embeddings scaled by the mean sample variance, so trace(Σ) = d = trace(I_d) and the
regularisation λΣ + (1−λ)I interpolates between two matrices of equal trace.
All of it is float64 on the driver; only the d×d matrix A is shipped to executors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpspark.errors import EmbeddingError, VocabularyTooSmallError
from dpspark.params import number

# Relative size below which an eigenvalue of Σ counts as zero (Σ has trace d, so
# its mean eigenvalue is 1: this is absolute as well as relative).
_PD_TOLERANCE = 1e-9


def check_lambda(lam: Any) -> float:
    """λ ∈ [0, 1]: 0 is the Laplace mechanism, 1 the full Mahalanobis one."""
    ok = lambda x: math.isfinite(x) and 0.0 <= x <= 1.0  # noqa: E731
    return number("lambda", lam, "in [0, 1] (0 = Laplace, 1 = full Mahalanobis)", ok)


def scaled_covariance(vectors: np.ndarray) -> np.ndarray:
    """Sample covariance of the rows of ``vectors`` (centred, /(V−1)), scaled to trace d."""
    x = np.asarray(vectors, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < 2:
        raise EmbeddingError(f"need a V×d matrix with V ≥ 2 rows to estimate a covariance, got shape {x.shape}")
    centred = x - x.mean(axis=0)
    cov = centred.T @ centred / (x.shape[0] - 1)
    trace = np.trace(cov)
    if not np.isfinite(trace) or trace <= 0:
        raise EmbeddingError("the vocabulary's embeddings have zero variance: the covariance is degenerate")
    return cov * (x.shape[1] / trace)


@dataclass(frozen=True)
class Geometry:
    """Σ's eigendecomposition and the mechanism's matrix A for one λ.

    Attributes:
        sigma: the scaled covariance Σ (d×d, trace d).
        eigenvalues: ξ, ascending.
        eigenvectors: Q, columns aligned with ``eigenvalues``.
        lam: λ.
        a: A = Q diag(sqrt(λξ + 1 − λ)) Qᵀ, so that A·A = λΣ + (1−λ)I.
    """

    sigma: np.ndarray
    eigenvalues: np.ndarray
    eigenvectors: np.ndarray
    lam: float
    a: np.ndarray

    @property
    def dim(self) -> int:
        return self.sigma.shape[0]

    @property
    def xi_min(self) -> float:
        return float(self.eigenvalues[0])

    def regularized(self) -> np.ndarray:
        """λΣ + (1−λ)I."""
        return self.lam * self.sigma + (1.0 - self.lam) * np.eye(self.dim)

    def rm_norm(self, x: np.ndarray) -> np.ndarray:
        """‖x‖_RM = sqrt(xᵀ(λΣ+(1−λ)I)⁻¹x), row-wise for a 2-D array."""
        return np.linalg.norm(self.rm_points(x), axis=1)

    def rm_points(self, x: np.ndarray) -> np.ndarray:
        """Points whose Euclidean distances are the ‖·‖_RM distances of ``x``'s rows (``rm_norm`` of a difference
        is the Euclidean norm of the difference of these): (λΣ+(1−λ)I)⁻¹ = Q diag(1/(λξ+1−λ)) Qᵀ, so project on
        Q and weight, no explicit inverse."""
        proj = np.atleast_2d(np.asarray(x, dtype=np.float64)) @ self.eigenvectors
        return proj / np.sqrt(self.lam * self.eigenvalues + 1.0 - self.lam)

    def euclidean_epsilon(self, epsilon: float) -> float:
        """Upper bound on the Euclidean-metric ε: ε / sqrt(λξ_min + 1 − λ) (Xu et al. Lemmas 2–3)."""
        return float(epsilon / _rm_scale(self.lam, self.xi_min))


def _rm_scale(lam: float, xi_min: float) -> float:
    """sqrt(λξ_min + 1 − λ): every x has ‖x‖_RM ≤ ‖x‖₂ / this (Xu et al. Lemma 2)."""
    return math.sqrt(lam * xi_min + 1.0 - lam)


def geometry(vectors: np.ndarray, lam: float) -> Geometry:
    """Compute Σ over ``vectors`` (the output vocabulary) and A for ``lam``.

    Raises EmbeddingError when Σ is not positive definite (fewer linearly
    independent words than dimensions), because Lemma 2's bound and the RM norm
    both need ξ_min > 0.
    """
    lam = check_lambda(lam)
    v, d = np.asarray(vectors).shape
    if v <= d:
        raise VocabularyTooSmallError(
            f"a vocabulary of {v} words cannot give a positive-definite covariance in {d} dimensions: use at "
            f"least {d + 1} words (--vocab-size), or a mechanism that needs no covariance",
            needed=d + 1,
        )
    sigma = scaled_covariance(vectors)
    xi, q = np.linalg.eigh(sigma)
    if xi[0] <= _PD_TOLERANCE:
        v, d = np.asarray(vectors).shape
        raise EmbeddingError(
            f"the covariance of the {v}-word vocabulary is not positive definite (smallest eigenvalue "
            f"{xi[0]:.3g}) in {d} dimensions: use a larger vocabulary (--vocab-size, at least {d + 1} "
            "linearly independent words, in practice thousands)"
        )
    a = (q * np.sqrt(lam * xi + 1.0 - lam)) @ q.T
    return Geometry(sigma=sigma, eigenvalues=xi, eigenvectors=q, lam=lam, a=a)


# The λ of the spectrum section's factor table (embedding-report).
SPECTRUM_LAMBDAS = (0.0, 0.25, 0.5, 0.75, 1.0)


def spectrum(vectors: np.ndarray, lam: float = 1.0) -> dict[str, Any]:
    """Σ's spectrum (scaled to trace d) over ``vectors`` and the Euclidean-equivalent ε factor
    1/sqrt(λξ_min + 1 − λ) per λ (Xu et al. Lemmas 2–3), JSON-ready: what embedding-report shows of
    the regularized Mahalanobis metric, ``lam`` being the λ the user asks about."""
    g = geometry(vectors, lam)
    xi = np.sort(g.eigenvalues)[::-1]
    xi_min, xi_max = float(xi[-1]), float(xi[0])
    return {
        "reference": "Xu et al. 2020, §3 (Σ scaled to trace d) and Lemmas 2–3 (Euclidean-equivalent ε)",
        "lambda": g.lam,
        "eigenvalues": [float(e) for e in xi],
        "trace": float(xi.sum()),
        "xi_max": xi_max,
        "xi_min": xi_min,
        "condition_number": xi_max / xi_min,
        "participation_ratio": float(xi.sum() ** 2 / (xi**2).sum()),
        "euclidean_epsilon_factor": [{"lambda": lm, "factor": 1.0 / _rm_scale(lm, xi_min)} for lm in SPECTRUM_LAMBDAS],
        "euclidean_epsilon_factor_at_lambda": 1.0 / _rm_scale(g.lam, xi_min),
        "meaning": "a run at ε with this λ is at most ε × factor differentially private in the Euclidean metric",
    }


def spectrum_markdown(sp: dict[str, Any]) -> list[str]:
    """The report's section on ``spectrum``'s result, as Markdown lines."""
    ev, factors = sp["eigenvalues"], sp["euclidean_epsilon_factor"]
    return [
        "## Spectrum of the scaled covariance Σ",
        "",
        f"{sp['reference']}. Σ is the vocabulary's sample covariance scaled to trace d = {sp['trace']:.4g}; "
        "an isotropic space has every eigenvalue 1.",
        "",
        f"- ξ_max = {sp['xi_max']:.4g}, ξ_min = {sp['xi_min']:.4g}, condition number {sp['condition_number']:.4g}",
        f"- participation ratio (Σξ)²/Σξ² = {sp['participation_ratio']:.4g} of {len(ev)} dimensions",
        "- largest eigenvalues: " + ", ".join(f"{x:.3g}" for x in ev[:5]),
        "- smallest eigenvalues: " + ", ".join(f"{x:.3g}" for x in ev[-5:]),
        "",
        "Euclidean-equivalent ε factor 1/sqrt(λξ_min + 1 − λ): " + sp["meaning"] + ".",
        "",
        "| λ | " + " | ".join(f"{f['lambda']:g}" for f in factors) + " |",
        "|---|" + "---:|" * len(factors),
        "| factor | " + " | ".join(f"{f['factor']:.4g}" for f in factors) + " |",
        "",
        f"At the chosen λ = {sp['lambda']:g}: factor {sp['euclidean_epsilon_factor_at_lambda']:.4g}.",
    ]


def spectrum_summary(sp: dict[str, Any]) -> str:
    """One line on ``spectrum``'s result, for the command's stdout."""
    return (
        f"xi_min = {sp['xi_min']:.4g}, xi_max = {sp['xi_max']:.4g}; Euclidean ε factor at λ = {sp['lambda']:g}: "
        f"{sp['euclidean_epsilon_factor_at_lambda']:.4g}"
    )


def diameter(points: np.ndarray, block: int = 1024) -> float:
    """The largest Euclidean distance between two rows of ``points`` (n × d), in float64: the squared distances
    ‖x‖² + ‖y‖² − 2x·y block by block, the farthest pair then measured directly (a privacy unit's bound E·D,
    ``dpspark.units``). 0 for fewer than two points."""
    x = np.ascontiguousarray(points, dtype=np.float64)
    if len(x) < 2:
        return 0.0
    sq = np.einsum("ij,ij->i", x, x)
    best, pair = -np.inf, (0, 0)
    for s in range(0, len(x), block):
        d2 = sq[s : s + block, None] + sq[None, :] - 2.0 * (x[s : s + block] @ x.T)
        r, c = np.unravel_index(int(np.argmax(d2)), d2.shape)
        if d2[r, c] > best:
            best, pair = float(d2[r, c]), (s + int(r), int(c))
    return float(np.linalg.norm(x[pair[0]] - x[pair[1]]))
