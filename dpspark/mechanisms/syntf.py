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
from typing import Any, ClassVar, Literal

import numpy as np

from dpspark._pydantic import Field, validator
from dpspark.errors import ConfigError
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
    default_epsilons: ClassVar[tuple[float, ...]] = (10.0, 15.0, 20.0, 25.0, 30.0)

    def build(self, space: Space) -> WordMechanism:
        return CosineExponential(space, self)

    def guarantee(self, space: Space) -> str:
        return (
            f"For any two texts of equal length n (in tokens) and any output, the probabilities differ by at most a "
            f"factor exp({self.epsilon:g} * k), k the number of positions where the texts differ (pure DP per token, "
            f"whatever the words). Each output word y of the V = {space.size} words is drawn with probability "
            f"proportional to exp({self.epsilon:g} * max(0, cos(phi(w), phi(y))) / 2)."
        )


# SynTF's largest n: a batch of rows holds n drawn words per row (10,000 rows of 1,000 words are
# 10 million words in memory), and at n·ε per document a larger n guarantees nothing useful.
MAX_DRAWS = 1_000


class SynTF(MechanismSpec):
    """SynTF's synthetic term-frequency vector per document (``syntf``): n words, each the word draw of a
    word drawn from the document's term frequencies; released as the drawn words (a text in sorted order)
    and their counts (``COL_tf``, map<string, int>).

    Guarantee: each released word is ε-DP against replacing the *whole* document (a draw from the
    document's term frequencies, then the word draw: every term's law is within e^{ε} of every other's,
    so is any mixture of them); n words compose to n·ε per document. n is ``draws``, or the document's
    number of in-vocabulary tokens (then public, as the token count is for the other mechanisms).
    Out-of-vocabulary tokens are left out of the term frequencies. On one word (privacy-stats,
    privacy-risk) it is the word draw of ``syntf-words``.
    """

    name: Literal["syntf"] = "syntf"
    draws: int | None = Field(
        default=None, description="n >= 1: words drawn per document (default: its in-vocabulary token count)"
    )

    paper: ClassVar[str] = SynTFWords.paper.split(" (")[0]
    guarantee_type: ClassVar[str] = "document"
    summary: ClassVar[str] = "synthetic term frequencies: n words drawn from the document, each then by the word draw"
    default_epsilons: ClassVar[tuple[float, ...]] = SynTFWords.default_epsilons  # ε of one word draw
    text_level: ClassVar[bool] = True
    extra_columns: ClassVar[dict[str, str]] = {"tf": "map<string,int>"}  # COL_tf: the drawn words' counts

    @validator("draws", pre=True, allow_reuse=True)
    def _draws(cls, v: Any) -> int | None:
        if v in (None, ""):
            return None
        try:
            value = float(v)
        except (TypeError, ValueError):
            value = math.nan
        if isinstance(v, bool) or not value.is_integer() or not 1 <= value <= MAX_DRAWS:
            raise ConfigError(
                f"draws must be a whole number from 1 to {MAX_DRAWS:,} (words drawn per document: each document "
                f"spends n·ε, and a batch holds n words per row), got {v!r}"
            )
        return int(value)

    def axes(self) -> dict[str, Any]:
        return {} if self.draws is None else {"draws": float(self.draws)}

    def ledger_cost_terms(self) -> dict[str, Any]:
        """draws: n of the document's n·ε (None: the document's token count, unknown to the ledger)."""
        return {**super().ledger_cost_terms(), "draws": self.draws}

    def build(self, space: Space) -> WordMechanism:
        return CosineExponential(space, self)

    def guarantee(self, space: Space) -> str:
        n = "n = the document's number of in-vocabulary tokens" if self.draws is None else f"n = {self.draws}"
        return (
            f"For any two documents and any output, each released word's probabilities differ by at most a factor "
            f"exp({self.epsilon:g}), whatever the documents (pure DP against replacing the whole document); the n "
            f"words of a document ({n}) together by at most exp(n * {self.epsilon:g}). Each word is drawn by taking "
            f"a word v of the document with probability its term frequency, then y of the V = {space.size} words "
            f"with probability proportional to exp({self.epsilon:g} * max(0, cos(phi(v), phi(y))) / 2)."
        )

    def outside(self) -> list[str]:
        if self.draws is None:
            return ["syntf: the number of in-vocabulary tokens of each document is published (the number of draws)"]
        return []


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
