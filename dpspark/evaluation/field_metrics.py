"""The field's privacy metrics and the comparison at equal empirical privacy (pure numpy, no Spark).

The MLDP benchmark (Meisenbacher, Nandakumar, Klymenko, Matthes, "A Comparative Analysis of
Word-Level Metric Differential Privacy: Benchmarking the Privacy-Utility Trade-off", LREC-COLING
2024, arXiv 2404.03324) compares word mechanisms on five privacy metrics and a utility score:
perturbation percentage (PP), least-occurring words (LOW), cosine similarity (CS), the
plausible-deniability statistics Nw and Sw, and a Privacy-Utility Composite (PUC). This module
computes them from the lists and arrays that ``dpspark compare`` collects from Spark.

**Sources.** The paper's body (its metric section) could not be read where this module was written:
only its title page and abstract were reachable, and its code (github.com/sjmeis/MLDP, mldp-text)
holds the mechanisms, not the evaluation. The definitions below follow the metric names the
paper gives (PP, LOW, CS, Nw/Sw, PUC) and the summary of them in the dpspark issue that asked
for them ("the share of changed positions in the first N tokens", "the share of the 1,000
least-occurring words that survive", "25 words × 100 trials, Sw excluding the word itself").
Every choice the paper may have made otherwise is named in the docstring where it is made, so a
reader with the paper can check it. In particular **PUC here is dpspark's composite, not a
transcription of the paper's formula** (``PUC_DEFINITION``): do not compare its numbers with the
paper's PUC column.

**Shares, not percentages.** Every share is a float in [0, 1]; a report multiplies by 100.

**Partial sums.** Each ratio has a ``*_partial`` function that returns (numerator, denominator)
for a batch of documents (one Spark partition), ``combine`` adds such pairs and ``finish``
divides: the distributed figure equals the one-pass figure exactly.

**Tokens.** Documents are token lists (what the perturb step produced, one output token per input
token) or strings, which are split by ``dpspark.text.tokenize`` (GloVe's conventions, the same as
perturb). Pass token lists for output with placeholders: ``tokenize("[UNK]")`` is three tokens.

Nothing here logs a token or a text.
"""

from __future__ import annotations

import math
import os
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from dpspark.embeddings import WordRows, mean_token_vectors
from dpspark.errors import ConfigError, InputDataError
from dpspark.mechanisms.base import WordMechanism
from dpspark.rng import secure_generator
from dpspark.stats import exact_nw_sw
from dpspark.text import tokenize

Document = str | Sequence[str]
Partial = tuple[float, float]

# The benchmark's sizes (the summary of the paper).
LOW_WORDS = 1000
MLDP_WORDS = 25
MLDP_TRIALS = 100

# A token that is a word (has a letter or digit): the candidates of LOW.
_WORD = re.compile(r"\w")
_LETTER = re.compile(r"[^\W\d_]")
# GloVe's clitic tokens ("do" "n't", "john" "'s"): English, but in no word list as tokens.
CLITICS = frozenset({"n't", "'s", "'re", "'ve", "'ll", "'d", "'m"})


# ---- shared pieces -----------------------------------------------------------------------------


def is_word(token: str) -> bool:
    """A token with a letter or digit: a candidate of LOW (punctuation is not a word)."""
    return bool(_WORD.search(token))


def tokens_of(document: Document) -> list[str]:
    """A document's tokens: a string is split by ``dpspark.text.tokenize``, a sequence is taken as is."""
    if isinstance(document, str):
        return tokenize(document)[0]
    return list(document)


def _pairs(
    originals: Sequence[Document], perturbeds: Sequence[Document], aligned: bool = True
) -> Iterable[tuple[list[str], list[str]]]:
    """(original, perturbed) token lists; with ``aligned`` their positions must correspond one to one."""
    if len(originals) != len(perturbeds):
        raise InputDataError(
            f"{len(originals)} original documents but {len(perturbeds)} perturbed ones: pass the two "
            "columns of the same rows, in the same order"
        )
    for i, (a, b) in enumerate(zip(originals, perturbeds)):
        x, y = tokens_of(a), tokens_of(b)
        if aligned and len(x) != len(y):
            raise InputDataError(
                f"document {i}: {len(x)} original tokens but {len(y)} perturbed ones. PP and LOW compare "
                "positions, so each input token needs exactly one output token: pass the perturb step's "
                "token lists (not re-tokenised text, where a placeholder such as [UNK] splits in three), "
                "and use an OOV policy other than drop (or aligned=False for outputs that are bags of words)"
            )
        yield x, y


def _kept(x: list[str], y: list[str], aligned: bool) -> list[bool]:
    """For each original token, whether it is released: at its position (``aligned``), or else as a
    bag of words (SynTF's synthetic documents: an occurrence is kept while the output still holds an
    unmatched copy of the word, the multiset intersection)."""
    if aligned:
        return [a == b for a, b in zip(x, y)]
    left = Counter(y)
    kept = []
    for a in x:
        kept.append(left[a] > 0)
        left[a] -= 1 if left[a] > 0 else 0
    return kept


def combine(parts: Iterable[Partial]) -> Partial:
    """The sum of (numerator, denominator) pairs (one per partition)."""
    num = den = 0.0
    for n, d in parts:
        num += n
        den += d
    return num, den


def finish(part: Partial) -> float:
    """numerator / denominator; NaN when nothing was counted (a share of nothing is undefined)."""
    num, den = part
    return float(num) / float(den) if den else math.nan


# ---- PP: perturbation percentage ---------------------------------------------------------------


def perturbation_partial(
    originals: Sequence[Document], perturbeds: Sequence[Document], first: int | None = None, aligned: bool = True
) -> Partial:
    """(changed positions, compared positions) over the first ``first`` tokens of each document.

    PP (MLDP benchmark, privacy metrics): the share of token positions whose output differs from
    the input. The issue summarises it as "the share of changed positions in the first N tokens";
    whether the paper's N counts tokens of the corpus or of each document could not be checked.
    This function takes each document's first N (``first``; None: all of them), which a Spark
    partition computes on its own rows; ``perturbation_corpus_partial`` takes the first N of the
    corpus. Both are the same figure when N is None. A position counts as changed when the output
    token is not the input token (an OOV token replaced by a placeholder is changed). With
    ``aligned=False`` (outputs that are bags of words, SynTF's documents) a token counts as
    changed when the output holds no unmatched copy of it (``_kept``).
    """
    if first is not None and first < 1:
        raise ConfigError(f"first: the number of tokens per document must be at least 1, got {first}")
    changed = compared = 0
    for x, y in _pairs(originals, perturbeds, aligned):
        n = len(x) if first is None else min(first, len(x))
        changed += n - sum(_kept(x, y, aligned)[:n])
        compared += n
    return changed, compared


def perturbation_corpus_partial(originals: Sequence[Document], perturbeds: Sequence[Document], first: int) -> Partial:
    """(changed, compared) over the first ``first`` tokens of the corpus, documents taken in the given
    order (the driver's reading of PP; needs the rows in a fixed order, e.g. by row id)."""
    if first < 1:
        raise ConfigError(f"first: the number of corpus tokens must be at least 1, got {first}")
    changed = compared = 0
    for x, y in _pairs(originals, perturbeds):
        n = min(first - compared, len(x))
        changed += sum(a != b for a, b in zip(x[:n], y[:n]))
        compared += n
        if compared >= first:
            break
    return changed, compared


def perturbation_percentage(
    originals: Sequence[Document], perturbeds: Sequence[Document], first: int | None = None
) -> float:
    """PP as a share in [0, 1] (see ``perturbation_partial``): 0 when nothing changed."""
    return finish(perturbation_partial(originals, perturbeds, first))


# ---- LOW: least-occurring words ----------------------------------------------------------------


def word_counts(documents: Iterable[Document]) -> Counter:
    """Occurrences of each word token (a token with a letter or digit) in the original documents:
    LOW's first pass. Counters of partitions add up (``Counter.update`` / ``+``)."""
    counts: Counter = Counter()
    for doc in documents:
        counts.update(t for t in tokens_of(doc) if is_word(t))
    return counts


def least_occurring(counts: Mapping[str, int], n: int = LOW_WORDS) -> frozenset[str]:
    """The ``n`` least-occurring words of the original corpus: lowest count first, ties broken by the
    word's code points (deterministic and public; which n of the many once-seen words the paper kept
    could not be checked). Fewer than n words: all of them."""
    if n < 1:
        raise ConfigError(f"LOW: the number of least-occurring words must be at least 1, got {n}")
    ranked = sorted(counts.items(), key=lambda kv: (kv[1], kv[0]))
    return frozenset(w for w, _ in ranked[:n])


def low_partial(
    originals: Sequence[Document],
    perturbeds: Sequence[Document],
    rare: frozenset[str] | set[str],
    aligned: bool = True,
) -> Partial:
    """(occurrences released unchanged, occurrences) of the ``rare`` words in the original documents.

    LOW (MLDP benchmark, privacy metrics): how many of the corpus's least-occurring words, the
    likeliest identifiers, survive perturbation. The issue summarises it as "the share of the
    1,000 least-occurring words that survive"; read here by position: an occurrence survives when
    the output token at its position is the word itself. Most of these words occur once, so the
    share of occurrences is close to the share of words. Noise off: 1. ``aligned=False``: kept as
    a bag of words (``_kept``), for SynTF's documents.
    """
    survived = occurrences = 0
    for x, y in _pairs(originals, perturbeds, aligned):
        for a, kept in zip(x, _kept(x, y, aligned)):
            if a in rare:
                occurrences += 1
                survived += kept
    return survived, occurrences


def least_occurring_survival(
    originals: Sequence[Document], perturbeds: Sequence[Document], n: int = LOW_WORDS
) -> float:
    """LOW in one pass (both passes of ``word_counts``/``least_occurring`` and ``low_partial``)."""
    rare = least_occurring(word_counts(originals), n)
    return finish(low_partial(originals, perturbeds, rare))


# ---- CS: cosine similarity of original and perturbed document ----------------------------------

Encoder = Callable[[Sequence[Sequence[str]]], np.ndarray]


def mean_vector_encoder(vectors: np.ndarray, words: WordRows) -> Encoder:
    """Documents (token lists) → the mean of their tokens' word vectors (n × d float64,
    ``dpspark.embeddings.mean_token_vectors``); a document without any embedded token gets a zero
    row (its cosine is undefined and left out).

    Args:
        vectors: the embedding's V × d vectors (``Embeddings.vectors``).
        words: the embedding's words (``Embeddings.word_rows``).
    """
    return lambda documents: mean_token_vectors([list(d) for d in documents], vectors, words)


def glove_encoder(embeddings) -> Encoder:
    """The default CS encoder: mean word vector of ``dpspark.embeddings.Embeddings`` (GloVe by default)."""
    return mean_vector_encoder(embeddings.vectors, embeddings.word_rows)


def sentence_encoder(model: str) -> Encoder:
    """A sentence encoder (``sentence-transformers``) for CS, as the paper's SBERT-style reading of it,
    used only where the package and the model are already installed: nothing is downloaded (the
    model is loaded with ``local_files_only``, and the Hugging Face hub is put offline before the
    import for the process, HF_HUB_OFFLINE=1). Documents are their tokens joined by spaces.

    Raises:
        ConfigError: sentence-transformers is not installed, or the model is not in the local cache.
    """
    os.environ["HF_HUB_OFFLINE"] = "1"  # before the import: huggingface_hub reads it when imported
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:
        raise ConfigError(
            "CS with a sentence encoder needs sentence-transformers (pip install sentence-transformers) and "
            f"the model {model!r} in the local cache; without them CS uses the mean word vector"
        ) from exc
    try:
        encoder = SentenceTransformer(model, local_files_only=True)
    except Exception as exc:  # the library raises OSError, ValueError or its own errors for a missing model
        raise ConfigError(
            f"the sentence encoder {model!r} is not in the local model cache and nothing is downloaded: "
            "copy the model there first, or leave the encoder unset to use the mean word vector"
        ) from exc

    def encode(documents: Sequence[Sequence[str]]) -> np.ndarray:
        return np.asarray(encoder.encode([" ".join(d) for d in documents]), dtype=np.float64)

    return encode


def cosine_similarities(originals: Sequence[Document], perturbeds: Sequence[Document], encode: Encoder) -> np.ndarray:
    """Per document, cos(encode(original), encode(perturbed)); NaN where either encoding is zero.

    CS (MLDP benchmark, privacy metrics): how close in meaning the perturbed document stays to the
    original (1: same direction; lower: more changed). The paper encodes documents with a
    sentence encoder; dpspark's default is the mean GloVe vector (``glove_encoder``), a sentence
    encoder where one is installed (``sentence_encoder``). Unlike PP and LOW, CS does not need
    aligned positions.
    """
    if len(originals) != len(perturbeds):
        raise InputDataError(
            f"{len(originals)} original documents but {len(perturbeds)} perturbed ones: pass the two "
            "columns of the same rows, in the same order"
        )
    if not len(originals):
        return np.zeros(0)
    a = np.asarray(encode([tokens_of(d) for d in originals]), dtype=np.float64)
    b = np.asarray(encode([tokens_of(d) for d in perturbeds]), dtype=np.float64)
    na, nb = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
    ok = (na > 0) & (nb > 0)
    cos = np.full(len(a), np.nan)
    cos[ok] = np.einsum("ij,ij->i", a[ok], b[ok]) / (na[ok] * nb[ok])
    return np.clip(cos, -1.0, 1.0)


def cosine_partial(originals: Sequence[Document], perturbeds: Sequence[Document], encode: Encoder) -> Partial:
    """(sum of the defined cosines, their number): CS averaged over documents, by partition."""
    cos = cosine_similarities(originals, perturbeds, encode)
    ok = ~np.isnan(cos)
    return float(cos[ok].sum()), int(ok.sum())


def cosine_similarity(originals: Sequence[Document], perturbeds: Sequence[Document], encode: Encoder) -> float:
    """CS: the mean over documents of ``cosine_similarities`` (documents without a vector left out)."""
    return finish(cosine_partial(originals, perturbeds, encode))


# ---- dictionary share --------------------------------------------------------------------------


@dataclass(frozen=True)
class WordList:
    """A set of lower-case English words and where it came from (for the report)."""

    words: frozenset[str]
    source: str

    def __contains__(self, token: object) -> bool:
        return token in self.words


def english_words(fallback: Sequence[str] | None = None, top: int = 50_000) -> WordList:
    """A public English word list available offline.

    The list of ``pyspellchecker`` (MIT licence, a registry package with no dependencies): 160,572
    lower-case English words with inflections, contractions and common names, built from
    OpenSubtitles frequencies (``pip install pyspellchecker``). Where it is not installed, the
    ``top`` most frequent alphabetic words of ``fallback`` (an embedding's words in its frequency
    order, e.g. ``Embeddings.words`` of GloVe), and the source says so.

    Raises:
        ConfigError: pyspellchecker is not installed and no fallback was given.
    """
    try:
        from spellchecker import SpellChecker
    except ImportError:
        if fallback is None:
            raise ConfigError(
                "no English word list: install pyspellchecker (pip install pyspellchecker), or pass the "
                "embedding's words as the fallback"
            ) from None
        words = [w for w in fallback if w.isalpha()][:top]
        return WordList(
            frozenset(w.lower() for w in words), f"the embedding's {len(words):,} most frequent alphabetic words"
        )
    import spellchecker

    words = frozenset(w.lower() for w in SpellChecker(language="en").word_frequency.keys())
    return WordList(words, f"pyspellchecker {spellchecker.__version__} English list ({len(words):,} words)")


def is_dictionary_token(token: str, words: WordList | frozenset[str] | set[str]) -> bool:
    """A token reads as English: a listed word, a clitic ("n't", "'s"), punctuation, or a number."""
    return token in words or token in CLITICS or not _LETTER.search(token)


def dictionary_partial(documents: Iterable[Document], words: WordList | frozenset[str] | set[str]) -> Partial:
    """(dictionary tokens, tokens) of ``documents`` (see ``is_dictionary_token``)."""
    hits = total = 0
    for doc in documents:
        toks = tokens_of(doc)
        hits += sum(is_dictionary_token(t.lower(), words) for t in toks)
        total += len(toks)
    return hits, total


def dictionary_share(documents: Iterable[Document], words: WordList | frozenset[str] | set[str]) -> float:
    """The share of tokens that are dictionary words: of the output, how much still reads as English.
    Report it beside the same share of the original documents (its ceiling)."""
    return finish(dictionary_partial(documents, words))


# ---- MLDP Nw and Sw ----------------------------------------------------------------------------


def mldp_words(vocab_rows: np.ndarray, n: int = MLDP_WORDS, rng: np.random.Generator | None = None) -> np.ndarray:
    """The words Nw/Sw are measured on: ``n`` rows of the output vocabulary drawn uniformly without
    replacement (sorted). The benchmark's 25 words; that the paper drew them at random from the
    vocabulary (rather than taking the most frequent) could not be checked. The vocabulary is
    public, so the draw reveals nothing; pass a seeded ``rng`` for a reproducible table."""
    if n < 1:
        raise ConfigError(f"MLDP Nw/Sw: the number of words must be at least 1, got {n}")
    rows = np.asarray(vocab_rows, dtype=np.int64)
    if n >= len(rows):
        return np.sort(rows)
    rng = secure_generator() if rng is None else rng
    return np.sort(rng.choice(rows, n, replace=False))


@dataclass(frozen=True)
class Deniability:
    """Nw and Sw of ``trials`` runs per word, the MLDP benchmark's way (Sw leaves the word itself out).

    Attributes:
        rows: the embedding rows of the words.
        trials: K, the runs per word.
        nw: per word, the runs whose output is the word itself (0..K).
        sw: per word, the distinct outputs other than the word itself (0..K).
        exact_nw, exact_sw: E[Nw] and E[Sw] from the mechanism's closed form, or None without one.
    """

    rows: np.ndarray
    trials: int
    nw: np.ndarray
    sw: np.ndarray
    exact_nw: np.ndarray | None = None
    exact_sw: np.ndarray | None = None

    @property
    def mean_nw(self) -> float:
        return float(self.nw.mean())

    @property
    def mean_sw(self) -> float:
        return float(self.sw.mean())

    @property
    def exact_mean_nw(self) -> float | None:
        return None if self.exact_nw is None else float(self.exact_nw.mean())

    @property
    def exact_mean_sw(self) -> float | None:
        return None if self.exact_sw is None else float(self.exact_sw.mean())


def mldp_nw_sw(
    mechanism: WordMechanism,
    rows: np.ndarray,
    trials: int = MLDP_TRIALS,
    rng: np.random.Generator | None = None,
) -> Deniability:
    """Nw and Sw the MLDP benchmark's way: each word perturbed ``trials`` times (100; on 25 words,
    ``mldp_words``); Nw = runs that return the word, Sw = distinct outputs *other than the word*.
    dpspark's own Sw (``dpspark.stats``) counts the word too: Sw_dpspark = Sw_MLDP + [Nw > 0].

    Where the mechanism has ``distribution()``, also the exact expectations:
    E[Nw] = K·p(w|w) and E[Sw] = Σ_{y≠w} 1 − (1 − p(y|w))^K (``dpspark.stats.exact_nw_sw`` less the
    term of y = w). Noise off (the identity): Nw = K, Sw = 0.
    """
    if trials < 1:
        raise ConfigError(f"MLDP Nw/Sw: trials must be at least 1, got {trials}")
    rows = np.asarray(rows, dtype=np.int64)
    rng = secure_generator() if rng is None else rng
    out = mechanism.vocab_rows[mechanism.sample_copies(rows, trials, rng)]  # n × K embedding rows
    same = out == rows[:, None]
    nw = same.sum(axis=1)
    sw = np.array([len(np.unique(o[~s])) for o, s in zip(out, same)], dtype=np.int64)
    # p = 1 (noise off, a group of one word) makes log1p(−p) = −inf, and −expm1(−inf) = 1 is exact.
    with np.errstate(divide="ignore"):
        exact = exact_nw_sw(mechanism, rows, trials)
        if exact is None:
            return Deniability(rows, trials, nw, sw)
        e_nw, e_sw_all = exact
        p_self = np.clip(e_nw / trials, 0.0, 1.0)
        e_self_seen = -np.expm1(trials * np.log1p(-p_self))  # P(w among the outputs) = 1 − (1 − p(w|w))^K
    return Deniability(rows, trials, nw, sw, e_nw, np.maximum(e_sw_all - e_self_seen, 0.0))


# ---- PUC ---------------------------------------------------------------------------------------

PUC_DEFINITION = (
    "PUC (dpspark's composite; the MLDP paper's own formula could not be checked): P = mean of five "
    "privacy scores in [0, 1], higher = more private: PP, 1 − LOW, 1 − max(CS, 0), 1 − Nw/K, Sw/K "
    "(MLDP Nw and Sw over K trials); U = utility / utility without perturbation; PUC = U · P."
)


@dataclass(frozen=True)
class Composite:
    """The privacy score P, the relative utility U and PUC = U · P of one setting (``PUC_DEFINITION``)."""

    privacy: float
    utility: float
    puc: float
    scores: dict[str, float] = field(default_factory=dict)


def puc(
    *,
    utility: float,
    baseline_utility: float,
    pp: float,
    low: float,
    cs: float,
    nw: float,
    sw: float,
    trials: int = MLDP_TRIALS,
) -> Composite:
    """The Privacy-Utility Composite of one setting, from its metric values (shares in [0, 1], Nw and
    Sw as mean counts over ``trials``).

    What it is: each privacy metric turned into a score in [0, 1] where higher means more private
    (PP; 1 − LOW; 1 − CS, CS below 0 counted as 0; 1 − Nw/K; Sw/K), P their mean, U the utility
    relative to the same task without perturbation (can exceed 1), PUC = U · P. Fixed ranges, not
    min-max over the compared settings, so a setting's PUC does not depend on what else is in the
    table. The paper's PUC combines its privacy metrics with utility too, but its normalisation and
    combination could not be checked here: this is dpspark's composite (``PUC_DEFINITION``).
    """
    values = {
        "utility": utility,
        "baseline_utility": baseline_utility,
        "pp": pp,
        "low": low,
        "cs": cs,
        "nw": nw,
        "sw": sw,
    }
    bad = [k for k, v in values.items() if v is None or not math.isfinite(v)]
    if bad:
        raise ConfigError(f"PUC needs finite metric values; missing or not finite: {', '.join(bad)}")
    if baseline_utility <= 0:
        raise ConfigError(f"PUC: the utility without perturbation must be positive, got {baseline_utility}")
    if trials < 1:
        raise ConfigError(f"PUC: trials must be at least 1, got {trials}")
    scores = {
        "pp": _unit(pp),
        "low": 1.0 - _unit(low),
        "cs": 1.0 - _unit(cs),
        "nw": 1.0 - _unit(nw / trials),
        "sw": _unit(sw / trials),
    }
    p = float(np.mean(list(scores.values())))
    u = utility / baseline_utility
    return Composite(p, u, u * p, scores)


def _unit(x: float) -> float:
    return min(1.0, max(0.0, float(x)))


# ---- equal empirical privacy -------------------------------------------------------------------


@dataclass(frozen=True)
class GridPoint:
    """One grid setting of a mechanism: ε, the privacy metric (non-decreasing in ε: top-1
    re-identification, Nw/K, ...) with its 95% interval, and the utility with its interval."""

    epsilon: float
    value: float
    value_low: float | None = None
    value_high: float | None = None
    utility: float | None = None
    utility_low: float | None = None
    utility_high: float | None = None


@dataclass(frozen=True)
class EqualPrivacy:
    """Where one mechanism meets a privacy target (``equal_privacy``).

    Attributes:
        target: the bound on the privacy metric (met when the metric is ≤ target).
        epsilon: the largest ε that meets it, by interpolation on the isotonic fit; None outside the grid.
        status: "between 5 and 10", "below the grid: ...", "above the grid: ...".
        bracket: the grid ε around the crossing (lo, hi); (None, lowest) below the grid, (highest, None) above.
        utility, utility_low, utility_high: the utility and its interval at ``epsilon`` (linear in log ε
            between the bracket's points; the interval's ends interpolated the same way, an approximation).
        refine: one or two ε to add to the grid to narrow the crossing (inside the bracket; beyond
            the grid's end when the target lies outside it).
        epsilon_conservative: the same crossing of the metric's upper 95% bound, where every point has one
            (None otherwise or outside the grid): the ε a reviewer can sign when the metric must not be understated.
        fitted: the isotonic fit of the metric at the grid ε (sorted), for the report.
    """

    target: float
    epsilon: float | None
    status: str
    bracket: tuple[float | None, float | None]
    utility: float | None = None
    utility_low: float | None = None
    utility_high: float | None = None
    refine: tuple[float, ...] = ()
    epsilon_conservative: float | None = None
    fitted: tuple[tuple[float, float], ...] = ()


def isotonic(values: Sequence[float], weights: Sequence[float] | None = None) -> np.ndarray:
    """The non-decreasing fit of ``values`` (in order) closest in weighted least squares: pool-adjacent-
    violators. Blocks that violate the order are replaced by their weighted mean."""
    y = np.asarray(values, dtype=np.float64)
    w = np.ones_like(y) if weights is None else np.asarray(weights, dtype=np.float64)
    if y.shape != w.shape or np.any(~np.isfinite(y)) or np.any(~(w > 0)):
        raise ConfigError("isotonic fit: values must be finite and weights positive, one per value")
    means: list[float] = []
    wsum: list[float] = []
    sizes: list[int] = []
    for yi, wi in zip(y, w):
        means.append(float(yi))
        wsum.append(float(wi))
        sizes.append(1)
        while len(means) > 1 and means[-2] > means[-1]:
            m2, w2, s2 = means.pop(), wsum.pop(), sizes.pop()
            total = wsum[-1] + w2
            means[-1] = (means[-1] * wsum[-1] + m2 * w2) / total
            wsum[-1] = total
            sizes[-1] += s2
    return np.repeat(means, sizes)


def _weights(points: Sequence[GridPoint]) -> np.ndarray | None:
    """Inverse variances from the 95% intervals (half-width / 1.96 as the standard error) where every
    point has a positive-width interval; None (equal weights) otherwise."""
    if any(p.value_low is None or p.value_high is None for p in points):
        return None
    se = np.array([(p.value_high - p.value_low) / (2 * 1.959964) for p in points], dtype=np.float64)
    if np.any(~np.isfinite(se)) or np.any(se <= 0):
        return None
    return 1.0 / se**2


def _merge(points: Sequence[GridPoint]) -> list[GridPoint]:
    """Points sorted by ε, repeated ε merged into one (values averaged)."""
    by_eps: dict[float, list[GridPoint]] = {}
    for p in points:
        by_eps.setdefault(float(p.epsilon), []).append(p)
    merged = []
    for eps in sorted(by_eps):
        group = by_eps[eps]
        if len(group) == 1:
            merged.append(group[0])
            continue

        def avg(name: str, group=group) -> float | None:
            vals = [getattr(p, name) for p in group]
            return None if any(v is None for v in vals) else float(np.mean(vals))

        merged.append(
            GridPoint(
                eps, *(avg(n) for n in ("value", "value_low", "value_high", "utility", "utility_low", "utility_high"))
            )
        )
    return merged


def _check(points: Sequence[GridPoint], target: float) -> None:
    if not points:
        raise ConfigError("equal privacy: a mechanism has no grid points; give at least one ε with its metric")
    if not math.isfinite(target):
        raise ConfigError(f"equal privacy: the target must be a finite number, got {target}")
    for p in points:
        if not (math.isfinite(p.epsilon) and p.epsilon > 0):
            raise ConfigError(f"equal privacy: ε must be a positive number, got {p.epsilon}")
        if p.value is None or not math.isfinite(p.value):
            raise ConfigError(f"equal privacy: the metric at ε = {p.epsilon:g} is missing or not finite ({p.value})")


def _crossing(eps: np.ndarray, fit: np.ndarray, target: float) -> tuple[int, float | None]:
    """(i, ε*): i the last grid index whose fitted value meets the target (−1: none), ε* the interpolated
    crossing between i and i + 1 (None when i is −1 or the last)."""
    meets = np.flatnonzero(fit <= target)
    if not len(meets):
        return -1, None
    i = int(meets[-1])
    if i == len(eps) - 1:
        return i, None
    lo, hi = math.log(eps[i]), math.log(eps[i + 1])
    t = (target - fit[i]) / (fit[i + 1] - fit[i])  # fit[i] ≤ target < fit[i + 1]
    return i, math.exp(lo + t * (hi - lo))


def log_interpolate(x: float, x0: float, x1: float, y0: float | None, y1: float | None) -> float | None:
    """Linear in log ε between (x0, y0) and (x1, y1) (y0 where x0 = x1)."""
    if y0 is None or y1 is None:
        return None
    if x0 == x1:
        return y0
    t = (math.log(x) - math.log(x0)) / (math.log(x1) - math.log(x0))
    return y0 + t * (y1 - y0)


def _round(x: float) -> float:
    return float(f"{x:.3g}")


def _refine(lo: float, hi: float, crossing: float) -> tuple[float, ...]:
    """The crossing and the geometric midpoint of the bracket, rounded to 3 significant digits, kept
    strictly inside it and apart (by more than 2% in ε) from each other and from its ends."""
    picks: list[float] = []
    for x in (_round(crossing), _round(math.sqrt(lo * hi))):
        if lo < x < hi and all(abs(math.log(x / y)) > 0.02 for y in (lo, hi, *picks)):
            picks.append(x)
    return tuple(sorted(picks))


def crossing(points: Sequence[GridPoint], target: float) -> EqualPrivacy:
    """Where one mechanism's privacy metric (non-decreasing in ε) reaches ``target`` (see ``equal_privacy``)."""
    _check(points, target)
    pts = _merge(points)
    eps = np.array([p.epsilon for p in pts])
    fit = isotonic([p.value for p in pts], _weights(pts))
    fitted = tuple(zip(eps.tolist(), fit.tolist()))
    i, e = _crossing(eps, fit, target)
    conservative = None
    highs = [p.value_high for p in pts]
    if all(h is not None and math.isfinite(h) for h in highs):
        conservative = _crossing(eps, isotonic(highs), target)[1]
    if i == -1:
        first = eps[0]
        return EqualPrivacy(
            target,
            None,
            f"below the grid: every ε in the grid exceeds the target; try ε < {first:g}",
            (None, float(first)),
            refine=(_round(first / 4), _round(first / 2)),
            fitted=fitted,
        )
    if e is None:  # the last grid point meets the target
        last = pts[-1]
        return EqualPrivacy(
            target,
            None,
            "above the grid: every grid ε meets it; try larger ε",
            (float(last.epsilon), None),
            utility=last.utility,
            utility_low=last.utility_low,
            utility_high=last.utility_high,
            refine=(_round(2 * last.epsilon), _round(4 * last.epsilon)),
            epsilon_conservative=conservative,
            fitted=fitted,
        )
    a, b = pts[i], pts[i + 1]
    return EqualPrivacy(
        target,
        e,
        f"between {a.epsilon:g} and {b.epsilon:g}",
        (float(a.epsilon), float(b.epsilon)),
        utility=log_interpolate(e, a.epsilon, b.epsilon, a.utility, b.utility),
        utility_low=log_interpolate(e, a.epsilon, b.epsilon, a.utility_low, b.utility_low),
        utility_high=log_interpolate(e, a.epsilon, b.epsilon, a.utility_high, b.utility_high),
        refine=_refine(a.epsilon, b.epsilon, e),
        epsilon_conservative=conservative,
        fitted=fitted,
    )


def equal_privacy(points: Mapping[str, Sequence[GridPoint]], target: float) -> dict[str, EqualPrivacy]:
    """Each mechanism's ε at a common privacy target, and its utility there.

    For each mechanism (label → grid points), the privacy metric is expected to be non-decreasing in
    ε (top-1 re-identification, Nw/K); sampling noise can break that, so the points are first fitted
    by isotonic regression (pool-adjacent-violators, weighted by the inverse variance of each
    point's 95% interval where every point has one). The target is met where the fit is ≤ target:
    the answer is the largest such ε, interpolated linearly in the metric and in log ε between the
    last grid point that meets the target and the first that does not. Utility is interpolated
    the same way between those two points (raw, not fitted: it need not be monotone).

    Outside the grid no ε is claimed: "below the grid" when even the smallest ε exceeds the target
    (``refine`` proposes ε/2 and ε/4 of the smallest), "above the grid" when every ε meets it
    (``refine``: 2ε and 4ε of the largest; the largest grid point's utility is a lower end of what the
    target allows). Inside the grid ``refine`` holds the crossing and the bracket's geometric midpoint,
    to evaluate and add to the grid.
    """
    return {name: crossing(pts, target) for name, pts in points.items()}
