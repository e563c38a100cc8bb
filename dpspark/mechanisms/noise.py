"""The noise mechanisms: multivariate Laplace (CMP) and regularized Mahalanobis (pure numpy).

Noise (Xu et al. 2020, Algorithm 1; Feyisetan et al. 2020, §2.6):
N ~ N(0, I_d), X = N/‖N‖₂ (uniform on the sphere), Y ~ Gamma(d, 1/ε), Z = Y·A·X
with A = (λΣ + (1−λ)I)^½. YX has density ∝ exp(−ε‖u‖₂) (the radius of that density
is Gamma(d, 1/ε) and its direction uniform), and Z = A(YX) is its image under A, so
Z has density ∝ exp(−ε‖A⁻¹z‖₂) = exp(−ε‖z‖_RM) because A⁻² = (λΣ+(1−λ)I)⁻¹.
λ = 0 gives A = I: the multivariate Laplace mechanism.

Word mechanism (Xu et al. Algorithm 2): ŵ = argmin_{u∈W} ‖φ(u) − (φ(w) + Z)‖₂, for
every token independently. Guarantee: for strings of equal length,
Pr[M(s)=ŝ]/Pr[M(s')=ŝ] ≤ exp(ε Σᵢ ‖φ(wᵢ) − φ(w'ᵢ)‖_RM). Only ŵ leaves this module:
the noisy vector v and the noise Z are local to ``perturb_rows``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

import numpy as np

from dpspark._pydantic import Field, validator
from dpspark.mechanisms.base import UNITS, MechanismSpec, Space, WordMechanism
from dpspark.mechanisms.geometry import Geometry, check_lambda, diameter, geometry
from dpspark.mechanisms.labels import LEGACY_COLUMN
from dpspark.mechanisms.sampling import sample_noise, token_epsilons

CHUNK = 8192


class NoiseMechanism(WordMechanism):
    """v = φ(w) + Z with Z ∝ exp(−ε‖z‖_RM), output the nearest word of W to v (Xu et al. Algorithm 2).

    ``a`` is A for the spec's λ (None: Laplace). The configured index answers the search.
    """

    def __init__(self, space: Space, spec: MechanismSpec, a: np.ndarray | None) -> None:
        super().__init__(space, spec)
        self.a = None if a is None else np.asarray(a, dtype=np.float64)

    def sample(self, rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Perturb embedding rows; return positions in the output vocabulary (one per input).

        Works in chunks of CHUNK tokens: large enough for efficient BLAS calls, small
        enough that the noise and the noisy points stay in cache.
        """
        return self._sample(rows, self.epsilon, rng)

    def sample_at(self, rows: np.ndarray, epsilons: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """As ``sample``, token i's noise drawn at its own εᵢ (radius Gamma(d, 1/εᵢ)) in the same pass: with
        equal εᵢ, the draws of ``sample`` at that ε."""
        return self._sample(rows, token_epsilons(rows, epsilons), rng)

    def _sample(self, rows: np.ndarray, epsilon: float | np.ndarray, rng: np.random.Generator) -> np.ndarray:
        rows = np.asarray(rows, dtype=np.int64)
        out = np.empty(rows.size, dtype=np.int64)
        for start in range(0, rows.size, CHUNK):
            part = rows[start : start + CHUNK]
            eps = epsilon if np.ndim(epsilon) == 0 else epsilon[start : start + CHUNK]  # type: ignore[index]
            noisy = sample_noise(len(part), self.dim, eps, rng, self.a)
            noisy += self.vectors[part]
            out[start : start + CHUNK] = self.space.index.query(noisy)
        return out

    def sample_copies(self, rows: np.ndarray, copies: int, rng: np.random.Generator) -> np.ndarray:
        """``copies`` independent runs of the mechanism on each row: an (n × copies) array of
        output-vocabulary positions (the privacy statistics' K runs of a word).

        Exploits that the K noisy points of a word share their centre φ(w): with w in
        the vocabulary, any u with ‖φ(u) − φ(w)‖ ≥ 2‖Z‖ is at least as far from
        v = φ(w) + Z as w itself (‖v − φ(u)‖ ≥ ‖φ(u) − φ(w)‖ − ‖Z‖ ≥ ‖Z‖ = ‖v − φ(w)‖),
        so only the words within 2·max_k ‖Z_k‖ of φ(w) can be the answer. Searching
        them alone returns exactly what the full search returns (the 2‖Z‖
        certificate); the true word only narrows where the exact answer can be. When
        the ball holds more than 1/16 of the vocabulary (small ε: small GEMMs would cost
        more than they save) the word's
        copies go to the batched full search instead.
        """
        rows = np.asarray(rows, dtype=np.int64)
        n = len(rows)
        z = sample_noise(n * copies, self.dim, self.epsilon, rng, self.a).reshape(n, copies, self.dim)
        out = np.empty((n, copies), dtype=np.int64)
        pos = np.searchsorted(self.vocab_rows, rows)
        in_vocab = (pos < len(self.vocab_rows)) & (self.vocab_rows[np.minimum(pos, len(self.vocab_rows) - 1)] == rows)
        full = np.ones(n, dtype=bool)
        within = getattr(self.space.index, "within", None)
        if within is not None and in_vocab.any():
            idx = np.flatnonzero(in_vocab)
            radii = 2.0 * np.sqrt((z[idx] ** 2).sum(axis=2)).max(axis=1)
            # Probe with the smallest ball first: if even it holds 1/16 of the
            # vocabulary, this ε is too small for the certificate to pay (speed only).
            probe = int(np.argmin(radii))
            if (
                len(within(self.vectors[rows[idx[probe : probe + 1]]], radii[probe : probe + 1])[0])
                <= len(self.vocab_rows) // 16
            ):
                for i, cand in zip(idx, within(self.vectors[rows[idx]], radii)):
                    if len(cand) <= len(self.vocab_rows) // 16:
                        out[i] = self.space.index.query_among(self.vectors[rows[i]] + z[i], cand)
                        full[i] = False
        if full.any():
            noisy = (self.vectors[rows[full]][:, None, :] + z[full]).reshape(-1, self.dim)
            out[full] = self.space.index.query(noisy).reshape(-1, copies)
        return out


def geometry_of(space: Space, lam: float) -> Geometry:
    """Σ of W (scaled to trace d) and its regularisation at λ (``dpspark.mechanisms.geometry``), kept on
    the Space for the run (driver only)."""
    lam = float(lam)
    return space.memo(f"noise/geometry/lambda={lam!r}", lambda: geometry(space.vocab64, lam))


def rm_matrix(space: Space, lam: float) -> np.ndarray | None:
    """A = (λΣ + (1−λ)I)^½, the matrix of the regularized Mahalanobis noise at λ (Σ: ``geometry_of``):
    a Space artefact, computed on the driver and shipped in the bundle; None for λ = 0 (A = I: no matrix
    product at all)."""
    lam = float(lam)
    if lam == 0.0:
        return None
    return space.artefact(_rm_name(lam), lambda: geometry_of(space, lam).a)


def prepare_rm(space: Space, lam: float) -> list[str]:
    """The driver's preparation of noise at λ: Σ (a vocabulary too small for a positive-definite one is
    refused here, before any Spark work) and A; returns the artefact names to ship."""
    geometry_of(space, lam)
    return [] if rm_matrix(space, lam) is None else [_rm_name(float(lam))]


def series_of_lambda(lam: float) -> str:
    """The setting (``series_label``) of the noise family at λ: ``laplace`` at 0, else ``mahalanobis λ=…``.
    Outputs written before the mechanism and setting columns name their settings by λ alone."""
    lam = float(lam)  # as read back: not validated (a damaged value is named, then refused where it is used)
    return (Laplace if lam == 0 else Mahalanobis).label_of({"lambda": lam})


def series_of_row(row: Mapping[str, Any]) -> str:
    """A result row's setting: its ``setting``, or for a row written before that column its λ's
    (``series_of_lambda``)."""
    return row.get("setting") or series_of_lambda(row[LEGACY_COLUMN])


def lambda_of_series(series: str) -> float | None:
    """λ of a setting label (``series_label``): 0 for ``laplace``, the ``λ=`` value of Mahalanobis and
    Vickrey, None for a mechanism without one."""
    parts = str(series).split()
    if parts[0] == "laplace":
        return 0.0
    return next((float(p[2:]) for p in parts if p.startswith("λ=")), None)


def _rm_name(lam: float) -> str:
    return f"noise/rm-matrix/lambda={lam!r}"


class _NoiseSpec(MechanismSpec):
    """Shared by the two noise mechanisms: the guarantee in RM and Euclidean terms."""

    lam: float = 0.0

    def axes(self) -> dict[str, float]:
        return {"lambda": self.lam}

    @classmethod
    def grid_facts(cls, specs: list[MechanismSpec], space: Space) -> dict[str, Any]:
        """What the grid commands' manifests state of the noise family: its λ grid (the settings with a λ axis,
        Vickrey's included), each λ's Euclidean-equivalent ε factor (Xu et al. Lemmas 2–3) and ξ_min, the
        smallest eigenvalue of the scaled covariance (null without a λ)."""
        lams = sorted({spec.axes()["lambda"] for spec in specs if "lambda" in spec.axes()})
        return {
            "lambdas": lams,
            "euclidean_epsilon_factor": {str(lam): geometry_of(space, lam).euclidean_epsilon(1.0) for lam in lams},
            "xi_min": geometry_of(space, lams[0]).xi_min if lams else None,
        }

    def prepare(self, space: Space) -> list[str]:
        return prepare_rm(space, self.lam)

    def build(self, space: Space) -> WordMechanism:
        return NoiseMechanism(space, self, rm_matrix(space, self.lam))

    def run_facts(self, space: Space) -> dict[str, Any]:
        g = geometry_of(space, self.lam)
        return {"euclidean_epsilon_bound": g.euclidean_epsilon(self.epsilon), "xi_min": g.xi_min}

    def bound_unit(self, space: Space) -> dict[str, Any]:
        """Euclidean for λ = 0; else the regularized Mahalanobis norm of this λ and of Σ, the covariance of
        this vocabulary's vectors (another vocabulary, another Σ, another norm)."""
        if self.lam == 0:
            return MechanismSpec.bound_unit(self, space)
        return {"distance": "regularized-mahalanobis", "lambda": self.lam, "vocabulary": space.vocabulary_digest}

    def unit_diameter(self, space: Space) -> float | None:
        """λ = 0: the Euclidean diameter of φ(W); else its diameter in ‖·‖_RM of this λ (the guarantee's metric)."""
        if self.lam == 0:
            return MechanismSpec.unit_diameter(self, space)
        g = geometry_of(space, self.lam)
        return space.memo(f"diameter/rm/lambda={self.lam!r}", lambda: diameter(g.rm_points(space.vocab64)))

    def bound_conversion(self, space: Space) -> tuple[dict[str, Any], float] | None:
        """λ > 0: ε per unit of ||·||_RM bounds ε / sqrt(λ·ξ_min + 1 − λ) per unit of Euclidean distance
        (Xu et al., Lemma 2)."""
        if self.lam == 0:
            return None
        return MechanismSpec.bound_unit(self, space), geometry_of(space, self.lam).euclidean_epsilon(1.0)

    def unit(self, space: Space) -> str:
        """Euclidean for λ = 0 (Laplace); else the regularized Mahalanobis norm, whose ε per unit of
        Euclidean distance is up to ε / sqrt(λ·ξ_min + 1 − λ)."""
        if self.lam == 0:
            return UNITS[self.guarantee_type]
        factor = geometry_of(space, self.lam).euclidean_epsilon(1.0)
        return (
            f"ε per unit of the regularized Mahalanobis distance ||·||_RM (λ = {self.lam:g}): per unit of Euclidean "
            f"distance up to {factor:.3g}·ε"
        )

    def guarantee(self, space: Space) -> str:
        g = geometry_of(space, self.lam)
        return (
            f"For any two texts of equal length n (in tokens) and any output, the probabilities differ by at most a "
            f"factor exp({self.epsilon:g} * sum_i ||phi(w_i) - phi(w'_i)||_RM) with lambda = {self.lam:g}; in "
            f"Euclidean terms at most exp({g.euclidean_epsilon(self.epsilon):.4g} * sum_i ||phi(w_i) - phi(w'_i)||_2)."
        )


class Laplace(_NoiseSpec):
    """The multivariate Laplace mechanism (CMP): noise ∝ exp(−ε‖z‖₂), nearest word."""

    name: Literal["laplace"] = "laplace"
    lam: Literal[0.0] = Field(default=0.0, alias="lambda", description="λ = 0 (the Laplace mechanism)")
    paper: ClassVar[str] = "Feyisetan, Balle, Drake, Diethe, WSDM 2020 (calibrated multivariate perturbations)"
    summary: ClassVar[str] = "multivariate Laplace noise on the embedding, nearest word"
    default_epsilons: ClassVar[tuple[float, ...]] = (4.0, 5.0, 6.0, 8.0, 10.0)

    @classmethod
    def label_of(cls, axes: dict[str, Any]) -> str:
        """``laplace``: its λ is fixed at 0, so its name says all of its setting."""
        return "laplace"

    @validator("lam", pre=True, allow_reuse=True)
    def _lam(cls, v: Any) -> float:
        if v is not None and v != "" and check_lambda(v) != 0.0:
            raise ValueError(f"the laplace mechanism is λ = 0; got lambda = {v}: use mahalanobis for λ > 0")
        return 0.0


class Mahalanobis(_NoiseSpec):
    """The regularized Mahalanobis mechanism: noise ∝ exp(−ε‖z‖_RM), nearest word."""

    name: Literal["mahalanobis"] = "mahalanobis"
    lam: float = Field(default=1.0, alias="lambda", description="λ in [0, 1] (1: full Mahalanobis)")
    paper: ClassVar[str] = "Xu, Aggarwal, Feyisetan, Teissier, PrivateNLP 2020 (regularized Mahalanobis metric)"
    summary: ClassVar[str] = "elliptical noise shaped by the embedding's covariance, nearest word"
    default_epsilons: ClassVar[tuple[float, ...]] = (4.0, 5.0, 6.0, 8.0, 10.0)

    @validator("lam", pre=True, allow_reuse=True)
    def _lam(cls, v: Any) -> float:
        return 1.0 if v is None or v == "" else check_lambda(v)
