"""Nearest-neighbour search on noisy queries: agreement with exact search and queries/s.

GloVe 50-d, Mahalanobis λ = 1, noisy points of uniformly drawn vocabulary words at
ε ∈ {5, 10, 20, 40}; one core. Prints, per ε, exact search's queries/s and annoy's
recall@1 against it for several search_k values (the manifest reports the same
figure for a run's own ε).

    python bench/bench_neighbours.py [--vocab-size 50000] [--queries 2000] [--trees 50] [--smoke]
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

# isort: off
import dpspark  # noqa: E402,F401 - BLAS kernel choice before numpy
import numpy as np  # noqa: E402

# isort: on

from dpspark.embeddings import load_default  # noqa: E402
from dpspark.mechanisms import sample_noise  # noqa: E402
from dpspark.mechanisms.geometry import geometry  # noqa: E402
from dpspark.neighbours import AnnoyIndex, ExactIndex  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab-size", type=int, default=50_000)
    ap.add_argument("--queries", type=int, default=2000)
    ap.add_argument("--trees", type=int, default=50)
    ap.add_argument("--smoke", action="store_true", help="a few seconds: 5,000 words, 200 queries, 5 trees")
    a = ap.parse_args()
    if a.smoke:
        a.vocab_size, a.queries, a.trees = 5_000, 200, 5
    vectors = load_default().vectors[: a.vocab_size]
    g = geometry(vectors, 1.0)
    exact = ExactIndex(vectors)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        annoy = AnnoyIndex.build(vectors, f"{tmp}/i.ann", n_trees=a.trees)
        print(f"vocab {a.vocab_size:,}, annoy {a.trees} trees built in {time.perf_counter() - t0:.1f} s")
        rng = np.random.default_rng(0)
        for eps in (5.0, 10.0, 20.0, 40.0):
            ids = rng.integers(0, a.vocab_size, a.queries)
            q = vectors[ids] + sample_noise(a.queries, vectors.shape[1], eps, rng, g.a)
            t0 = time.perf_counter()
            ref = exact.query(q)
            rate = a.queries / (time.perf_counter() - t0)
            line = [f"eps {eps:>4g}: exact {rate:>8,.0f} q/s"]
            for search_k in (-1, 5_000, 20_000):
                annoy.search_k = search_k
                t0 = time.perf_counter()
                found = annoy.query(q)
                r = a.queries / (time.perf_counter() - t0)
                line.append(f"annoy k={search_k}: recall {np.mean(found == ref):.3f} at {r:,.0f} q/s")
            print("  " + " | ".join(line), flush=True)


if __name__ == "__main__":
    main()
