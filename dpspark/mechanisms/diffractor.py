"""1-Diffractor (Meisenbacher, Chevli, Matthes 2024, arXiv 2405.01678): ``1-diffractor``.

The words of W are arranged once in a public 1-D list where neighbours are similar: a greedy
nearest-neighbour chain that starts at the most frequent word of W (the embedding's own order)
and steps each time to the nearest word not yet in the list (exact Euclidean distance of the
embedding, ties to the earlier position of W). A token w at list index i is released as the word
at a noisy index (``noise``), and an embedded word outside W takes the index of its nearest word of W:

- ``geometric`` (default): clip(i + G₁ − G₂, 0, V − 1), G₁, G₂ iid geometric of parameter
  p = 1 − e^{−ε}: the two-sided geometric mechanism, Pr[k] = (1 − α)/(1 + α)·α^{|k|} with α = e^{−ε},
  the mass beyond either end of the list on its end word (the authors' diffprivlib GeometricTruncated,
  sensitivity 1);
- ``tem``: TEM (Carvalho et al.) on the index distance: Pr[j | i] ∝ exp(−ε·min(|i − j|, γ)/2) over the
  list's positions, γ = ``position_gamma`` (the authors' default 5): the positions within γ by their distance, every
  other one alike (the authors' ⊥, score −γ + (2/ε)·ln|rest|, then a uniform position of the rest).

Several lists (``lists`` = L): the authors build one list per embedding model (five models, possibly
several lists each from random starting words) and release, per token, the candidate of one list picked
uniformly. With the run's one embedding, list l = 0..L − 1 here is the chain of the same embedding started
at the word of frequency rank ⌊l·V/L⌋ of W (list 0: the most frequent word, the one-list default): public
and deterministic. Chains from distant starts visit W in another order: on GloVe's first 3,000 words two of
three such lists share about two thirds of their adjacent pairs (the greedy chain links mutual nearest
neighbours from any start), and place the rest elsewhere.

Guarantee: ε·|i(x) − i(x′)|, metric DP in the distance between list positions (the two-sided
geometric is ε-DP per unit of index and clipping is post-processing; TEM's min(|i − j|, γ) is 1-Lipschitz
in i, the 2 paying for its normaliser). With L lists the output law is the lists' average, so the bound
holds with the largest distance over the lists, max_l |i_l(x) − i_l(x′)| (one candidate is released:
the lists do not compose). That is not a bound in the embedding's distance: two similar words can sit far
apart in a list, and ε is on another scale than CMP's. Its guarantee type is "rank".

The authors' implementation searches each step with an approximate faiss index and keeps English stop
words unchanged by default; this module searches exactly and replaces every word.

The lists are computed on the driver (``prepare``; ``chain``: one exact k-nearest-neighbour pass in
blocked GEMMs, shared by the lists, then a walk per list), kept content-addressed, shipped in the bundle;
sampling costs two geometric draws (geometric) or one uniform and at most one integer (tem) per token,
plus one integer for the list when L > 1.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, ClassVar, Literal

import numpy as np

from dpspark import params
from dpspark._pydantic import Field, root_validator, validator
from dpspark.errors import ConfigError
from dpspark.mechanisms.base import MechanismSpec, Space, WordMechanism
from dpspark.mechanisms.tem import _unset
from dpspark.mechanisms.truncated_gumbel import Screen

# Nearest neighbours kept per word for the chain; a word whose neighbours are all in the list already
# restarts with a search of the words left.
CHAIN_NEIGHBOURS = 32

QUERY_ROWS = 256  # rows of W per block of the neighbour lists
WORD_COLUMNS = 8192  # words per GEMM: 256 × 8192 float32 scores (8 MiB)
CLASSES = 256  # disjoint classes of W (position mod CLASSES) whose running maxima bound each row's k-th score
# A pass of neighbour_lists over R words costs about as much as searching REFRESH·R² words with _Left (measured
# on an Intel Xeon, one core: 1.6–2.2 ns per score in blocked GEMMs, 15–25 ns per word searched alone).
REFRESH = 0.15
_GONE = -1e30  # the score term −‖u‖²/2 of a padding column: never a candidate
# Steps of a cached list recomputed at random on load (``list_fault``), besides the first and the last.
SAMPLED_STEPS = 8
NOISES = ("geometric", "tem")
DEFAULT_GAMMA = 5.0  # TEM's truncation in list positions: the authors' default


class Diffractor(MechanismSpec):
    """Noise on positions in public 1-D lists of W: the two-sided geometric or TEM, one or several lists."""

    name: Literal["1-diffractor"] = "1-diffractor"
    noise: Literal["geometric", "tem"] = Field(
        default="geometric",
        description="geometric (default): the two-sided geometric on the list position, clipped to the list; "
        "tem: TEM on the distance |i - j| between list positions",
    )
    position_gamma: float | None = Field(
        default=None,
        description=f"TEM's truncation γ in list positions, > 0 (with noise tem; {DEFAULT_GAMMA:g}); not tem's gamma, "
        "which is in embedding distance",
    )
    lists: int = Field(
        default=1,
        description="L >= 1: public lists (chains from L words spread over the frequency order); each token's "
        "output is the candidate of one list picked uniformly (1)",
    )

    paper: ClassVar[str] = (
        "Meisenbacher, Chevli, Matthes: 1-Diffractor: Efficient and Utility-Preserving Text Obfuscation "
        "Leveraging Word-Level Metric Differential Privacy, 2024 (arXiv 2405.01678)"
    )
    guarantee_type: ClassVar[str] = "rank"
    summary: ClassVar[str] = "geometric or TEM noise on the word's position in nearest-neighbour chains of W"
    default_epsilons: ClassVar[tuple[float, ...]] = (0.05, 0.1, 0.2, 0.5, 1.0)

    renamed: ClassVar[dict[str, str]] = {"gamma": "position_gamma"}  # until the release after 0.x: see CHANGELOG
    artefact_name: ClassVar[str] = "1-diffractor/list/v1"  # the version: a change of the chain gets a new name

    @root_validator(pre=True, allow_reuse=True)
    def _gamma_with_tem(cls, values: dict[str, Any]) -> dict[str, Any]:
        noise = values.get("noise")
        if not _unset(values.get("position_gamma")) and (_unset(noise) or str(noise).strip().lower() != "tem"):
            raise ConfigError(
                "position_gamma is the truncation of 1-diffractor's TEM noise: give it with noise tem, or leave it "
                "out "
                f"(noise is {'geometric' if _unset(noise) else noise!r})"
            )
        return values

    @validator("noise", pre=True, allow_reuse=True)
    def _noise(cls, v: Any) -> str:
        value = "geometric" if _unset(v) else str(v).strip().lower()
        if value not in NOISES:
            raise ConfigError(f"noise must be one of {', '.join(NOISES)}, got {v!r}")
        return value

    @validator("position_gamma", pre=True, allow_reuse=True)
    def _gamma(cls, v: Any) -> float | None:
        if _unset(v):
            return None
        expected = "a positive finite number of list positions"
        return params.number("position_gamma", v, expected, lambda x: math.isfinite(x) and x > 0)

    @validator("lists", pre=True, allow_reuse=True)
    def _lists(cls, v: Any) -> int:
        if _unset(v):
            return 1
        value = params.number("lists", v, "a whole number >= 1", lambda x: math.isfinite(x) and x >= 1 and x == int(x))
        return int(value)

    def gamma_value(self) -> float:
        """γ of the TEM noise (the authors' 5 when not given)."""
        return DEFAULT_GAMMA if self.position_gamma is None else self.position_gamma

    def axes(self) -> dict[str, Any]:
        out: dict[str, Any] = {"noise": self.noise, "lists": self.lists}
        if self.noise == "tem":
            out["position_gamma"] = self.gamma_value()
        return out

    def unit_diameter(self, space: Space) -> float | None:
        """D in list positions: two words of a list of V words are at most V − 1 positions apart (in every list)."""
        return float(space.size - 1)

    def bound_unit(self, space: Space) -> dict[str, Any]:
        """ε per list position: the unit is the L public lists (their algorithm's name) of this vocabulary."""
        return {"positions": self.artefact_name, "lists": self.lists, "vocabulary": space.vocabulary_digest}

    def starts(self, space: Space) -> np.ndarray:
        """The first word of each list: the word of frequency rank ⌊l·V/L⌋ of W (the embedding's order), l = 0..L − 1;
        list 0 starts at the most frequent word."""
        by_rank = np.argsort(space.vocab_rows, kind="stable")
        return by_rank[np.arange(self.lists) * space.size // self.lists]

    def artefact_names(self, space: Space) -> list[str]:
        """One stored list per start (list 0 keeps the one-list name: a run with more lists reuses it)."""
        return [
            self.artefact_name if n == 0 else f"{self.artefact_name}/start={int(s)}"
            for n, s in enumerate(self.starts(space))
        ]

    def orders(self, space: Space) -> np.ndarray:
        """The lists (L × V): positions of W in each list's order (computed on the driver, shipped in the bundle).
        The lists share one neighbour pass (``neighbour_lists``)."""
        shared: dict[str, np.ndarray] = {}

        def compute(start: int) -> Callable[[], np.ndarray]:
            def run() -> np.ndarray:
                if "near" not in shared:
                    shared["near"] = neighbour_lists(space, min(CHAIN_NEIGHBOURS, space.size - 1))
                return chain(space, start=start, near=shared["near"])

            return run

        names, starts = self.artefact_names(space), self.starts(space)
        return np.stack(
            [
                space.artefact(
                    n, compute(int(s)), store=True, check=lambda order, s=int(s): list_fault(space, order, s)
                )
                for n, s in zip(names, starts)
            ]
        )

    def prepare(self, space: Space) -> list[str]:
        if self.lists > space.size:
            raise ConfigError(
                f"1-diffractor: lists = {self.lists} is more than the V = {space.size} words of the vocabulary (each "
                f"list starts at another word): give lists <= {space.size}"
            )
        self.orders(space)
        return self.artefact_names(space)

    def build(self, space: Space) -> WordMechanism:
        return DiffractorSampler(space, self, self.orders(space))

    def guarantee(self, space: Space) -> str:
        e = f"{self.epsilon:g}"
        if self.noise == "geometric":
            law = f"position clip(i(w) + G1 - G2, 0, V - 1), G1, G2 geometric with p = 1 - exp(-{e})"
        else:
            law = (
                f"position j drawn with probability proportional to exp(-{e} * min(|i(w) - j|, gamma) / 2), "
                f"gamma = position_gamma = {self.gamma_value():g} (TEM on list positions)"
            )
        if self.lists == 1:
            where = "i(w) the position of w in a public list of"
            lists = "The list is a greedy nearest-neighbour chain of the embedding from W's most frequent word."
        else:
            where = f"i(w) - i(w') the largest over {self.lists} public lists of the distance between the positions of"
            lists = (
                f"The lists are greedy nearest-neighbour chains of the embedding from the words of frequency rank "
                f"floor(l * V / {self.lists}), l = 0..{self.lists - 1}. Each token's output is the candidate of one "
                f"list picked uniformly: one candidate is released, so the bound is the largest over the lists, not "
                f"their sum."
            )
        return (
            f"For any two texts of equal length n (in tokens) and any output, the probabilities differ by at most a "
            f"factor exp({e} * sum_i |i(w_i) - i(w'_i)|), {where} the V = {space.size} words, where neighbours are "
            f"similar. This is metric DP in list positions, not in the embedding's distance. {lists} Each "
            f"candidate is the word at {law}."
        )


def chain(
    space: Space, neighbours: int = CHAIN_NEIGHBOURS, start: int | None = None, near: np.ndarray | None = None
) -> np.ndarray:
    """The greedy nearest-neighbour chain of W from ``start`` (a position of W; None: its most frequent word):
    positions of W in list order.

    Exact: each step takes the nearest word not yet in the list (float64 distances computed directly,
    ties to the lower position). The candidates are each word's ``neighbours`` nearest words among the
    words left when they were computed (``neighbour_lists``, exact; ``near``: those of all W, when already
    computed): the first not yet in the list is the nearest left. When all are in the list already, the
    words left are searched (``_Left``). Once those searches have cost as much as computing the lists of
    every word left among them (``REFRESH``: R searches of R words cost R²; one pass of blocked GEMMs,
    REFRESH·R²), the lists are computed so: a rent-or-buy rule, within twice the better of the two.
    """
    size = space.size
    k = min(neighbours, size - 1)
    visited = np.zeros(size, dtype=bool)
    order = np.empty(size, dtype=np.int64)
    screen = Screen(space)
    if near is None:
        near = neighbour_lists(space, k, screen)
    scanned = 0  # words searched since the lists were computed
    left = _Left(space, screen)
    current = int(np.argmin(space.vocab_rows)) if start is None else int(start)
    for i in range(size):
        order[i] = current
        visited[current] = True
        if i == size - 1:
            break
        candidates = near[current]
        free = candidates[~visited[candidates]]
        if len(free):
            current = int(free[0])
            continue
        count = size - i - 1
        if scanned >= REFRESH * count * count and count > 2 * k:
            rest = np.flatnonzero(~visited)
            near = np.zeros((size, k), dtype=np.int64)  # rows of listed words are never read again
            near[rest] = rest[neighbour_lists(Space(space.vectors, space.vocab_rows[rest]), k)]
            scanned = 0
        current = left.nearest(current, visited)
        scanned += len(left.positions)
    return order


def list_fault(
    space: Space, order: np.ndarray, start: int, samples: int = SAMPLED_STEPS, rng: np.random.Generator | None = None
) -> str | None:
    """Why ``order`` cannot be ``chain(space, start=start)``, or None: what a list read from the cache must
    show before it is used. It holds every word of W once and starts at ``start``; at its first, its last
    and ``samples`` steps drawn at random (the operating system's randomness: a forger cannot know which),
    the next word is the nearest of those not yet listed (float64 distances computed directly, ties to the
    lower position; ≈ V·d flops a step)."""
    order = np.asarray(order)
    size = space.size
    if order.dtype.kind not in "iu" or order.shape != (size,):
        return f"a {order.dtype} list of shape {order.shape}, not the {size} positions of W"
    if not np.array_equal(np.sort(order), np.arange(size)):
        return f"it does not hold the {size} words of W once"
    if int(order[0]) != start:
        return f"it does not start at its first word (position {start})"
    steps = max(0, size - 1)
    rng = rng or np.random.default_rng()
    for j in sorted({0, steps - 1, *rng.choice(steps, min(samples, steps), replace=False).tolist()} - {-1}):
        cand = np.sort(order[j + 1 :])
        diff = space.vocab64[cand] - space.vocab64[order[j]]
        exact = np.sqrt(np.einsum("ij,ij->i", diff, diff))
        if int(cand[np.lexsort((cand, exact))[0]]) != int(order[j + 1]):
            return f"its word {j + 1} is not the nearest of those left to word {j}"
    return None


def neighbour_lists(space: Space, k: int, screen: Screen | None = None) -> np.ndarray:
    """The k nearest other words of W to each word of W (V × k positions, by float64 distance computed
    directly, ties to the lower position): exact.

    Per block of ``QUERY_ROWS`` words, one float32 GEMM per ``WORD_COLUMNS`` words of W gives the scores
    ŝ(x, u) of ``Screen`` (each within ``bound`` of the exact score). The running maxima of
    ``CLASSES`` disjoint classes of W (positions mod CLASSES) are CLASSES distinct words, so the
    (k + 1)-th largest of them, L, is at most the (k + 1)-th largest score of the row (the word itself
    is one of its k + 1 nearest). A block keeps each (row, word) with ŝ ≥ L − 2·bound, L as known when
    the block is scored (it only grows): a superset of the words with ŝ ≥ ŝ₍ₖ₊₁₎ − 2·bound, which hold
    the exact k + 1 nearest. Those are re-ranked by their float64 distance.
    """
    size = space.size
    k = min(int(k), size - 1)
    screen = screen or Screen(space)
    width = min(WORD_COLUMNS, -(-size // CLASSES) * CLASSES)
    padded = -(-size // width) * width
    matrix = np.zeros((screen.dim + 1, padded), dtype=np.float32)
    matrix[:, :size] = screen.matrix
    matrix[-1, size:] = _GONE
    out = np.empty((size, k), dtype=np.int64)
    if k <= 0:
        return out
    for s in range(0, size, QUERY_ROWS):
        rows = np.arange(s, min(s + QUERY_ROWS, size))
        x = space.vocab64[rows]
        n = len(rows)
        q = np.ones((n, screen.dim + 1), dtype=np.float32)
        q[:, :-1] = x
        margin = 2.0 * screen.bound(np.sqrt(np.einsum("ij,ij->i", x, x)))
        best = np.full((n, CLASSES), -np.inf, dtype=np.float32)
        low = np.full(n, -np.inf)
        found: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        scores = np.empty((n, width), dtype=np.float32)
        for w in range(0, padded, width):
            np.matmul(q, matrix[:, w : w + width], out=scores)
            by_class = scores.reshape(n, width // CLASSES, CLASSES)
            top = by_class.max(axis=1)
            np.maximum(best, top, out=best)
            low = np.maximum(low, np.partition(best, CLASSES - k - 1, axis=1)[:, CLASSES - k - 1])
            limit = low - margin
            at, c = np.nonzero(top >= limit[:, None])  # the classes of this block with a word to keep
            value = by_class[at, :, c]
            hit, j = np.nonzero(value >= limit[at, None])
            found.append((at[hit], w + j * CLASSES + c[hit], value[hit, j]))
        at, cand, value = (np.concatenate(f) for f in zip(*found))
        order = np.lexsort((-value, at))
        at, cand, value = at[order], cand[order], value[order]
        start = np.searchsorted(at, np.arange(n))
        keep = value >= (value[start + k] - margin)[at]  # ŝ₍ₖ₊₁₎: every row holds its k + 1 largest
        at, cand = at[keep], cand[keep]
        keep = cand != rows[at]  # the word itself
        at, cand = at[keep], cand[keep]
        diff = space.vocab64[cand] - x[at]
        exact = np.sqrt(np.einsum("ij,ij->i", diff, diff))
        order = np.lexsort((cand, exact, at))
        at, cand = at[order], cand[order]
        rank = np.arange(len(at)) - np.searchsorted(at, at)
        take = rank < k
        out[rows[at[take]], rank[take]] = cand[take]
    return out


class _Left:
    """The words not yet in the chain, searched exactly for the nearest to one word: float32 scores of
    ``Screen`` over a copy of the words left (one matrix-vector product), every word within twice the
    bound of the best re-ranked in float64 (ties to the lower position). The copy is made again when half
    of its words have joined the list."""

    def __init__(self, space: Space, screen: Screen) -> None:
        self.space = space
        self.screen = screen
        self.positions = np.arange(space.size)
        self.matrix = np.ascontiguousarray(screen.matrix.T)

    def nearest(self, word: int, visited: np.ndarray) -> int:
        gone = visited[self.positions]
        if 2 * np.count_nonzero(gone) >= len(gone):
            self.positions = self.positions[~gone]
            self.matrix = self.matrix[~gone]
            gone = gone[~gone]
        x = self.space.vocab64[word]
        q = np.ones(self.screen.dim + 1, dtype=np.float32)
        q[:-1] = x
        scores = self.matrix @ q
        scores[gone] = -np.inf
        limit = scores.max() - 2.0 * self.screen.bound(np.sqrt(x @ x))
        cand = self.positions[scores >= limit]
        diff = self.space.vocab64[cand] - x
        exact = np.sqrt(np.einsum("ij,ij->i", diff, diff))
        return int(cand[np.lexsort((cand, exact))[0]])


class DiffractorSampler(WordMechanism):
    """Noise on list positions, one list per token picked uniformly; ``distribution`` and ``log_distribution`` exact.

    geometric: clip(i + G₁ − G₂, 0, V − 1). tem: position j with probability ∝ exp(−ε·min(|i − j|, γ)/2),
    drawn exactly by one uniform per token: the positions with |j − i| < γ by inverse CDF over the cumulative
    weights of their offsets, the others (each of weight exp(−εγ/2)) uniformly by a second integer draw.
    """

    def __init__(self, space: Space, spec: Diffractor, orders: np.ndarray) -> None:
        super().__init__(space, spec)
        self.orders = np.atleast_2d(np.asarray(orders, dtype=np.int64))
        self.ranks = np.empty_like(self.orders)
        for order, rank in zip(self.orders, self.ranks):
            rank[order] = np.arange(space.size)
        self.alpha = math.exp(-self.epsilon)
        self.noise = spec.noise
        self.gamma = spec.gamma_value()
        if self.noise == "tem":
            # offsets −r..r with |k| < γ, and the cumulative sums of their weights exp(−ε|k|/2)
            self.reach = int(min(math.ceil(self.gamma) - 1, space.size - 1))
            offsets = np.arange(-self.reach, self.reach + 1)
            self.cumulative = np.concatenate([[0.0], np.cumsum(np.exp(-self.epsilon / 2.0 * np.abs(offsets)))])

    @property
    def order(self) -> np.ndarray:
        """The first list (the only one by default)."""
        return self.orders[0]

    def ranks_of(self, rows: np.ndarray) -> np.ndarray:
        """The position of each embedding row in each list (L × n; a word outside W takes its nearest word's)."""
        rows = np.asarray(rows, dtype=np.int64)
        pos, found = self.space.positions(rows)
        if not found.all():
            pos = pos.copy()
            pos[~found] = self.space.exact.query(self.vectors[rows[~found]])
        return self.ranks[:, pos]

    def rank_of(self, rows: np.ndarray) -> np.ndarray:
        """The position of each embedding row in the first list."""
        return self.ranks_of(rows)[0]

    def rank_distance(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """The guarantee's distance between rows a and b: max over the lists of |i(a) − i(b)|."""
        return np.abs(self.ranks_of(a) - self.ranks_of(b)).max(axis=0)

    def sample(self, rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        rows = np.asarray(rows, dtype=np.int64)
        flat = rows.reshape(-1)
        n = flat.size
        if self.noise == "geometric":
            p = -math.expm1(-self.epsilon)
            noise = rng.geometric(p, n) - rng.geometric(p, n)
        ranks = self.ranks_of(flat)
        which = rng.integers(len(self.orders), size=n) if len(self.orders) > 1 else np.zeros(n, dtype=np.int64)
        at = ranks[which, np.arange(n)]
        if self.noise == "geometric":
            at = np.clip(at + noise, 0, self.space.size - 1)
        else:
            at = self._tem(at, rng)
        return self.orders[which, at].reshape(rows.shape)

    def _tem(self, at: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One TEM draw of a list position per token at positions ``at``."""
        size, reach = self.space.size, self.reach
        lo, hi = np.maximum(at - reach, 0), np.minimum(at + reach, size - 1)
        first, last = lo - at + reach, hi - at + reach + 1  # the tokens' offsets in ``cumulative``
        below = self.cumulative[first]
        near = self.cumulative[last] - below
        far = (size - (hi - lo + 1)) * math.exp(-self.epsilon * self.gamma / 2.0)
        u = rng.random(at.size) * (near + far)
        out = np.empty_like(at)
        inside = (u < near) | (far <= 0)  # a product rounded up to ``near`` stays inside when nothing is outside
        k = np.searchsorted(self.cumulative, below[inside] + u[inside], side="right") - 1
        out[inside] = at[inside] - reach + np.clip(k, first[inside], last[inside] - 1)
        outside = np.flatnonzero(~inside)
        if outside.size:
            t = rng.integers(0, size - (hi - lo + 1)[outside])
            out[outside] = np.where(t < lo[outside], t, t + (hi - lo + 1)[outside])
        return out

    def _log_by_position(self, i: np.ndarray) -> np.ndarray:
        """ln P(position j | position i) of one list (n × V, j in list order)."""
        size = self.space.size
        j = np.arange(size)[None, :]
        distance = np.abs(j - i[:, None]).astype(np.float64)
        if self.noise == "tem":
            log_w = -self.epsilon / 2.0 * np.minimum(distance, self.gamma)
            return log_w - np.log(np.exp(log_w).sum(axis=1, keepdims=True))  # the largest weight is 1: no overflow
        log_c = math.log(-math.expm1(-self.epsilon)) - math.log1p(self.alpha)  # ln((1 − α)/(1 + α))
        by_index = log_c - self.epsilon * distance
        if size > 1:
            tail = -math.log(-math.expm1(-self.epsilon))  # Σ_{m ≥ 0} α^m = 1/(1 − α)
            by_index[:, 0] += tail
            by_index[:, -1] += tail
        else:
            by_index[:, 0] = 0.0
        return by_index

    def log_distribution(self, rows: np.ndarray) -> np.ndarray:
        """ln P(u | w) exactly (n × V float64), the lists' laws averaged: geometric: ln c − ε|j − i| inside the
        list, the tails at its ends; tem: −ε·min(|j − i|, γ)/2 − ln Σ."""
        ranks = self.ranks_of(rows)
        out = None
        for order, i in zip(self.orders, ranks):
            one = np.empty((len(i), self.space.size))
            one[:, order] = self._log_by_position(i)
            out = one if out is None else np.logaddexp(out, one)
        if len(self.orders) > 1:
            out -= math.log(len(self.orders))
        return out

    def distribution(self, rows: np.ndarray) -> np.ndarray:
        return np.exp(self.log_distribution(rows))
