"""SanText (Yue, Du, Wang, Li, Sun, Chow, Findings of ACL 2021, arXiv 2106.01221).

Pr[y | x] ∝ exp(−ε·d(x, y)/2) over every y ∈ W, d the Euclidean distance of the embedding:
the exponential mechanism with utility −d, ε·d-private (metric DP); TEM with γ = ∞. Its ε is
on the embedding's scale: with GloVe 50-d over 50,000 words the output is almost never the
input at ε = 1 and almost always at ε = 5.

Peers differ (mechanisms.md): the MLDP benchmark measures distance on the first 3 coordinates
and attaches rows to the wrong words. SanText+ (a protected set of rare words and a
probability p of sampling the others) is a different guarantee and not this spec.
The sampler is ``dpspark.mechanisms.exponential.TruncatedExponential`` without truncation:
one O(V) distance row per distinct word of a batch, one uniform per token.
"""

from __future__ import annotations

import math
from typing import ClassVar, Literal

from dpspark.mechanisms.base import MechanismSpec, Space, WordMechanism
from dpspark.mechanisms.exponential import TruncatedExponential


class SanText(MechanismSpec):
    """The exponential mechanism over all of W with utility −d (no parameters besides ε)."""

    name: Literal["santext"] = "santext"

    paper: ClassVar[str] = (
        "Yue, Du, Wang, Li, Sun, Chow: Differential Privacy for Text Analytics via Natural Text Sanitization, "
        "Findings of ACL 2021"
    )
    guarantee_type: ClassVar[str] = "metric"
    summary: ClassVar[str] = "exponential mechanism over the whole vocabulary, weights exp(−ε·d/2)"
    default_epsilons: ClassVar[tuple[float, ...]] = (2.0, 2.5, 3.0, 3.5, 4.0)

    def build(self, space: Space) -> WordMechanism:
        return TruncatedExponential(space, self, math.inf)

    def guarantee(self, space: Space) -> str:
        return (
            f"For any two texts of equal length n (in tokens) and any output, the probabilities differ by at most a "
            f"factor exp({self.epsilon:g} * sum_i ||phi(w_i) - phi(w'_i)||_2) (Euclidean distance of the embedding). "
            f"SanText draws each output word y of the V = {space.size} words with probability proportional to "
            f"exp(-{self.epsilon:g} * d(w, y) / 2)."
        )
