"""1-Diffractor (Meisenbacher, Chevli, Matthes 2024, arXiv 2405.01678), with one list: ``1-diffractor``.

The words of W are arranged once in a public 1-D list where neighbours are similar: a greedy
nearest-neighbour chain that starts at the most frequent word of W (the embedding's own order)
and steps each time to the nearest word not yet in the list (exact Euclidean distance of the
embedding, ties to the earlier position of W). A token w at list index i is released as the word
at index clip(i + G₁ − G₂, 0, V − 1), with G₁, G₂ iid geometric of parameter p = 1 − e^{−ε}:
the two-sided geometric mechanism, Pr[k] = (1 − α)/(1 + α)·α^{|k|} with α = e^{−ε}, the mass beyond
either end of the list on its end word. An embedded word outside W takes the index of its nearest
word of W.

Guarantee: ε·|i(x) − i(x′)|, metric DP in the distance between list positions (the two-sided
geometric is ε-DP per unit of index, and clipping is post-processing). That is not a bound in the
embedding's distance: two similar words can sit far apart in the list, and ε is on another scale
than CMP's. Its guarantee type is "rank".

The authors' implementation builds one list per embedding model (five models, possibly several
lists each, from random starting words) with an approximate faiss search for each step, and picks
the output uniformly among the lists' candidates; it keeps English stop words unchanged by default
and offers TEM over the index distance instead of the geometric. This module has the one list of
the run's embedding, searched exactly, replaces every word, and has the geometric form only.

The list is computed on the driver (``prepare``), kept content-addressed, shipped in the bundle;
sampling costs two geometric draws per token.
"""

from __future__ import annotations

import math
from typing import ClassVar, Literal

import numpy as np

from dpspark.mechanisms.base import MechanismSpec, Space, WordMechanism

# Nearest neighbours kept per word for the chain (a full scan of the unvisited words when all are used).
CHAIN_NEIGHBOURS = 32


class Diffractor(MechanismSpec):
    """The two-sided geometric mechanism on positions in a public 1-D list of W."""

    name: Literal["1-diffractor"] = "1-diffractor"

    paper: ClassVar[str] = (
        "Meisenbacher, Chevli, Matthes: 1-Diffractor: Efficient and Utility-Preserving Text Obfuscation "
        "Leveraging Word-Level Metric Differential Privacy, 2024 (arXiv 2405.01678)"
    )
    guarantee_type: ClassVar[str] = "rank"
    summary: ClassVar[str] = "two-sided geometric noise on the word's index in a nearest-neighbour chain of W"

    artefact_name: ClassVar[str] = "1-diffractor/list/v1"  # the version: a change of the chain gets a new name

    def order(self, space: Space) -> np.ndarray:
        """The list: positions of W in list order (computed on the driver, shipped in the bundle)."""
        return space.artefact(self.artefact_name, lambda: chain(space), store=True)

    def prepare(self, space: Space) -> list[str]:
        self.order(space)
        return [self.artefact_name]

    def build(self, space: Space) -> WordMechanism:
        return DiffractorSampler(space, self, self.order(space))

    def guarantee(self, space: Space) -> str:
        return (
            f"For any two texts of equal length n (in tokens) and any output, the probabilities differ by at most a "
            f"factor exp({self.epsilon:g} * sum_i |i(w_i) - i(w'_i)|), i(w) the position of w in a public list of "
            f"the V = {space.size} words where neighbours are similar (a nearest-neighbour chain of the embedding). "
            f"This is metric DP in list positions, not in the embedding's distance. Each output is the word at "
            f"position clip(i(w) + G1 - G2, 0, V - 1), G1, G2 geometric with p = 1 - exp(-{self.epsilon:g})."
        )


def chain(space: Space, neighbours: int = CHAIN_NEIGHBOURS) -> np.ndarray:
    """The greedy nearest-neighbour chain of W from its most frequent word: positions of W in list order.

    Exact: each step takes the nearest word not yet in the list (float64 distances computed directly,
    ties to the lower position). The candidates are each word's nearest ``neighbours`` among the words
    left when they were computed (``_nearest_among``); when all of a word's are taken, the lists of
    every word left are computed again among the words left if their number has halved since, else
    the words left are scanned.
    """
    size = space.size
    visited = np.zeros(size, dtype=bool)
    order = np.empty(size, dtype=np.int64)
    near = _nearest_among(space, np.arange(size), neighbours)
    planned = size
    current = int(np.argmin(space.vocab_rows))
    for i in range(size):
        order[i] = current
        visited[current] = True
        if i == size - 1:
            break
        candidates = near[current][near[current] >= 0]
        free = candidates[~visited[candidates]]
        if len(free):
            current = int(free[0])
            continue
        rest = np.flatnonzero(~visited)
        if 2 * len(rest) <= planned and len(rest) > neighbours:
            near = np.full((size, near.shape[1]), -1, dtype=np.int64)
            near[rest] = _nearest_among(space, rest, neighbours)
            near[current] = _nearest_among(space, rest, neighbours, query=current)
            planned = len(rest)
            current = int(near[current][0])
            continue
        diff = space.vocab64[rest] - space.vocab64[current]
        current = int(rest[np.argmin(np.einsum("ij,ij->i", diff, diff))])
    return order


def _nearest_among(space: Space, among: np.ndarray, k: int, query: int | None = None) -> np.ndarray:
    """Positions (in W) of the k nearest words among ``among`` (sorted positions of W) to each of them, or
    to the word ``query`` alone: exact (``truncated_gumbel.nearest`` over the sub-vocabulary), the
    word itself excluded, ties to the lower position. Fewer than k words: padded with −1 after them."""
    from dpspark.mechanisms.truncated_gumbel import nearest

    sub = Space(space.vectors, space.vocab_rows[among])
    width, k = k, min(k + 1, len(among))
    queries = space.vocab_rows[among] if query is None else space.vocab_rows[[query]]
    out = np.empty((len(queries), k), dtype=np.int64)
    step = 4096
    for s in range(0, len(queries), step):
        out[s : s + step] = among[nearest(sub, queries[s : s + step], k)[0]]
    own = among if query is None else np.array([query])
    padded = np.full((len(queries), width), -1, dtype=np.int64)
    for n, (r, o) in enumerate(zip(out, own)):
        r = r[r != o][:width]  # the word itself (first, or absent for ``query``)
        padded[n, : len(r)] = r
    return padded


class DiffractorSampler(WordMechanism):
    """clip(i + G₁ − G₂, 0, V − 1) on list positions; ``distribution`` and ``log_distribution`` exact."""

    def __init__(self, space: Space, spec: MechanismSpec, order: np.ndarray) -> None:
        super().__init__(space, spec)
        self.order = np.asarray(order, dtype=np.int64)
        self.rank = np.empty(space.size, dtype=np.int64)
        self.rank[self.order] = np.arange(space.size)
        self.alpha = math.exp(-self.epsilon)

    def rank_of(self, rows: np.ndarray) -> np.ndarray:
        """The list index of each embedding row (of its nearest word of W when it is not in W)."""
        rows = np.asarray(rows, dtype=np.int64)
        pos, found = self.space.positions(rows)
        if not found.all():
            pos = pos.copy()
            pos[~found] = self.space.exact.query(self.vectors[rows[~found]])
        return self.rank[pos]

    def sample(self, rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        rows = np.asarray(rows, dtype=np.int64)
        flat = rows.reshape(-1)
        p = -math.expm1(-self.epsilon)
        noise = rng.geometric(p, flat.size) - rng.geometric(p, flat.size)
        at = np.clip(self.rank_of(flat) + noise, 0, self.space.size - 1)
        return self.order[at].reshape(rows.shape)

    def log_distribution(self, rows: np.ndarray) -> np.ndarray:
        """ln P(u | w) exactly (n × V float64): ln c − ε|j − i| inside the list, the tails at its ends."""
        i = self.rank_of(rows)[:, None]
        size = self.space.size
        j = np.arange(size)[None, :]
        log_c = math.log(-math.expm1(-self.epsilon)) - math.log1p(self.alpha)  # ln((1 − α)/(1 + α))
        by_index = log_c - self.epsilon * np.abs(j - i).astype(np.float64)
        if size > 1:
            tail = -math.log(-math.expm1(-self.epsilon))  # Σ_{m ≥ 0} α^m = 1/(1 − α)
            by_index[:, 0] += tail
            by_index[:, -1] += tail
        else:
            by_index[:, 0] = 0.0
        out = np.empty_like(by_index)
        out[:, self.order] = by_index
        return out

    def distribution(self, rows: np.ndarray) -> np.ndarray:
        return np.exp(self.log_distribution(rows))
