"""The Vickrey mechanism: CMP's noisy vector, then a weighted choice between its two nearest words.

Xu, Aggarwal, Feyisetan, Teissier, PrivateNLP @ NAACL 2021 (arXiv 2104.11838), Algorithm 1
with k = 2. For every token independently:

1. v = φ(w) + Z with Z ∝ exp(−ε‖z‖_RM) (``noise.sample_noise``; λ = 0: CMP's Laplace noise);
2. w̃1, w̃2: the two nearest words of v over **all of W**, r1 = ‖φ(w̃1) − v‖ ≤ r2 = ‖φ(w̃2) − v‖;
3. p = (1 − t)·r2 / (t·r1 + (1 − t)·r2), and p = 1 − t where that denominator is 0;
4. output w̃1 with probability p, else w̃2 (one uniform per token).

t = 0 gives p = 1: CMP exactly. t = 1 always outputs the second nearest word. The appendix's
pseudocode searches W ∖ {w}; that mechanism can never output its input, and no finite ε
bounds it (the output "w" has probability 0 from w and positive from other words). Here the
search runs over all of W, which is what makes the output a function of v alone.

Guarantee: w̃1, w̃2, r1, r2 are functions of v and the public embedding, and the choice uses
an independent uniform: the whole output is post-processing of v, so CMP's ε·d (λ = 0) or
ε·d_RM (λ > 0) holds for every t.

Search: the best two of every query by ``query_two`` of ``space.exact``: the blocked float32
GEMM with a running best two per tile, or, once a process has done enough work on a CPU with
bf16 GEMMs, the certified bf16 search, which returns the exact float64 best two. r1 and r2 are
then recomputed in float64, which also fixes the order of the two. ``space.exact`` is always
an exact index, whatever index the run configured (an annoy index answers one approximate
neighbour; Vickrey needs the best two). Only the output word leaves this module: v, Z, r1 and r2 stay local.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, Literal

import numpy as np

from dpspark._pydantic import Field, validator
from dpspark.errors import ConfigError
from dpspark.mechanisms.base import MechanismSpec, Space, WordMechanism
from dpspark.mechanisms.geometry import check_lambda
from dpspark.mechanisms.noise import CHUNK, _NoiseSpec, prepare_rm, rm_matrix
from dpspark.mechanisms.sampling import sample_noise, token_epsilons


def choose_first(r1: np.ndarray, r2: np.ndarray, t: float, u: np.ndarray) -> np.ndarray:
    """Step 4: whether each token outputs its nearer word w̃1 (else w̃2), given u ~ U[0, 1).

    u < p with p = (1 − t)·r2 / (t·r1 + (1 − t)·r2), and p = 1 − t where the denominator is 0
    (r1 = r2 = 0, or t = 1 and r1 = 0). t = 0 gives p = 1 exactly (w̃1 for every u < 1).
    """
    r1 = np.asarray(r1, dtype=np.float64)
    r2 = np.asarray(r2, dtype=np.float64)
    num = (1.0 - t) * r2
    den = t * r1 + num
    p = np.full(np.broadcast(r1, r2).shape, 1.0 - t)
    np.divide(num, den, out=p, where=den > 0)
    return np.asarray(u) < p


class VickreySampler(WordMechanism):
    """Vickrey over a Space: noise as ``NoiseMechanism`` (``a`` is A for λ, None for Laplace),
    exact best two over W, a choice between them with weight t."""

    def __init__(self, space: Space, spec: MechanismSpec, a: np.ndarray | None) -> None:
        super().__init__(space, spec)
        self.a = None if a is None else np.asarray(a, dtype=np.float64)
        self.t = float(spec.t)

    def sample(self, rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One output per token (positions in W).

        The noise is drawn chunk by chunk exactly as ``NoiseMechanism.sample`` draws it, and
        the uniforms after all of it: with the same generator, t = 0 returns what CMP returns.
        """
        return self._sample(rows, self.epsilon, rng)

    def sample_at(self, rows: np.ndarray, epsilons: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """As ``sample``, token i's noise drawn at its own εᵢ in the same pass (t does not depend on ε)."""
        return self._sample(rows, token_epsilons(rows, epsilons), rng)

    def _sample(self, rows: np.ndarray, epsilon: float | np.ndarray, rng: np.random.Generator) -> np.ndarray:
        rows = np.asarray(rows, dtype=np.int64)
        if self.space.size == 1:
            return np.zeros(rows.size, dtype=np.int64)
        first, second = np.empty(rows.size, dtype=np.int64), np.empty(rows.size, dtype=np.int64)
        r1, r2 = np.empty(rows.size), np.empty(rows.size)
        for start in range(0, rows.size, CHUNK):
            part = rows[start : start + CHUNK]
            eps = epsilon if np.ndim(epsilon) == 0 else epsilon[start : start + CHUNK]  # type: ignore[index]
            noisy = sample_noise(len(part), self.dim, eps, rng, self.a)
            noisy += self.vectors[part]
            s = slice(start, start + len(part))
            first[s], second[s], r1[s], r2[s] = self.best_two(noisy)
        return np.where(choose_first(r1, r2, self.t, rng.random(rows.size)), first, second)

    def best_two(self, noisy: np.ndarray, among: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
        """Step 2 for noisy points (n×d float64): (w̃1, w̃2, r1, r2), positions in W and float64
        distances, r1 ≤ r2; ``among`` limits the search to those positions of W (ascending).

        The index proposes the two (the float32 search, or the certified bf16 one, exact in float64);
        their float64 distances order them (the index's order stands where they are equal).
        """
        pair = self.space.exact.query_two(noisy, among)
        diff = self.space.vocab64[pair] - np.asarray(noisy, dtype=np.float64)[:, None, :]
        d = np.sqrt(np.einsum("ijk,ijk->ij", diff, diff))
        swap = d[:, 1] < d[:, 0]
        pair[swap] = pair[swap, ::-1]
        d[swap] = d[swap, ::-1]
        return pair[:, 0], pair[:, 1], d[:, 0], d[:, 1]

    def noise(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """n noise vectors drawn chunk by chunk as ``sample`` draws them (n×d float64)."""
        if n == 0:
            return np.empty((0, self.dim))
        return np.concatenate(
            [sample_noise(min(CHUNK, n - s), self.dim, self.epsilon, rng, self.a) for s in range(0, n, CHUNK)]
        )

    def sample_copies(self, rows: np.ndarray, copies: int, rng: np.random.Generator) -> np.ndarray:
        """``copies`` independent runs per row (n × copies positions in W): the same draws, and
        the same outputs, as ``sample(np.repeat(rows, copies), rng)``, found faster.

        The runs of a word w share φ(w). With w in W, r1 ≤ ‖Z‖ (w itself is a candidate) and
        r2 ≤ ‖Z‖ + δ1(w), δ1(w) being the distance from w to its nearest other word n1 (w and
        n1 are two words within that distance of v). A word u with ‖φ(u) − φ(w)‖ > 2‖Z‖ + δ1(w)
        is farther than ‖Z‖ + δ1(w) from v, so farther than both w and n1: it is not among the
        best two. The search over the words of that ball (``within``, a superset) therefore
        returns what the full search returns. δ1 comes from one float64 distance row per
        distinct input word. A word whose ball holds more than 1/16 of W (small ε: small GEMMs
        would cost more than they save), and a word outside W, go to the full search.
        """
        rows = np.asarray(rows, dtype=np.int64)
        n = len(rows)
        if self.space.size == 1:
            return np.zeros((n, copies), dtype=np.int64)
        z = self.noise(n * copies, rng).reshape(n, copies, self.dim)
        first, second, r1, r2 = self.copies_best_two(rows, z)
        u = rng.random(n * copies).reshape(n, copies)
        return np.where(choose_first(r1, r2, self.t, u), first, second)

    def copies_best_two(self, rows: np.ndarray, z: np.ndarray) -> tuple[np.ndarray, ...]:
        """``best_two`` of φ(rows[i]) + z[i, k] for every i and k (z: n × copies × d), each an
        n × copies array, through the certificate of ``sample_copies`` where it pays."""
        rows = np.asarray(rows, dtype=np.int64)
        n, copies = z.shape[:2]
        size = self.space.size
        first, second = np.empty((n, copies), dtype=np.int64), np.empty((n, copies), dtype=np.int64)
        r1, r2 = np.empty((n, copies)), np.empty((n, copies))
        full = np.ones(n, dtype=bool)
        _, in_vocab = self.space.positions(rows)
        within = getattr(self.space.exact, "within", None)
        if within is not None and in_vocab.any() and size > 2:
            idx = np.flatnonzero(in_vocab)
            reach = 2.0 * np.sqrt(np.einsum("ikd,ikd->ik", z[idx], z[idx])).max(axis=1)
            # Probe the smallest 2‖Z‖ ball (a lower bound of the word's own radius) first: if it
            # holds 1/16 of W, this ε is too small for the certificate to pay (speed only).
            probe = int(np.argmin(reach))
            if len(within(self.vectors[rows[idx[probe : probe + 1]]], reach[probe : probe + 1])[0]) <= size // 16:
                radii = reach + self.nearest_other(rows[idx])
                for i, cand in zip(idx, within(self.vectors[rows[idx]], radii)):
                    if 2 <= len(cand) <= size // 16:
                        noisy = self.vectors[rows[i]].astype(np.float64) + z[i]
                        first[i], second[i], r1[i], r2[i] = self.best_two(noisy, cand)
                        full[i] = False
        todo = np.flatnonzero(full)
        per = max(1, CHUNK // max(1, copies))  # words per full search: about CHUNK queries
        for s in range(0, len(todo), per):
            i = todo[s : s + per]
            noisy = (self.vectors[rows[i]].astype(np.float64)[:, None, :] + z[i]).reshape(-1, self.dim)
            parts = self.best_two(noisy)
            for out, part in zip((first, second, r1, r2), parts):
                out[i] = part.reshape(len(i), copies)
        return first, second, r1, r2

    def nearest_other(self, rows: np.ndarray) -> np.ndarray:
        """δ1: the float64 distance from each row (a word of W) to its nearest other word of W,
        one distance row per distinct word (0 where another word shares its vector)."""
        unique, inverse = np.unique(np.asarray(rows, dtype=np.int64), return_inverse=True)
        pos, _ = self.space.positions(unique)
        delta = np.empty(len(unique))
        block = self.space.block
        for s in range(0, len(unique), block):
            d = self.space.distance_rows(unique[s : s + block])
            d[np.arange(len(d)), pos[s : s + block]] = np.inf
            delta[s : s + block] = d.min(axis=1)
        # distance_rows is exact to ≈ 1e-13 on GloVe's scale; the margin keeps the ball a superset.
        return delta[inverse.reshape(-1)] * (1 + 1e-9) + 1e-9


class Vickrey(MechanismSpec):
    """The Vickrey mechanism: CMP (or Mahalanobis) noise, then the nearest or second nearest word of
    the noisy vector, the nearer one with probability (1 − t)·r2 / (t·r1 + (1 − t)·r2)."""

    name: Literal["vickrey"] = "vickrey"
    t: float = Field(
        default=0.5, description="t in [0, 1]: the weight that moves outputs to the second nearest word (0: CMP)"
    )
    lam: float = Field(default=0.0, alias="lambda", description="λ in [0, 1] of the noise (0: Laplace)")
    paper: ClassVar[str] = (
        "Xu, Aggarwal, Feyisetan, Teissier: On a Utilitarian Approach to Privacy Preserving Text Generation, "
        "PrivateNLP @ NAACL 2021 (arXiv 2104.11838), Algorithm 1 with k = 2"
    )
    summary: ClassVar[str] = "Laplace or Mahalanobis noise, then a weighted choice between the two nearest words"
    default_epsilons: ClassVar[tuple[float, ...]] = (4.0, 5.0, 6.0, 8.0, 10.0)
    guarantee_type: ClassVar[str] = "metric"

    @validator("t", pre=True, allow_reuse=True)
    def _t(cls, v: Any) -> float:
        if v is None or v == "":
            return 0.5
        expected = "a number in [0, 1] (0 = CMP, 1 = always the second nearest word)"
        try:
            value = float(v) if not isinstance(v, bool) else math.nan
        except (TypeError, ValueError):
            value = math.nan
        if not (math.isfinite(value) and 0.0 <= value <= 1.0):
            raise ConfigError(f"t must be {expected}, got {v!r}")
        return value

    @validator("lam", pre=True, allow_reuse=True)
    def _lam(cls, v: Any) -> float:
        return 0.0 if v is None or v == "" else check_lambda(v)

    def axes(self) -> dict[str, float]:
        return {"t": self.t, "lambda": self.lam}

    def prepare(self, space: Space) -> list[str]:
        return prepare_rm(space, self.lam)

    def build(self, space: Space) -> WordMechanism:
        return VickreySampler(space, self, rm_matrix(space, self.lam))

    def run_facts(self, space: Space) -> dict[str, Any]:
        return _NoiseSpec.run_facts(self, space)  # type: ignore[arg-type]

    def unit(self, space: Space) -> str:
        return _NoiseSpec.unit(self, space)  # type: ignore[arg-type]

    def bound_unit(self, space: Space) -> dict[str, Any]:
        return _NoiseSpec.bound_unit(self, space)  # type: ignore[arg-type]

    def unit_diameter(self, space: Space) -> float | None:
        return _NoiseSpec.unit_diameter(self, space)  # type: ignore[arg-type]

    def bound_conversion(self, space: Space) -> tuple[dict[str, Any], float] | None:
        return _NoiseSpec.bound_conversion(self, space)  # type: ignore[arg-type]

    def guarantee(self, space: Space) -> str:
        return _NoiseSpec.guarantee(self, space) + (  # type: ignore[arg-type]
            f" The choice between the two nearest words of the noisy vector (t = {self.t:g}) is post-processing of "
            "it (it uses the noisy vector, the public embedding and an independent uniform only): the bound holds "
            "for every t."
        )
