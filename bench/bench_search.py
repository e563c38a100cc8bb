"""Exact search on one core: float32 ExactIndex against the certified bf16 CertifiedIndex.

GloVe 50-d, Mahalanobis λ = 1, noisy points of uniformly drawn vocabulary words (as in
bench_neighbours.py), 400,000 and 50,000 words, ε ∈ {1, 5, 10, 20, 40}. Prints the CPU and
its flags, then per (words, ε): each index's queries/s (median of --repeats, the two
interleaved), their ratio, the float64 re-ranked candidates per query, and how many answers
equal the float64 argmin (CertifiedIndex must match all; float32 ExactIndex may differ at
near-ties).

    python bench/bench_search.py [--queries 4096] [--repeats 3]
    python bench/bench_search.py --check 1000000    # exactness only, over that many queries
    python bench/bench_search.py --two              # query against query_two (Vickrey's search)
    python bench/bench_search.py --smoke            # all three at 5,000 words, in seconds

The float64 reference (``reference``) is exact by proof, not by trust: float32 GEMM scores
with a rounding bound, every word within twice the bound of the best re-ranked by its
float64 distance; ``--check`` also compares it with direct float64 distances on a sample.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

# isort: off
import cpu  # noqa: E402,F401  (first: it drops a machine-wide OPENBLAS_CORETYPE before numpy loads)
from dpspark import _blas  # noqa: E402

_blas.prefer_fast_kernels()  # as `dpspark` commands do, before numpy loads OpenBLAS
import numpy as np  # noqa: E402

# isort: on

from cpu import cpu_line  # noqa: E402

from dpspark.embeddings import load_default  # noqa: E402
from dpspark.mechanisms import sample_noise  # noqa: E402
from dpspark.mechanisms.geometry import geometry  # noqa: E402
from dpspark.neighbours import CertifiedIndex, ExactIndex, _down32  # noqa: E402

EPSILONS = (1.0, 5.0, 10.0, 20.0, 40.0)
SIZES = (400_000, 50_000)


def reference(exact: ExactIndex, x: np.ndarray, q: np.ndarray) -> np.ndarray:
    """np.argmin(((q − x)**2).sum(axis=1)) per query, in float64, exactly.

    ExactIndex's float32 scores ŝ of s = q·x − ‖x‖²/2 (q and −‖x‖²/2 rounded to float32,
    K = d + 1 products rounded and summed in float32) satisfy |ŝ − s| ≤ B =
    (d+5)·2⁻²⁴·(‖q‖R + R²/2), R = max‖x‖. The word with the largest ŝ has s ≥ max ŝ − B, so a
    word float64 could prefer (its s within σ = (d+8)·2⁻⁵²(‖q‖+R)² of the best, the
    rounding of float64 distances) has ŝ ≥ max ŝ − 2B − σ; those are re-ranked by float64
    distance, ties to the lowest row.
    """
    xt, d = exact._xt, x.shape[1]
    rmax = float(np.sqrt((x.astype(np.float64) ** 2).sum(axis=1).max())) * (1 + 2.0**-40)
    out = np.empty(len(q), dtype=np.int64)
    for s in range(0, len(q), 512):
        qc = np.asarray(q[s : s + 512], dtype=np.float64)
        qn = np.sqrt((qc * qc).sum(axis=1)) * (1 + 2.0**-40)
        margin = 2 * (d + 5) * 2.0**-24 * (qn * rmax + rmax * rmax / 2) + (d + 8) * 2.0**-52 * (qn + rmax) ** 2
        q32 = np.ones((len(qc), d + 1), dtype=np.float32)
        q32[:, :d] = qc
        best = np.full(len(qc), -np.inf)
        found = []
        for ws in range(0, xt.shape[1], 2048):
            sc = q32 @ xt[:, ws : ws + 2048]
            best = np.maximum(best, sc.max(axis=1))
            # The running best only grows: this keeps a superset of the final candidates.
            r, c = np.nonzero(sc >= _down32(best - margin * 1.001)[:, None])
            found.append((r, c + ws, sc[r, c].astype(np.float64)))
        r, j, sc = map(np.concatenate, zip(*found))
        keep = sc >= best[r] - margin[r] * 1.001
        r, j = r[keep], j[keep]
        dist = ((x[j].astype(np.float64) - qc[r]) ** 2).sum(axis=1)
        order = np.lexsort((j, dist, r))
        first = order[np.r_[True, r[order][1:] != r[order][:-1]]]
        out[s + r[first]] = j[first]
    return out


def noisy(vectors: np.ndarray, a: np.ndarray, n: int, epsilon: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return vectors[rng.integers(0, len(vectors), n)] + sample_noise(n, vectors.shape[1], epsilon, rng, a)


def timed(index, q: np.ndarray) -> tuple[float, float, np.ndarray]:
    """Queries per wall-clock second and per CPU second (one thread: the CPU rate does not count
    the time other processes hold the core, the steadier figure on a shared machine)."""
    t0, c0 = time.perf_counter(), time.process_time()
    found = index.query(q)
    return len(q) / (time.perf_counter() - t0), len(q) / (time.process_time() - c0), found


def speed(emb, sizes, epsilons, n: int, repeats: int) -> None:
    print(f"{n:,} queries per (words, ε), median of {repeats} interleaved runs, one thread; q/s per wall")
    print("second, and per CPU second of the process")
    print(
        "   words     ε   fp32 q/s   bf16 q/s  ratio | fp32 cpu   bf16 cpu  ratio | cand/q  bf16 exact  fp32 = float64"
    )
    for size in sizes:
        x = emb.vectors[:size]
        a = geometry(x, 1.0).a
        t0 = time.perf_counter()
        exact = ExactIndex(x)
        t1 = time.perf_counter()
        certified = CertifiedIndex(x)
        t2 = time.perf_counter()
        print(f"  ({size:,} words: ExactIndex built in {t1 - t0:.1f} s, CertifiedIndex in {t2 - t1:.1f} s)")
        warm = noisy(x, a, n, 10.0, seed=99)
        exact.query(warm)
        certified.query(warm)  # oneDNN compiles its kernels once per shape
        for eps in epsilons:
            q = noisy(x, a, n, eps, seed=int(eps * 1000) + size)
            ref = reference(exact, x, q)
            fp32, bf16, fp32_cpu, bf16_cpu = [], [], [], []
            certified.reranked = 0
            for r in range(repeats):
                pair = [(exact, fp32, fp32_cpu), (certified, bf16, bf16_cpu)]
                for index, rates, cpu_rates in pair if r % 2 == 0 else pair[::-1]:
                    rate, cpu_rate, found = timed(index, q)
                    rates.append(rate)
                    cpu_rates.append(cpu_rate)
                    if index is certified:
                        assert (found == ref).all(), f"CertifiedIndex differs from float64 at {size} words, ε={eps}"
                        hits = int((found == ref).sum())
                    else:
                        agree = int((found == ref).sum())
            m32, m16 = statistics.median(fp32), statistics.median(bf16)
            c32, c16 = statistics.median(fp32_cpu), statistics.median(bf16_cpu)
            cand = certified.reranked / (repeats * n)
            print(
                f"  {size:>7,} {eps:>4g} {m32:>10,.0f} {m16:>10,.0f} {m16 / m32:>6.2f} |"
                f" {c32:>8,.0f} {c16:>10,.0f} {c16 / c32:>6.2f} | {cand:>6.2f} {hits:>5}/{n:<5} {agree:>6}/{n}",
                flush=True,
            )


def best_two(emb, sizes, epsilons, n: int, repeats: int) -> None:
    """``query`` against ``query_two`` (Vickrey's search), float32 ExactIndex and certified bf16
    CertifiedIndex side by side: queries per CPU second, median of ``repeats`` interleaved runs."""
    print(f"{n:,} queries per (words, ε), median of {repeats} interleaved runs, one thread; q/s per CPU second")
    print("   words     ε | fp32 query  fp32 two  two/query | bf16 query  bf16 two  two/query | bf16 two/fp32 two")
    for size in sizes:
        x = emb.vectors[:size]
        a = geometry(x, 1.0).a
        exact, certified = ExactIndex(x), CertifiedIndex(x)
        warm = noisy(x, a, n, 10.0, seed=99)
        for f in (exact.query, exact.query_two, certified.query, certified.query_two):
            f(warm)
        for eps in epsilons:
            q = noisy(x, a, n, eps, seed=int(eps * 1000) + size)
            calls = [exact.query, exact.query_two, certified.query, certified.query_two]
            rates: list[list[float]] = [[] for _ in calls]
            for r in range(repeats):
                for i in range(len(calls)) if r % 2 == 0 else reversed(range(len(calls))):
                    c0 = time.process_time()
                    calls[i](q)
                    rates[i].append(n / (time.process_time() - c0))
            f1, f2, b1, b2 = map(statistics.median, rates)
            print(
                f"  {size:>7,} {eps:>4g} | {f1:>10,.0f} {f2:>9,.0f} {f2 / f1:>10.2f} |"
                f" {b1:>10,.0f} {b2:>9,.0f} {b2 / b1:>10.2f} | {b2 / f2:>17.2f}",
                flush=True,
            )


def check(emb, sizes, epsilons, total: int, sample: int) -> None:
    per = -(-total // (len(sizes) * len(epsilons)))
    print(f"exactness: {per:,} noisy queries per (words, ε), {per * len(sizes) * len(epsilons):,} in all")
    grand = 0
    for size in sizes:
        x = emb.vectors[:size]
        a = geometry(x, 1.0).a
        exact, certified = ExactIndex(x), CertifiedIndex(x)
        x64 = x.astype(np.float64)
        for eps in epsilons:
            t0, same = time.perf_counter(), 0
            certified.reranked = 0
            for c, s in enumerate(range(0, per, 8192)):
                q = noisy(x, a, min(8192, per - s), eps, seed=hash((size, eps, c)) % 2**32)
                ref = reference(exact, x, q)
                if c == 0:  # the reference itself, against direct float64 distances
                    direct = np.array([((p - x64) ** 2).sum(axis=1).argmin() for p in q[:sample]])
                    assert (direct == ref[:sample]).all(), "the reference is wrong"
                same += int((certified.query(q) == ref).sum())
            grand += same
            print(
                f"  {size:>7,} words ε {eps:>4g}: {same:,}/{per:,} equal the float64 argmin"
                f" ({certified.reranked / per:.2f} re-ranked per query, {time.perf_counter() - t0:.0f} s)",
                flush=True,
            )
    print(f"total: {grand:,}/{per * len(sizes) * len(epsilons):,} exact")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--queries", type=int, default=4096)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)))
    ap.add_argument("--epsilons", default=",".join(f"{e:g}" for e in EPSILONS))
    ap.add_argument("--check", type=int, default=0, help="exactness over this many queries instead of timing")
    ap.add_argument("--sample", type=int, default=64, help="--check: reference rows also checked directly")
    ap.add_argument("--two", action="store_true", help="query against query_two (Vickrey's best two) instead")
    ap.add_argument("--smoke", action="store_true", help="a few seconds: timing, --two and --check at 5,000 words")
    a = ap.parse_args()
    if a.smoke:
        a.queries, a.repeats, a.sizes, a.epsilons, a.check, a.sample = 256, 1, "5000", "10", 1024, 16
    import torch

    torch.set_num_threads(1)
    print(cpu_line())
    print(f"numpy {np.__version__}, torch {torch.__version__} ({torch.get_num_threads()} thread)")
    sizes = [int(s) for s in a.sizes.split(",")]
    epsilons = [float(e) for e in a.epsilons.split(",")]
    emb = load_default()
    if a.smoke or not (a.check or a.two):
        speed(emb, sizes, epsilons, a.queries, a.repeats)
    if a.smoke or (a.two and not a.check):
        best_two(emb, sizes, epsilons, a.queries, a.repeats)
    if a.check:
        check(emb, sizes, epsilons, a.check, a.sample)


if __name__ == "__main__":
    main()
