"""SanText+ (Yue, Du, Wang, Li, Sun, Chow, Findings of ACL 2021, arXiv 2106.01221).

The vocabulary W is split into a protected set V_S (sensitive words) and the rest V_N. A token
x ∈ V_S (and any embedded word outside W) is replaced by y ∈ V_S drawn with
Pr ∝ exp(−ε·d(x, y)/2) over V_S only; a token x ∈ V_N is replaced the same way with probability
p and released unchanged with probability 1 − p. In closed form, for y ∈ V_S,
Pr[y | x] = q_x·exp(−ε·d(x, y)/2) / Σ_{y'∈V_S} exp(−ε·d(x, y')/2), q_x = 1 on V_S and p on V_N,
and Pr[x | x] = 1 − p for x ∈ V_N.

Guarantee (UMLDP, derived here; the paper's theorem is unverified): for every output y ∈ V_S
and all words x, x′, Pr[y | x] ≤ exp(ε·d(x, x′) + ln(1/p))·Pr[y | x′]. An output in V_N is the
input itself: non-sensitive words are released verbatim with probability 1 − p **by design**.

V_S is public: by default the ⌊fraction·V⌋ least frequent words of W in the embedding's own
frequency order (its row order: GloVe ranks words by corpus frequency), or the words of a list
the user gives (``sensitive_words``, read on the driver and shipped as positions). The authors'
code takes the order from the private corpus, which sits outside the accounting. Here that is an
explicit opt-in, ``sensitive_from_corpus``: V_S is the ⌊fraction·n⌋ least frequent of the n words of
W that occur in the input corpus, by the corpus's own token counts (ties: the rarer in the
embedding's order first). perturb and release count the corpus on Spark, as for
``vocab_from_corpus``, and hand the counts to the driver's Space (``CORPUS_COUNTS``, never shipped:
only V_S is); the run warns, and the manifest lists the choice outside the guarantee, since which
words are protected reveals which words are rare in the private corpus. Their code also takes one
word more than the fraction (``words[-count - 1:]``); this module takes ⌊fraction·V⌋ (at least one).

The sampler is ``dpspark.mechanisms.exponential.TruncatedExponential`` without truncation, with
the weights of V_N set to zero: one distance row per distinct word of a batch, one uniform per
token, after one uniform per token of V_N for its coin.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np

from dpspark._pydantic import Field, root_validator, validator
from dpspark.errors import ConfigError
from dpspark.mechanisms.base import MechanismSpec, Space, WordMechanism
from dpspark.mechanisms.exponential import TruncatedExponential
from dpspark.wordfiles import read_word_list, warn_unmatched

DEFAULT_P = 0.2
DEFAULT_FRACTION = 0.5
# A driver-only array: each word of W's count in the input corpus (``dpspark.mechanisms.base.corpus_counts``),
# requested by ``SanTextPlus.corpus_counts_artefact``. Never shipped.
CORPUS_COUNTS = "santext-plus/corpus-counts"


class SanTextPlus(MechanismSpec):
    """SanText restricted to a public protected set V_S; other words are sampled with probability p."""

    name: Literal["santext-plus"] = "santext-plus"
    p: float = Field(default=DEFAULT_P, description="p in (0, 1]: the probability that a non-sensitive word is sampled")
    sensitive_fraction: float = Field(
        default=DEFAULT_FRACTION,
        description="the share of W, least frequent first in the embedding's order, that is protected (0.5)",
    )
    sensitive_words: str | None = Field(
        default=None, description="a file of the protected words, one per line (instead of sensitive_fraction)"
    )
    sensitive_from_corpus: bool = Field(
        default=False,
        description="protect the least frequent sensitive_fraction of the input corpus's words of the vocabulary, by "
        "the corpus's own counts (derived from the private data: outside the guarantee; warned)",
    )

    paper: ClassVar[str] = (
        "Yue, Du, Wang, Li, Sun, Chow: Differential Privacy for Text Analytics via Natural Text Sanitization, "
        "Findings of ACL 2021"
    )
    guarantee_type: ClassVar[str] = "umldp"
    summary: ClassVar[str] = "SanText over a protected set of rare words; other words kept with probability 1 − p"
    # SanText's: the same draw over the protected words
    default_epsilons: ClassVar[tuple[float, ...]] = (2.0, 2.5, 3.0, 3.5, 4.0)

    @root_validator(pre=True, allow_reuse=True)
    def _one_of(cls, values: dict[str, Any]) -> dict[str, Any]:
        if values.get("sensitive_words") not in (None, "") and values.get("sensitive_fraction") not in (None, ""):
            raise ConfigError("give sensitive_fraction or sensitive_words, not both")
        if values.get("sensitive_words") not in (None, "") and values.get("sensitive_from_corpus") is True:
            raise ConfigError(
                "give sensitive_words or sensitive_from_corpus, not both (the protected set is the file's words, or "
                "the corpus's least frequent words)"
            )
        return values

    @validator("p", pre=True, allow_reuse=True)
    def _p(cls, v: Any) -> float:
        return _fraction("p", DEFAULT_P if v in (None, "") else v, "in (0, 1] (p = 0 protects no output of V_S)")

    @validator("sensitive_fraction", pre=True, allow_reuse=True)
    def _sensitive_fraction(cls, v: Any) -> float:
        return _fraction("sensitive_fraction", DEFAULT_FRACTION if v in (None, "") else v, "in (0, 1]")

    @validator("sensitive_words", pre=True, allow_reuse=True)
    def _sensitive_words(cls, v: Any) -> str | None:
        if v in (None, ""):
            return None
        if Path(str(v)).is_file():
            read_word_list(str(v), "sensitive words file")  # a bad file refused here, before Spark starts
        return str(v)

    @classmethod
    def axis_names(cls) -> list[str]:
        return ["p", "sensitive_fraction"]

    def ledger_cost_terms(self) -> dict[str, Any]:
        """p: the guarantee's ln(1/p) term (UMLDP)."""
        return {**super().ledger_cost_terms(), "p": self.p}

    def corpus_counts_artefact(self) -> str | None:
        """``CORPUS_COUNTS`` under ``sensitive_from_corpus``: V_S is then ranked by the input corpus's counts."""
        return CORPUS_COUNTS if self.sensitive_from_corpus else None

    def axes(self) -> dict[str, Any]:
        out: dict[str, Any] = {"p": self.p}
        if self.sensitive_words is None:
            out["sensitive_fraction"] = self.sensitive_fraction
        return out

    @validator("sensitive_from_corpus", pre=True, allow_reuse=True)
    def _sensitive_from_corpus(cls, v: Any) -> bool:
        if v in (None, ""):
            return False
        if isinstance(v, bool):
            return v
        word = str(v).strip().lower()
        if word not in ("true", "false"):
            raise ConfigError(f"sensitive_from_corpus must be true or false, got {v!r}")
        return word == "true"

    @property
    def artefact_name(self) -> str:
        if self.sensitive_words is not None:
            return f"santext-plus/protected/words={self.sensitive_words}"
        if self.sensitive_from_corpus:
            return f"santext-plus/protected/corpus/fraction={self.sensitive_fraction!r}"
        return f"santext-plus/protected/fraction={self.sensitive_fraction!r}"

    def bound_unit(self, space: Space) -> dict[str, Any]:
        """The embedding's Euclidean distance, for outputs in V_S: the protected set is part of the unit. A
        fraction of W is named by the vocabulary; a set from a word file or the corpus is this release's own
        (``"release"``: the ledger names the run, and never publishes a digest of the set)."""
        unit = {"distance": "euclidean", "embedding": space.embedding_digest}
        if self.sensitive_words is None and not self.sensitive_from_corpus:
            return {**unit, "protected": f"fraction={self.sensitive_fraction!r}", "vocabulary": space.vocabulary_digest}
        return {**unit, "protected": "release"}

    def protected(self, space: Space) -> np.ndarray:
        """V_S: sorted positions in W (computed on the driver, shipped in the bundle)."""
        return space.artefact(self.artefact_name, lambda: protected_positions(space, self))

    def prepare(self, space: Space) -> list[str]:
        self.protected(space)
        return [self.artefact_name]

    def build(self, space: Space) -> WordMechanism:
        return SanTextPlusSampler(space, self, self.protected(space))

    def guarantee(self, space: Space) -> str:
        size = len(self.protected(space))
        return (
            f"For any two texts of equal length n (in tokens) and any output whose words are all in the protected "
            f"set V_S ({size} of the V = {space.size} words: {self._source()}), the probabilities differ by at most "
            f"a factor exp({self.epsilon:g} * sum_i ||phi(w_i) - phi(w'_i)||_2 + n * ln(1/{self.p:g})) (Euclidean "
            f"distance of the embedding; UMLDP). SanText+ draws each protected or out-of-vocabulary word's output "
            f"y in V_S with probability proportional to exp(-{self.epsilon:g} * d(w, y) / 2); a non-sensitive "
            f"word is drawn the same way with probability p = {self.p:g} and released unchanged otherwise. An "
            f"output outside V_S is the input word itself: it is not protected."
        )

    def outside(self) -> list[str]:
        notes = [
            f"santext-plus: non-sensitive words (W outside the protected set) are released verbatim with "
            f"probability 1 - p = {1 - self.p:g}, by design"
        ]
        if self.sensitive_from_corpus:
            notes.append(
                "santext-plus sensitive_from_corpus: the protected set was derived from the private corpus (its least "
                "frequent words), so which words are protected, and through it the output, can reveal the corpus's "
                "rare words: the guarantee does not cover this"
            )
        return notes

    def _source(self) -> str:
        if self.sensitive_words is not None:
            return f"the words of {self.sensitive_words} that are in W"
        if self.sensitive_from_corpus:
            return (
                f"the least frequent {self.sensitive_fraction:g} of the words of W in the input corpus, by the "
                f"corpus's own counts: derived from the private data, outside the guarantee"
            )
        return f"the least frequent {self.sensitive_fraction:g} of W in the embedding's own frequency order"


def _fraction(name: str, v: Any, expected: str) -> float:
    try:
        value = math.nan if isinstance(v, bool) else float(v)
    except (TypeError, ValueError):
        value = math.nan
    if not 0.0 < value <= 1.0:
        raise ConfigError(f"{name} must be {expected}, got {v!r}")
    return value


def least_frequent_in_corpus(space: Space, counts: np.ndarray, fraction: float) -> np.ndarray:
    """The ⌊fraction·n⌋ (≥ 1) least frequent of the n words of W with a positive count (sorted positions), ties
    to the rarer in the embedding's order (the larger row); a ConfigError when no word of W occurs."""
    present = np.flatnonzero(counts > 0)
    if not present.size:
        raise ConfigError(
            "no word of the output vocabulary occurs in the input corpus: the protected set would be empty "
            "(check --columns, or use --sensitive-fraction alone or --sensitive-words)"
        )
    ranked = present[np.lexsort((-space.vocab_rows[present], counts[present]))]
    return np.sort(ranked[: max(1, int(fraction * len(present)))])


def protected_positions(space: Space, spec: SanTextPlus) -> np.ndarray:
    """V_S as sorted positions in W: the least frequent ⌊fraction·V⌋ (≥ 1) of W in the embedding's row
    order, the least frequent in the input corpus (``sensitive_from_corpus``: the counts perturb put in the
    Space as ``CORPUS_COUNTS``), or the words of the spec's file that are in W (a ConfigError when none is)."""
    if spec.sensitive_from_corpus:

        def missing() -> np.ndarray:
            raise ConfigError(
                "sensitive_from_corpus needs the input corpus's word counts, which only perturb and release take "
                "(from their input): here use sensitive_fraction (the embedding's order) or sensitive_words"
            )

        return least_frequent_in_corpus(space, space.artefact(CORPUS_COUNTS, missing), spec.sensitive_fraction)
    if spec.sensitive_words is None:
        count = max(1, int(spec.sensitive_fraction * space.size))
        by_rank = np.argsort(space.vocab_rows, kind="stable")  # most frequent first
        return np.sort(by_rank[space.size - count :])
    path = Path(spec.sensitive_words)
    words = read_word_list(str(path), "sensitive words file")  # normalised as the tokenizer reads text
    positions = space.word_positions(words)
    if not len(positions):
        raise ConfigError(
            f"none of the {len(words)} words of {path} is in the output vocabulary: the protected set would be empty "
            "(check the file, or use --sensitive-fraction)"
        )
    if len(positions) < len(words):
        in_w = set(space.words.take(space.vocab_rows[positions]))
        warn_unmatched(str(path), "sensitive words file", in_w, "the output vocabulary")
    return positions


class SanTextPlusSampler(TruncatedExponential):
    """SanText over V_S (weights of V_N zero), after a coin of probability p for each token of V_N."""

    def __init__(self, space: Space, spec: SanTextPlus, protected: np.ndarray) -> None:
        super().__init__(space, spec, math.inf)
        self.p = spec.p
        self.mask = np.zeros(space.size, dtype=bool)
        self.mask[np.asarray(protected, dtype=np.int64)] = True

    def _weights(self, dist: np.ndarray) -> np.ndarray:
        """exp(−ε(d − c)/2) on V_S, 0 on V_N (c: each row's smallest distance to V_S)."""
        dist[:, ~self.mask] = np.inf
        dist -= dist.min(axis=1, keepdims=True)
        dist *= -self.epsilon / 2.0
        np.exp(dist, out=dist)
        return dist

    def verbatim_share(self, rows: np.ndarray) -> float:
        """The share of tokens of ``rows`` (each alike) released verbatim by design, whatever ε: 1 − p for
        each non-sensitive word."""
        return (1.0 - self.p) * float(self._kept(np.asarray(rows, dtype=np.int64))[1].mean())

    def verbatim_advice(self) -> tuple[str, str]:
        return (
            f"non-sensitive words are kept with probability 1 - p = {1 - self.p:g}",
            "raise --p, or protect more words with --sensitive-fraction",
        )

    def _kept(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(position in W, whether the word is non-sensitive) of each row."""
        pos, found = self.space.positions(rows)
        plain = found & ~self.mask[np.maximum(pos, 0)]
        return pos, plain

    def distribution(self, rows: np.ndarray) -> np.ndarray:
        rows = np.asarray(rows, dtype=np.int64)
        out = super().distribution(rows)
        pos, plain = self._kept(rows)
        at = np.flatnonzero(plain)
        out[at] *= self.p
        out[at, pos[at]] += 1.0 - self.p
        return out

    def sample(self, rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        rows = np.asarray(rows, dtype=np.int64)
        flat = rows.reshape(-1)
        pos, plain = self._kept(flat)
        keep = plain & (rng.random(flat.size) >= self.p)
        out = np.empty(flat.size, dtype=np.int64)
        out[keep] = pos[keep]
        draw = np.flatnonzero(~keep)
        out[draw] = super().sample(flat[draw], rng)
        return out.reshape(rows.shape)
