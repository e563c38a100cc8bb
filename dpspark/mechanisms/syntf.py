"""SynTF's word draw, token by token (Weggenmann, Kerschbaum, SIGIR 2018): ``syntf-words``.

Each token w is replaced by y ∈ W drawn by the exponential mechanism with the public similarity
ρ(w, y) = max(0, cos(φ(w), φ(y))) ∈ [0, 1] (sensitivity Δρ = 1):
Pr[y | w] = exp(ε·ρ(w, y)/2) / Σ_{y'∈W} exp(ε·ρ(w, y')/2).

Guarantee: **pure ε-DP per token**, for every pair of words (the numerators differ by at most
e^{ε/2} and so do the normalisers), adding over the tokens of a text. That is a stronger and
different promise from metric DP: ε here is not on the scale of CMP's or SanText's ε, and the
output keeps a word only at large ε (with GloVe 50-d over 50,000 words, about ε ≥ 20).

The paper's mechanism releases a synthetic term-frequency vector per document: n draws, each a
word v from the document's term frequencies, then a word by the draw above; each drawn word is
ε-DP against replacing the whole document and n draws compose to n·ε. This module is the token
form only (one draw per token, the text's length and order kept), named apart so that neither is
mistaken for the other. The MLDP benchmark's "SynTF" (mldp-text 0.1.2 ``SynTF``) draws among the
input word's WordNet synonyms, scoring every synonym that occurs in the data with the *input* word's
tf-idf and the others with 0: the candidate plays no part in its score and the supports differ from
word to word, so no DP bound holds. It is not reproduced.

The sampler is ``dpspark.mechanisms.exponential.TruncatedExponential``'s (one float64 row per
distinct word of a batch, one uniform per token) with −ρ in place of the distance.
"""

from __future__ import annotations

import math
from functools import cached_property
from typing import ClassVar, Literal

import numpy as np

from dpspark.mechanisms.base import MechanismSpec, Space, WordMechanism
from dpspark.mechanisms.exponential import TruncatedExponential


class SynTFWords(MechanismSpec):
    """The exponential mechanism over W with utility max(0, cos): pure ε-DP per token."""

    name: Literal["syntf-words"] = "syntf-words"

    paper: ClassVar[str] = (
        "Weggenmann, Kerschbaum: SynTF: Synthetic and Differentially Private Term Frequency Vectors for Privacy-"
        "Preserving Text Mining, SIGIR 2018 (its word draw, applied to each token)"
    )
    guarantee_type: ClassVar[str] = "pure"
    summary: ClassVar[str] = "exponential mechanism over the whole vocabulary, weights exp(ε·max(0, cos)/2)"

    def build(self, space: Space) -> WordMechanism:
        return CosineExponential(space, self)

    def guarantee(self, space: Space) -> str:
        return (
            f"For any two texts of equal length n (in tokens) and any output, the probabilities differ by at most a "
            f"factor exp({self.epsilon:g} * k), k the number of positions where the texts differ (pure DP per token, "
            f"whatever the words). Each output word y of the V = {space.size} words is drawn with probability "
            f"proportional to exp({self.epsilon:g} * max(0, cos(phi(w), phi(y))) / 2)."
        )


class CosineExponential(TruncatedExponential):
    """Pr[y | w] ∝ exp(ε·max(0, cos(φ(w), φ(y)))/2) over W, sampled as ``TruncatedExponential`` does."""

    def __init__(self, space: Space, spec: MechanismSpec) -> None:
        super().__init__(space, spec, math.inf)

    @cached_property
    def _unit(self) -> np.ndarray:
        """φ(W)/‖φ(W)‖ in float64 (a zero vector stays zero: its ρ is 0 to every word)."""
        norms = np.linalg.norm(self.space.vocab64, axis=1, keepdims=True)
        return self.space.vocab64 / np.where(norms > 0, norms, 1.0)

    def _scores(self, rows: np.ndarray) -> np.ndarray:
        """−ρ(w, y) = −max(0, cos) for every row w and y in W (n × V float64)."""
        x = np.asarray(self.vectors[np.asarray(rows, dtype=np.int64)], dtype=np.float64)
        norms = np.linalg.norm(x, axis=1, keepdims=True)
        cos = (x / np.where(norms > 0, norms, 1.0)) @ self._unit.T
        np.clip(cos, 0.0, 1.0, out=cos)
        cos *= -1.0
        return cos
