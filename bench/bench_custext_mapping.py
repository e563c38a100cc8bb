"""CusText's mapping (``dpspark.mechanisms.custext.grouping``): build time and peak memory, one core.

GloVe 6B 50-d, its --sizes most frequent words as W, K = --top-k, each --similarity; the
mapping is built the way ``CusText.prepare`` builds it on the driver (no disk cache). Each
measurement runs in a fresh interpreter with one BLAS thread, so that its peak resident memory
(``resource.getrusage``: the process's maximum RSS) is its own; the RSS after loading the
embedding and W's float64 vectors, before the build, is printed beside it. Build time is given as
wall-clock and as the process's CPU time (on a shared machine the CPU time is the steadier figure).

After the mapping (and outside its peak): the sampler's per-ε table at ε = 10 (V×K cumulative
probabilities) and tokens/s of ``sample`` on --tokens (10⁶) tokens drawn uniformly from W.

    python bench/bench_custext_mapping.py [--sizes 50000 400000] [--top-k 20] [--similarity cosine euclidean]
    python bench/bench_custext_mapping.py --smoke   # 5,000 words, 10,000 tokens sampled
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "VECLIB_MAXIMUM_THREADS"):
    os.environ[_v] = "1"  # one core, set before numpy loads (the measuring subprocesses inherit it)

# isort: off
from cpu import cpu_line  # noqa: E402 - drops a machine-wide OPENBLAS_CORETYPE before numpy loads

from dpspark import _blas  # noqa: E402

_blas.prefer_fast_kernels()  # as `dpspark` commands do, before numpy loads OpenBLAS
import argparse  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

# isort: on

HERE = Path(__file__).resolve().parent


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def measure(size: int, top_k: int, similarity: str, n_tokens: int) -> dict:
    """One build in this process: seconds, peak RSS, and the group sizes."""
    from dpspark.embeddings import load_default
    from dpspark.mechanisms import Space
    from dpspark.mechanisms.custext import CusText, CusTextSampler, grouping

    glove = load_default()
    space = Space(glove.vectors, np.arange(size))
    space.vocab64  # noqa: B018 - W in float64, as a driver's Space holds it anyway
    before = peak_mb()
    t0, c0 = time.perf_counter(), time.process_time()
    members = grouping(space, top_k, similarity)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    peak = peak_mb()
    sizes = (members >= 0).sum(axis=1)
    spec = CusText(epsilon=10.0, top_k=top_k, similarity=similarity)
    sampler = CusTextSampler(space, spec, members)
    t0 = time.perf_counter()
    sampler.table  # noqa: B018 - the per-ε table, built on first use
    table = time.perf_counter() - t0
    tokens = np.random.default_rng(0).integers(0, size, n_tokens)
    t0 = time.perf_counter()
    sampler.sample(tokens, np.random.default_rng(1))
    rate = len(tokens) / (time.perf_counter() - t0)
    return {
        "size": size,
        "top_k": top_k,
        "similarity": similarity,
        "seconds": seconds,
        "cpu_seconds": cpu,
        "rss_before_mb": before,
        "peak_mb": peak,
        "groups": int(len(members)),
        "last_group": int(sizes[-1]),
        "table_seconds": table,
        "tokens_per_s": rate,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[50_000, 400_000])
    ap.add_argument("--top-k", type=int, default=20)
    ap.add_argument("--similarity", nargs="+", default=["cosine", "euclidean"])
    ap.add_argument("--tokens", type=int, default=1_000_000, help="tokens sampled for tokens/s")
    ap.add_argument("--smoke", action="store_true", help="a few seconds: 5,000 words, 10,000 tokens")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # a single measurement, as JSON
    a = ap.parse_args()
    if a.smoke:
        a.sizes, a.tokens = [5_000], 10_000
    if a.one:
        print(json.dumps(measure(a.sizes[0], a.top_k, a.similarity[0], a.tokens)))
        return
    print(f"CPU: {cpu_line()}; load average {os.getloadavg()[0]:.1f} at start; one BLAS thread")
    print(
        f"{'V':>8} {'K':>3} {'similarity':>10} {'groups':>7} {'build s':>8} {'CPU s':>6} {'RSS before MB':>14} "
        f"{'peak MB':>8} {'table s (ε=10)':>15} {'tokens/s':>10}"
    )
    for size in a.sizes:
        for similarity in a.similarity:
            cmd = [sys.executable, str(Path(__file__)), "--one", "--sizes", str(size), "--top-k", str(a.top_k)]
            cmd += ["--tokens", str(a.tokens)]
            out = subprocess.run([*cmd, "--similarity", similarity], capture_output=True, text=True, cwd=HERE)
            if out.returncode:
                sys.exit(out.stderr)
            r = json.loads(out.stdout.splitlines()[-1])
            print(
                f"{r['size']:>8} {r['top_k']:>3} {r['similarity']:>10} {r['groups']:>7} {r['seconds']:>8.1f} "
                f"{r['cpu_seconds']:>6.1f} {r['rss_before_mb']:>14.0f} {r['peak_mb']:>8.0f} "
                f"{r['table_seconds']:>15.2f} {r['tokens_per_s']:>10.3g}",
                flush=True,
            )


if __name__ == "__main__":
    main()
