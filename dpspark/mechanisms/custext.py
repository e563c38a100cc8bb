"""CusText and CusText+ (Chen, Mo, Wang, Chen, Nie, Wang, Cui, Findings of ACL 2023, arXiv 2207.01193).

**Mapping** (public, independent of ε, computed once per vocabulary on the driver): walk the words
of W in descending frequency (the embedding's own row order: GloVe ranks its words by corpus
frequency; never an order taken from the private text) and for each word x not yet assigned, take
its K most similar words among the words not yet assigned (x itself, the most similar to itself,
counts among them; ties go to the more frequent word) and give every one of them the **same output
set** Y = that K-set. The groups are disjoint and cover W; when K does not divide V the last group
holds the V mod K words left over, so it is smaller. The similarity s is the cosine (on unit
vectors, the default) or s(x, y) = −‖φ(x) − φ(y)‖₂ ("euclidean").

**Sampling**: u(x, y) = (s(x, y) − min_{y'∈Y_x} s(x, y'))/(max − min) ∈ [0, 1] (u ≡ 1 when max = min)
and Pr[y | x] = exp(ε·u(x, y)/2) / Σ_{y'∈Y_x} exp(ε·u(x, y')/2) for y ∈ Y_x, 0 elsewhere.

**Guarantee** (type "group", not metric DP): for x, x′ of the same group and every output y,
Pr[y | x] ≤ e^ε·Pr[y | x′]: u ∈ [0, 1], so the numerator changes by at most e^{ε/2} and the
normaliser by at most e^{ε/2}. Nothing holds across groups: two groups have disjoint outputs, so an
output discloses which group its input belongs to (the manifest says so). ε is on the [0, 1] utility
scale and is not comparable with the ε of the metric mechanisms.

An embedded input word outside W takes the group of its nearest word of W (Euclidean, the exact
search ``Space.exact``) and its own utilities u(x, ·) over that group: the bound above holds between
it and that group's words (in CusText+, when that nearest word is a stop word, its output is that
stop word).

**CusText+** releases stop words unchanged: the words of W in a public English list
(scikit-learn's, ``dpspark.mechanisms.stopwords``) are left out of the mapping, which is built over
the other words as above, and each is a group of its own, output with probability 1. Stop words are
therefore not protected (the manifest lists this).

Pitfalls of public versions (mechanisms.md): pypantera 1.0.2 builds an independent top-K set per
word, so x and x′ of one "group" have different supports (P(y | x) > 0 = P(y | x′): no finite ε), and
in cosine mode sorts ascending, sampling among the K **least** similar words. The authors' code
replaces numbers by round(x) + randint(0, 1000), a heuristic outside any DP accounting: not copied
here (a number is a word of W like any other).

**Exact and fast**: ``group_words`` builds the mapping with blocked float64 GEMMs (≈ (V/K)·V·d
flops) that screen each seed's candidates, then decides on similarities recomputed directly; it
equals the sequential construction (see its docstring). The mapping is a G×K table of W positions
(``Space.artefact``, kept on disk and shipped in the bundle); per ε the sampler keeps, for every
word of W, the cumulative probabilities of its K outputs (V×K float64), so a token costs one uniform
and a comparison with its K-row: O(1) in V.
"""

from __future__ import annotations

import hashlib
import math
from functools import cached_property
from typing import Any, ClassVar, Literal

import numpy as np

from dpspark._pydantic import Field, validator
from dpspark.errors import ConfigError
from dpspark.mechanisms.base import MechanismSpec, Space, WordMechanism
from dpspark.mechanisms.stopwords import ENGLISH_STOP_WORDS

DEFAULT_TOP_K = 20
SIMILARITIES = ("cosine", "euclidean")
# The most entries of one block of screening scores (float64: 128 MB) and of one chunk of K×d
# differences when utilities are computed (32 MB).
SCREEN_ENTRIES = 2**24
CHUNK_ENTRIES = 2**22
# Columns per chunk of the screening's selection (``_best``).
SELECT_CHUNK = 64
# The GEMM's screening scores are trusted to within this (relative to the scale of the scores).
MARGIN = 1e-9
# Tokens per gather of the K-rows in ``sample``.
TOKEN_CHUNK = 2**16
# Groups of a cached table recomputed at random on load (``grouping_fault``), besides the first and the last.
SAMPLED_GROUPS = 8


def similarity_space(vectors: np.ndarray, similarity: str) -> np.ndarray:
    """The float64 points the similarity is computed on: φ/‖φ‖ for cosine (a zero vector stays 0), φ for euclidean."""
    x = np.asarray(vectors, dtype=np.float64)
    if similarity == "cosine":
        norm = np.linalg.norm(x, axis=-1, keepdims=True)
        x = np.divide(x, norm, out=np.zeros_like(x), where=norm > 0)
    return x


def similarities(x: np.ndarray, y: np.ndarray, similarity: str) -> np.ndarray:
    """s(x, y) computed directly in float64 (no GEMM) on ``similarity_space`` points, broadcast over the
    leading axes: Σ x_i·y_i (cosine) or −√Σ (y_i − x_i)² (euclidean)."""
    if similarity == "cosine":
        return (y * x).sum(axis=-1)
    diff = y - x
    return -np.sqrt((diff * diff).sum(axis=-1))


def _exact_group(x: np.ndarray, alive: np.ndarray, seed: int, k: int, similarity: str) -> np.ndarray:
    """The seed's K most similar words among the alive ones (itself first; ties to the lower row), from
    the similarities to every alive word."""
    left = np.flatnonzero(alive)
    s = similarities(x[seed], x[left], similarity)
    s[left == seed] = np.inf
    if len(left) > k:
        keep = s >= np.partition(s, len(left) - k)[len(left) - k]  # the K largest, with any ties at the K-th
        left, s = left[keep], s[keep]
    return left[np.lexsort((left, -s))][:k]


def _best(scores: np.ndarray, m: int) -> np.ndarray:
    """The columns of the m largest entries of each row of ``scores`` (b×c, c > m), in no order.

    Through the maxima of chunks of SELECT_CHUNK columns: the m-th largest chunk maximum t is at most
    the m-th largest entry, so the m largest entries lie in the chunks whose maximum is ≥ t (typically
    m of them) and in the last c mod SELECT_CHUNK columns; only those are partitioned.
    """
    b, c = scores.shape
    whole = c // SELECT_CHUNK
    if whole <= m:
        return np.stack([np.argpartition(row, c - m)[c - m :] for row in scores])
    maxima = scores[:, : whole * SELECT_CHUNK].reshape(b, whole, SELECT_CHUNK).max(axis=2)
    floor = np.partition(maxima, whole - m, axis=1)[:, whole - m]
    span, tail = np.arange(SELECT_CHUNK), np.arange(whole * SELECT_CHUNK, c)
    out = np.empty((b, m), dtype=np.int64)
    for i in range(b):
        cols = np.concatenate([(np.flatnonzero(maxima[i] >= floor[i])[:, None] * SELECT_CHUNK + span).ravel(), tail])
        vals = scores[i, cols]
        out[i] = cols[np.argpartition(vals, len(vals) - m)[len(vals) - m :]]
    return out


def group_words(
    vectors: np.ndarray, top_k: int, similarity: str, block: int | None = None, extra: int | None = None
) -> np.ndarray:
    """CusText's mapping over ``vectors`` (n×d, row 0 the most frequent word): a G×K int64 table of row
    numbers, G = ⌈n/K⌉, one group per row in the order the groups are formed (the seed first, then by
    decreasing similarity), −1 padded (only the last group can be short).

    Sequentially: the first row not yet assigned is the seed; its group is the K rows not yet assigned
    with the largest s(seed, ·) (the seed itself first; ties to the lower row). Blocked, with the same
    result: the next ``block`` seeds (the first rows not yet assigned) are scored against every row not
    yet assigned by one float64 GEMM (unit vectors for cosine; 2x·y − ‖y‖² for euclidean), each keeps
    its M = K + ``extra`` best candidates, whose similarities are recomputed directly (``similarities``)
    and sorted; then the block's seeds are walked in order: a seed already assigned is skipped, else its
    group is the first K candidates still unassigned, provided the K-th of them is more similar than any
    word the screening left out could be (its M-th score plus a MARGIN for the GEMM's rounding). Else
    (the list ran out, or a near tie with the screening's cut) the seed's group is recomputed from its
    similarities to every unassigned row. Words assigned within the block only leave the lists, so the
    first K left are the seed's K best among all unassigned words.

    Args:
        vectors: the words in the public order (most frequent first).
        top_k: K ≥ 2.
        similarity: "cosine" or "euclidean".
        block: seeds per GEMM (default: 32, fewer where 32 rows of scores would exceed SCREEN_ENTRIES; at
            least 8). Larger blocks leave more seeds assigned before their turn and more lists run out.
        extra: candidates kept per seed beyond K (default K).
    """
    x = similarity_space(vectors, similarity)
    n, k = len(x), int(top_k)
    members = np.full((-(-n // k), k), -1, dtype=np.int64)
    if n == 0:
        return members
    m = k + (k if extra is None else int(extra))
    cosine = similarity == "cosine"
    sq = np.einsum("ij,ij->i", x, x)
    scale = 1.0 if cosine else float(sq.max())
    alive = np.ones(n, dtype=bool)
    cols, xc, sqc = np.arange(n), x, sq  # the screened rows: a superset of the unassigned ones
    g = 0
    while g < len(members):
        left = np.flatnonzero(alive)
        if len(left) <= m:  # the last few groups: from every unassigned word directly
            for seed in left:
                if alive[seed]:
                    group = _exact_group(x, alive, seed, k, similarity)
                    members[g, : len(group)] = group
                    alive[group] = False
                    g += 1
            break
        if len(left) < 0.75 * len(cols):  # drop the assigned rows from the GEMM's operand
            cols, xc, sqc = left, x[left], sq[left]
        c = len(cols)
        b = block or int(np.clip(SCREEN_ENTRIES // c, 8, 32))
        seeds = left[:b]
        rows = np.arange(len(seeds))
        screen = x[seeds] @ xc.T
        if not cosine:  # 2x·y − ‖y‖² = ‖x‖² − ‖x − y‖²: the larger, the nearer
            screen *= 2.0
            screen -= sqc
        screen[:, ~alive[cols]] = -np.inf
        screen[rows, np.searchsorted(cols, seeds)] = np.inf  # each seed heads its own list
        part = _best(screen, m)
        cut = screen[rows[:, None], part].min(axis=1)  # finite: more than m rows are unassigned
        cand = cols[part]
        s = similarities(x[seeds][:, None, :], x[cand], similarity)
        s[cand == seeds[:, None]] = np.inf
        # The largest s a row left out by the screening can have (its score ≤ cut, give or take the margin).
        if cosine:
            bound = cut + MARGIN
        else:
            bound = -np.sqrt(np.maximum(sq[seeds] - cut - MARGIN * (sq[seeds] + scale), 0.0))
        order = np.lexsort((cand, -s), axis=1)
        cand, s = np.take_along_axis(cand, order, axis=1), np.take_along_axis(s, order, axis=1)
        for i, seed in enumerate(seeds):
            if not alive[seed]:
                continue
            free = alive[cand[i]]
            group = cand[i][free][:k]
            if len(group) < k or not s[i][free][k - 1] > bound[i]:
                group = _exact_group(x, alive, seed, k, similarity)
            members[g, : len(group)] = group  # the last group may be short
            alive[group] = False
            g += 1
    return members


def grouping(space: Space, top_k: int, similarity: str, stop: np.ndarray | None = None) -> np.ndarray:
    """The mapping over W as a G×K int32 table of W positions (−1 padded; int32 halves the bundle and the
    cache file): ``group_words`` over the words of W that are not in ``stop`` (W positions), in the
    embedding's row order, then one group of one per stop word."""
    order = np.argsort(space.vocab_rows, kind="stable")  # W positions, most frequent first
    stop = np.unique(np.asarray([] if stop is None else stop, dtype=np.int64))
    if len(stop):
        order = order[~np.isin(order, stop)]
    in_order = len(order) == space.size and bool((np.diff(order) > 0).all())  # W itself: no copy
    groups = group_words(space.vocab64 if in_order else space.vocab64[order], top_k, similarity)
    members = np.where(groups >= 0, order[np.maximum(groups, 0)], -1)
    if len(stop):
        alone = np.full((len(stop), members.shape[1]), -1, dtype=np.int64)
        alone[:, 0] = stop
        members = np.concatenate([members, alone])
    return members.astype(np.int32)


def grouping_fault(
    space: Space,
    members: np.ndarray,
    top_k: int,
    similarity: str,
    stop: np.ndarray | None = None,
    samples: int = SAMPLED_GROUPS,
    rng: np.random.Generator | None = None,
) -> str | None:
    """Why ``members`` cannot be ``grouping(space, top_k, similarity, stop)``, or None: what a table read
    from the cache must show before it is used. Every group holds K words, but the last of the grouped
    words (the remainder) and the stop words' groups of one, padded at the end; the groups cover W once;
    the stop words are the groups of one; and the first, the last and ``samples`` groups drawn at random
    (the operating system's randomness: a forger cannot know which) are each the K words most similar to
    their seed among the words no earlier group holds, recomputed directly (≈ V·d flops a group)."""
    members = np.asarray(members)
    stop = np.unique(np.asarray([] if stop is None else stop, dtype=np.int64))
    n, k = space.size - len(stop), int(top_k)
    grouped = -(-n // k)
    if members.dtype.kind not in "iu" or members.shape != (grouped + len(stop), k):
        return f"a {members.dtype} table of shape {members.shape}, not {grouped + len(stop)} × {k} integers"
    valid = members >= 0
    sizes = valid.sum(axis=1)
    expected = np.full(len(members), k)
    expected[grouped - 1 : grouped] = n - (grouped - 1) * k
    expected[grouped:] = 1
    if (sizes != expected).any() or (valid != (np.arange(k) < sizes[:, None])).any():
        return f"its groups do not each hold K = {k} words (but one remainder group)"
    if not np.array_equal(np.sort(members[valid]), np.arange(space.size)):
        return f"its groups do not cover the {space.size} words of W once"
    if not np.array_equal(np.sort(members[grouped:, 0]), stop):
        return "its groups of one are not the stop words"
    order = np.argsort(space.vocab_rows, kind="stable")  # as ``grouping`` walks W
    order = order[~np.isin(order, stop)]
    at = np.empty(space.size, dtype=np.int64)
    at[order] = np.arange(n)  # a W position's place in the walk
    group = np.empty(n, dtype=np.int64)
    rows, cols = np.nonzero(valid[:grouped])
    group[at[members[rows, cols]]] = rows
    x = similarity_space(space.vocab64[order], similarity)
    rng = rng or np.random.default_rng()
    for g in sorted({0, grouped - 1, *rng.choice(grouped, min(samples, grouped), replace=False).tolist()}):
        alive = group >= g  # the words no earlier group holds
        again = order[_exact_group(x, alive, int(np.argmax(alive)), k, similarity)]
        if not np.array_equal(members[g, : sizes[g]], again):
            return f"group {g} is not the {k} words most similar to its seed"
    return None


def _parse_top_k(v: Any) -> int:
    if v is None or (isinstance(v, str) and not v.strip()):
        return DEFAULT_TOP_K
    try:
        value = math.nan if isinstance(v, bool) else float(v)
    except (TypeError, ValueError):
        value = math.nan
    if not (math.isfinite(value) and value == int(value) and value >= 2):
        raise ConfigError(f"top_k must be an integer K >= 2 (the words of each output group; 20 by default), got {v!r}")
    return int(value)


def _parse_similarity(v: Any) -> str:
    if v is None or (isinstance(v, str) and not v.strip()):
        return "cosine"
    value = str(v).strip().lower()
    if value not in SIMILARITIES:
        raise ConfigError(f"similarity must be one of {', '.join(SIMILARITIES)}, got {v!r}")
    return value


class CusText(MechanismSpec):
    """CusText: disjoint groups of K similar words, each word's output drawn within its own group."""

    name: Literal["custext"] = "custext"
    top_k: int = Field(default=DEFAULT_TOP_K, description="K >= 2: the words of each output group (20)")
    similarity: Literal["cosine", "euclidean"] = Field(
        default="cosine", description="cosine (default) or euclidean: the similarity that forms and scores the groups"
    )

    paper: ClassVar[str] = (
        "Chen, Mo, Wang, Chen, Nie, Wang, Cui: A Customized Text Sanitization Mechanism with Differential Privacy, "
        "Findings of ACL 2023"
    )
    guarantee_type: ClassVar[str] = "group"
    summary: ClassVar[str] = "exponential mechanism within disjoint groups of K similar words (ε-DP within a group)"
    default_epsilons: ClassVar[tuple[float, ...]] = (0.5, 1.0, 2.0, 4.0, 8.0)  # custext-plus inherits it

    _top_k = validator("top_k", pre=True, allow_reuse=True)(lambda cls, v: _parse_top_k(v))
    _similarity = validator("similarity", pre=True, allow_reuse=True)(lambda cls, v: _parse_similarity(v))

    def axes(self) -> dict[str, Any]:
        return {"top_k": self.top_k, "similarity": self.similarity}

    @property
    def artefact_name(self) -> str:
        return f"{self.name}/groups/v1/k={self.top_k}/{self.similarity}"  # v1: the mapping's version

    def bound_unit(self, space: Space) -> dict[str, Any]:
        """ε holds between two words of one group: the unit is the grouping (K, the similarity, the stop
        list of CusText+: the artefact's name) of this vocabulary's vectors."""
        return {"groups": self.artefact_name, "vocabulary": space.vocabulary_digest}

    def stop_positions(self, space: Space) -> np.ndarray:
        """The W positions released unchanged (none for CusText)."""
        return np.zeros(0, dtype=np.int64)

    def groups(self, space: Space) -> np.ndarray:
        """The mapping (``grouping``): computed on the driver, kept in the cache directory, shipped in the bundle."""
        return space.artefact(
            self.artefact_name,
            lambda: grouping(space, self.top_k, self.similarity, self.stop_positions(space)),
            store=True,
            check=self._check(space),
        )

    def _check(self, space: Space) -> Any:
        """What a cached mapping must show (``grouping_fault``), or None where the stop words cannot be named
        (custext-plus over a space without the embedding's words, never a driver's: the key's digest alone)."""
        try:
            stop = self.stop_positions(space)
        except ConfigError:
            return None
        return lambda members: grouping_fault(space, members, self.top_k, self.similarity, stop)

    def check_vocabulary(self, size: int) -> None:
        if self.top_k > size:
            raise ConfigError(
                f"top_k K = {self.top_k} exceeds the {size:,} words of the vocabulary that {self.name} groups: "
                f"choose K of at most {size:,} (20 by default), or a larger vocabulary"
            )

    def prepare(self, space: Space) -> list[str]:
        self.check_vocabulary(space.size - len(self.stop_positions(space)))
        self.groups(space)
        return [self.artefact_name]

    def build(self, space: Space) -> WordMechanism:
        return CusTextSampler(space, self, self.groups(space))

    def guarantee(self, space: Space) -> str:
        stop = len(self.stop_positions(space))
        sizes = (self.groups(space) >= 0).sum(axis=1)
        grouped = sizes[: len(sizes) - stop]  # the stop words' groups of one come last
        short = f" (the last of {grouped[-1]})" if len(grouped) and grouped[-1] < self.top_k else ""
        words = f"the {space.size - stop} words of W outside the stop list" if stop else f"the V = {space.size} words"
        return (
            f"For any two words x, x' of the same output group and any output y, Pr[y | x] <= "
            f"exp({self.epsilon:g}) * Pr[y | x'] (epsilon-DP within a group; over two texts of n tokens whose words "
            f"pairwise share groups, exp(n * {self.epsilon:g})). {self.name} splits {words} into "
            f"{len(grouped)} disjoint groups of K = {self.top_k} words{short} by {self.similarity} similarity, "
            f"walking W from its most frequent word; each word's output y is drawn from its own group with "
            f"probability proportional to exp({self.epsilon:g} * u(x, y) / 2), u the similarity rescaled to [0, 1] "
            f"within the group. Nothing holds across groups: the groups' outputs are disjoint, so an output "
            f"discloses its input's group. This epsilon is on a [0, 1] utility scale, not comparable with the "
            f"epsilon of metric-DP mechanisms." + self._stop_sentence(stop)
        )

    def _stop_sentence(self, count: int) -> str:
        return ""

    def outside(self) -> list[str]:
        return [
            f"{self.name}: each word's output group (its K = {self.top_k} possible outputs) is public and every "
            f"output discloses it: words of different groups are distinguishable, by design"
        ]


class CusTextPlus(CusText):
    """CusText+: CusText over the words of W outside a public English stop list; stop words released unchanged."""

    name: Literal["custext-plus"] = "custext-plus"  # type: ignore[assignment]

    summary: ClassVar[str] = "CusText with stop words (scikit-learn's English list) released unchanged"

    @property
    def artefact_name(self) -> str:
        """The stop list's digest is part of the name: another list is another mapping (and cache file)."""
        digest = hashlib.sha256("\n".join(sorted(ENGLISH_STOP_WORDS)).encode()).hexdigest()[:12]
        return f"{super().artefact_name}/stop={digest}"

    def stop_positions(self, space: Space) -> np.ndarray:
        """The W positions of the stop list's words that are in W."""
        if space.words is None:
            raise ConfigError("custext-plus needs the embedding's words (its stop list names words)")
        return space.word_positions(sorted(ENGLISH_STOP_WORDS))

    def _stop_sentence(self, count: int) -> str:
        return (
            f" The {count} words of W in scikit-learn's English stop list ({len(ENGLISH_STOP_WORDS)} words) are "
            f"each a group of one and released unchanged: they are not protected."
        )

    def outside(self) -> list[str]:
        return [
            *super().outside(),
            f"custext-plus: stop words (scikit-learn's English list of {len(ENGLISH_STOP_WORDS)} words) are released "
            f"verbatim, by design",
        ]


class CusTextSampler(WordMechanism):
    """Draws within each word's group: Pr[y | x] ∝ exp(ε·u(x, y)/2) over y ∈ Y_x.

    Args:
        space: the public space.
        spec: the CusText or CusText+ spec (ε, similarity).
        members: the mapping (``grouping``): G×K W positions, −1 padded, covering W once.
    """

    def __init__(self, space: Space, spec: CusText, members: np.ndarray) -> None:
        super().__init__(space, spec)
        self.members = np.asarray(members)
        self.similarity = spec.similarity
        valid = self.members >= 0
        group = np.full(space.size, -1, dtype=np.int64)
        group[self.members[valid]] = np.nonzero(valid)[0]
        if valid.sum() != space.size or (group < 0).any():
            raise ValueError(f"the group table of {spec.name} does not cover the {space.size} words of W once")
        self.group = group

    def group_of(self, rows: np.ndarray) -> np.ndarray:
        """The group id of each embedding row (a row outside W: its nearest word's group)."""
        rows = np.asarray(rows, dtype=np.int64)
        pos, found = self.space.positions(rows)
        pos[~found] = self._nearest(rows[~found])
        return self.group[pos]

    def _nearest(self, rows: np.ndarray) -> np.ndarray:
        if not len(rows):
            return np.zeros(0, dtype=np.int64)
        return self.space.exact.query(self.space.vectors[rows])

    @cached_property
    def _norms(self) -> np.ndarray:
        """‖φ(y)‖ for every y of W (cosine)."""
        return np.linalg.norm(self.space.vocab64, axis=1)

    def _similarities(self, x: np.ndarray, outputs: np.ndarray) -> np.ndarray:
        """s(x_i, y) for each input vector x_i (c×d float64) and the words y of W at outputs[i] (c×K, ≥ 0)."""
        y = self.space.vocab64[outputs]
        if self.similarity == "cosine":
            norms = self._norms[outputs]
            dots = np.einsum("ckd,cd->ck", y, similarity_space(x, "cosine"))
            return np.divide(dots, norms, out=np.zeros_like(dots), where=norms > 0)
        y -= x[:, None, :]
        return -np.sqrt(np.einsum("ckd,ckd->ck", y, y))

    def probabilities(self, x: np.ndarray, outputs: np.ndarray) -> np.ndarray:
        """P(outputs[i, j] | x_i) (n×K float64, 0 at the −1 padding) for input vectors x (n×d)."""
        out = np.zeros(outputs.shape, dtype=np.float64)
        step = max(1, CHUNK_ENTRIES // max(1, outputs.shape[1] * self.space.dim))
        for s in range(0, len(outputs), step):
            o = outputs[s : s + step]
            valid = o >= 0
            sim = self._similarities(np.asarray(x[s : s + step], dtype=np.float64), np.maximum(o, 0))
            low = np.where(valid, sim, np.inf).min(axis=1, keepdims=True)
            span = np.where(valid, sim, -np.inf).max(axis=1, keepdims=True) - low
            u = np.where(span > 0, (sim - low) / np.where(span > 0, span, 1.0), 1.0)
            w = np.where(valid, np.exp(0.5 * self.epsilon * (u - 1.0)), 0.0)  # ≤ 1: no overflow at any ε
            out[s : s + step] = w / w.sum(axis=1, keepdims=True)
        return out

    def _inputs(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(each row's outputs n×K, P of them n×K) from its own vector and its group."""
        outputs = self.members[self.group_of(rows)]
        return outputs, self.probabilities(np.asarray(self.space.vectors[rows], dtype=np.float64), outputs)

    @staticmethod
    def _cumulative(p: np.ndarray) -> np.ndarray:
        """Cumulative sums along each row, 1 from the last output of positive probability on (no draw reaches
        the padding or a float64 remainder above the sum)."""
        cumulative = np.cumsum(p, axis=1)
        last = (p > 0).shape[1] - 1 - np.argmax((p > 0)[:, ::-1], axis=1)
        cumulative[np.arange(p.shape[1])[None, :] >= last[:, None]] = 1.0
        return cumulative

    @cached_property
    def table(self) -> np.ndarray:
        """For every word of W, the cumulative probabilities of its group's outputs (V×K float64, this ε)."""
        outputs = self.members[self.group]
        return self._cumulative(self.probabilities(self.space.vocab64, outputs))

    def distribution(self, rows: np.ndarray) -> np.ndarray:
        """The exact P(y | w) for each row: n×V float64, zero outside the row's group."""
        rows = np.asarray(rows, dtype=np.int64)
        outputs, p = self._inputs(rows)
        out = np.zeros((len(rows), self.space.size), dtype=np.float64)
        i, j = np.nonzero(outputs >= 0)
        out[i, outputs[i, j]] = p[i, j]
        return out

    def sample(self, rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One output per token: one uniform, compared with the token's K-row of cumulative probabilities."""
        rows = np.asarray(rows, dtype=np.int64)
        flat = rows.reshape(-1)
        u = rng.random(flat.size)
        pos, found = self.space.positions(flat)
        out = np.empty(flat.size, dtype=np.int64)
        inside = np.flatnonzero(found)
        for s in range(0, len(inside), TOKEN_CHUNK):
            at = inside[s : s + TOKEN_CHUNK]
            j = (self.table[pos[at]] <= u[at, None]).sum(axis=1)
            out[at] = self.members[self.group[pos[at]], j]
        outside = np.flatnonzero(~found)
        if len(outside):  # embedded words outside W: one row per distinct word
            distinct, inverse = np.unique(flat[outside], return_inverse=True)
            outputs, p = self._inputs(distinct)
            j = (self._cumulative(p)[inverse] <= u[outside, None]).sum(axis=1)
            out[outside] = outputs[inverse, j]
        return out.reshape(rows.shape)
