"""Throughput of the privacy-stats job (issue: 10,000 words × K = 100 × 2 λ × 3 ε = 6 million
draws over the 50,000-word vocabulary, exact search, local[2]).

Prints the job's draws/s and wall time, and, to show what dominates, the one-core
in-process rate of the same draws per ε split into noise and search.

    python bench/bench_stats.py [--words 10000] [--epsilons 5,10,20] [--lambdas 0,1]
    python bench/bench_stats.py --baseline /tmp/base [--pairs 1]   # against another checkout
    python bench/bench_stats.py --smoke   # a few seconds, to check that it runs
    python bench/bench_stats.py --engines spark,local --pairs 3   # Spark (local[2]) against the local engine

With --engines spark,local the same job runs alternately on Spark and on the local engine (``--engine local``:
this process, no JVM, one task at a time), and the medians and their ratio are printed.

With --baseline (a git worktree of an earlier commit), the job runs alternately from this tree
and from the baseline (``PYTHONPATH=<baseline>``, same interpreter and libraries), and the
medians and their ratio are printed: both see the same machine and load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cpu import cpu_line

HERE = Path(__file__).resolve().parent


def one_core_split(epsilons: list[float], lam: float, vocab: int, warm: int) -> None:
    code = f"""
import os; os.environ['OPENBLAS_NUM_THREADS'] = '1'
from dpspark import _blas; _blas.prefer_fast_kernels()  # as dpspark commands do
import time, numpy as np
from dpspark.embeddings import load_default
from dpspark.mechanisms import Space, parse, sample_noise
from dpspark.device import exact_index
E = load_default().vectors; vocab = np.arange({vocab})
space = Space(E, vocab, exact_index(E[vocab]))
def mechanism(eps):
    return parse({{"name": "mahalanobis", "epsilon": eps, "lambda": {lam}}}).build(space)
# The warm-up (at 50,000 words) scores 1e10 pairs: AdaptiveIndex moves there, not in the first ε timed.
m = mechanism(10.0)
for _ in range(2): m.sample_copies(np.arange({warm}), 100, np.random.default_rng(0))
words = np.sort(np.random.default_rng(0).choice(vocab, 50, replace=False))
for eps in {epsilons}:
    m = mechanism(eps)
    t = time.perf_counter(); m.sample_copies(words, 100, np.random.default_rng(1)); total = time.perf_counter() - t
    t = time.perf_counter(); sample_noise(5000, 50, eps, np.random.default_rng(1), m.a)
    noise = time.perf_counter() - t
    share = 100 * noise / total
    print(f"  eps {{eps:>4g}}: {{5000 / total:>9,.0f}} draws/s on one core; noise {{share:.1f}}% of the time, "
          "search (and the 2|Z| ball where it applies) the rest")
"""
    subprocess.run([sys.executable, "-c", code], check=True)


def run_job(a, tree: Path | None, engine: str = "spark") -> tuple[dict, float]:
    with tempfile.TemporaryDirectory(prefix="dpspark-bench-") as tmp:
        out = Path(tmp) / "stats"
        cmd = [sys.executable, "-c", "import sys; from dpspark.cli import main; sys.exit(main())"]
        cmd += ["privacy-stats", "--output", str(out), "--words", str(a.words), "--runs", str(a.runs)]
        cmd += ["--epsilons", a.epsilons, "--lambdas", a.lambdas, "--vocab-size", str(a.vocab_size)]
        cmd += ["--master", "local[2]"] if engine == "spark" else ["--engine", "local"]
        env = {**os.environ, **({"PYTHONPATH": str(tree)} if tree else {})}
        t0 = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tree or HERE.parent)
        wall = time.perf_counter() - t0
        if p.returncode != 0:
            raise RuntimeError(f"privacy-stats from {tree or 'this tree'}: exit {p.returncode}\n{p.stderr[-3000:]}")
        return json.loads((out / "_dpspark_manifest.json").read_text()), wall


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--words", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--epsilons", default="5,10,20")
    ap.add_argument("--lambdas", default="0,1")
    ap.add_argument("--baseline", type=Path, help="a checkout (git worktree) to compare with")
    ap.add_argument("--pairs", type=int, default=1)
    ap.add_argument("--engines", default="spark", help="spark, local, or spark,local side by side (this tree)")
    ap.add_argument("--vocab-size", type=int, default=50_000)
    ap.add_argument("--smoke", action="store_true", help="a few seconds: 200 words x K=5, one ε and λ, 5,000 words")
    a = ap.parse_args()
    if a.smoke:
        a.words, a.runs, a.epsilons, a.lambdas, a.vocab_size = 200, 5, "10", "1", 5_000
    eps = [float(x) for x in a.epsilons.split(",")]
    lams = a.lambdas.split(",")
    draws = a.words * a.runs * len(eps) * len(lams)
    print(
        f"== privacy-stats ({a.engines}): {a.words:,} words x K={a.runs} x {len(lams)} lambda x {len(eps)} epsilon "
        f"= {draws:,} draws, vocabulary {a.vocab_size:,}, exact search"
    )
    print(f"CPU: {cpu_line()}")
    engines = a.engines.split(",")
    trees = [("this tree", None, e) for e in engines] + ([("baseline", a.baseline, "spark")] if a.baseline else [])
    trees = [(name if len(engines) == 1 else f"{engine} engine", tree, engine) for name, tree, engine in trees]
    walls: dict[str, list[float]] = {name: [] for name, _, _ in trees}
    for p in range(a.pairs):
        for name, tree, engine in trees if p % 2 == 0 else trees[::-1]:
            m, wall = run_job(a, tree, engine)
            t = m["timings"]
            walls[name].append(t["statistics_s"])
            print(
                f"  {name}: {m['draws']:,} draws in {t['statistics_s']:.1f} s = {m['draws'] / t['statistics_s']:,.0f}"
                f" draws/s ({m['tasks']} tasks); preparation {t['preparation_s']} s; whole command {wall:.1f} s",
                flush=True,
            )
    if a.baseline:
        new, base = statistics.median(walls["this tree"]), statistics.median(walls["baseline"])
        print(f"  medians of {a.pairs}: statistics {base:.1f} s (baseline) -> {new:.1f} s = {base / new:.2f}x faster")
    if len(engines) > 1:
        medians = {e: statistics.median(walls[f"{e} engine"]) for e in engines}
        first, second = engines[:2]
        print(
            f"  medians of {a.pairs}: statistics {medians[first]:.1f} s ({first}) vs {medians[second]:.1f} s "
            f"({second}): {first} / {second} = {medians[first] / medians[second]:.2f}"
        )
    print("== what dominates (one core, in process, dpspark's default index, 50 words x K=100, lambda=1)")
    one_core_split(eps, 1.0, a.vocab_size, warm=20 if a.smoke else 1000)


if __name__ == "__main__":
    main()
