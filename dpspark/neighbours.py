"""Nearest-neighbour search over the output vocabulary, exact or approximate, one interface.

Releasing argmin_u ‖φ(u) − v‖₂ is post-processing of the noisy point v, so *any*
search that answers from v and the public embeddings alone keeps dχ-privacy. What
an approximate index changes is utility and the empirical privacy statistics: the
noisy points of a useful ε lie far from every word, where approximate indexes are
weakest (design §7), and a wrong neighbour makes Nw look better than the mechanism
really is. Exact search is therefore the default and the reference; approximate
search is measured against it (``recall_at_1``) and reported.

Exact search is a blocked, fused float32 GEMM:
argmin ‖x − v‖² = argmax (v·x − ‖x‖²/2), and the −‖x‖²/2 term is folded into the
matrix product as one extra column (queries get a constant 1), so each block of
scores is one BLAS call followed by one argmax pass, on blocks small enough to stay
in cache (512 queries × 2,048 words = 4 MiB; the fastest shape measured on 2 cores with
50,000 and 400,000 words). Answers equal the float64 argmin
except at ties within float32 rounding (relative 1e-6), where either word is exact.
"""

from __future__ import annotations

import os
from typing import Protocol

import numpy as np

QUERY_BLOCK = 512
WORD_BLOCK = 2048


class NeighbourIndex(Protocol):
    """Maps query points (n×d) to the rows of the nearest indexed vectors."""

    method: str

    def query(self, points: np.ndarray) -> np.ndarray: ...

    def params(self) -> dict: ...


class ExactIndex:
    """Exact Euclidean nearest neighbour by blocked float32 BLAS with a fused argmax."""

    method = "exact"

    def __init__(self, vectors: np.ndarray) -> None:
        x = np.asarray(vectors, dtype=np.float64)
        self.size, self.dim = x.shape
        # (d+1)×V, contiguous, so each word block is a column slice of one matrix.
        augmented = np.empty((self.dim + 1, self.size), dtype=np.float32)
        augmented[: self.dim] = x.T
        augmented[self.dim] = -0.5 * (x * x).sum(axis=1)
        self._xt = augmented

    def params(self) -> dict:
        return {"query_block": QUERY_BLOCK, "word_block": WORD_BLOCK}

    def query(self, points: np.ndarray) -> np.ndarray:
        points = np.asarray(points)
        n = points.shape[0]
        result = np.zeros(n, dtype=np.int64)
        if n == 0:
            return result
        q = np.empty((n, self.dim + 1), dtype=np.float32)
        q[:, : self.dim] = points
        q[:, self.dim] = 1.0
        best = np.full(n, -np.inf, dtype=np.float32)
        scores = np.empty((min(n, QUERY_BLOCK), WORD_BLOCK), dtype=np.float32)
        for qs in range(0, n, QUERY_BLOCK):
            qb = q[qs : qs + QUERY_BLOCK]
            rows = np.arange(len(qb))
            b, r = best[qs : qs + QUERY_BLOCK], result[qs : qs + QUERY_BLOCK]
            for ws in range(0, self.size, WORD_BLOCK):
                block = self._xt[:, ws : ws + WORD_BLOCK]
                out = scores[: len(qb), : block.shape[1]]
                np.matmul(qb, block, out=out)
                j = out.argmax(axis=1)
                top = out[rows, j]
                better = top > b
                b[better] = top[better]
                r[better] = j[better] + ws
        return result

    def within(self, centers: np.ndarray, radii: np.ndarray) -> list[np.ndarray]:
        """For each center, the rows whose distance to it may be below its radius.

        A superset by a small margin (float32 products): callers use it to *exclude*
        words, so erring towards inclusion keeps answers exact.
        """
        centers = np.asarray(centers, dtype=np.float32)
        out: list[np.ndarray] = []
        for s in range(0, len(centers), QUERY_BLOCK):
            c = centers[s : s + QUERY_BLOCK]
            scores = c @ self._xt[: self.dim] + self._xt[self.dim]  # c·x − ‖x‖²/2
            # ‖c − x‖² = ‖c‖² − 2(c·x − ‖x‖²/2)
            d2 = (c.astype(np.float64) ** 2).sum(axis=1)[:, None] - 2.0 * scores
            r2 = np.asarray(radii[s : s + QUERY_BLOCK], dtype=np.float64) ** 2
            limit = r2 * (1 + 1e-4) + 1e-3
            out.extend(np.flatnonzero(row < lim) for row, lim in zip(d2, limit))
        return out

    def query_among(self, points: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Nearest of ``rows`` (a subset of the index) to each point: same scores as ``query``."""
        sub = self._xt[:, rows]
        q = np.empty((len(points), self.dim + 1), dtype=np.float32)
        q[:, : self.dim] = points
        q[:, self.dim] = 1.0
        return rows[(q @ sub).argmax(axis=1)]


class AnnoyIndex:
    """Annoy (spotify/annoy) Euclidean forest: approximate by design, memory-mapped from a file.

    ``search_k`` = −1 is annoy's default (n_trees × k nodes); larger values inspect
    more nodes and approach exact search at a cost in speed.
    """

    method = "annoy"

    def __init__(self, path: str, dim: int, n_trees: int, search_k: int = -1) -> None:
        from annoy import AnnoyIndex as _Annoy

        self.path, self.dim, self.n_trees, self.search_k = path, dim, n_trees, search_k
        self._index = _Annoy(dim, "euclidean")
        self._index.load(path)  # memory-mapped: every process shares the pages

    @classmethod
    def build(cls, vectors: np.ndarray, path: str, n_trees: int = 50, search_k: int = -1, seed: int = 0) -> AnnoyIndex:
        """Build a forest over ``vectors`` and save it to ``path``.

        The build seed only shapes the (public) tree structure, never the noise; a fixed
        value makes the index file reproducible for a given vocabulary.
        """
        from annoy import AnnoyIndex as _Annoy

        vectors = np.asarray(vectors, dtype=np.float32)
        index = _Annoy(vectors.shape[1], "euclidean")
        index.set_seed(seed)
        for i, v in enumerate(vectors):
            index.add_item(i, v)
        index.build(n_trees, n_jobs=1)
        index.save(os.fspath(path))
        index.unload()
        return cls(os.fspath(path), vectors.shape[1], n_trees, search_k)

    def params(self) -> dict:
        return {"n_trees": self.n_trees, "search_k": self.search_k}

    def query(self, points: np.ndarray) -> np.ndarray:
        # annoy has no batch query: one C++ call per point (this is annoy's cost, not ours).
        get = self._index.get_nns_by_vector
        k = self.search_k
        return np.fromiter(
            (get(p, 1, search_k=k)[0] for p in np.asarray(points, dtype=np.float32)), np.int64, len(points)
        )


def recall_at_1(index: NeighbourIndex, reference: NeighbourIndex, points: np.ndarray) -> float:
    """Share of ``points`` whose neighbour from ``index`` equals the reference (exact) one."""
    if len(points) == 0:
        return 1.0
    return float(np.mean(index.query(points) == reference.query(points)))
