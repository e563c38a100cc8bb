"""Throughput of the privacy-stats job (issue: 10,000 words × K = 100 × 2 λ × 3 ε = 6 million
draws over the 50,000-word vocabulary, exact search, local[2]).

Prints the job's draws/s and wall time, and, to show what dominates, the one-core
in-process rate of the same draws per ε split into noise and search.

    python bench/bench_stats.py [--words 10000] [--epsilons 5,10,20] [--lambdas 0,1]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def one_core_split(epsilons: list[float], lam: float) -> None:
    code = f"""
import os; os.environ['OPENBLAS_NUM_THREADS'] = '1'
import dpspark, time, numpy as np
from dpspark.embeddings import load_default
from dpspark.geometry import geometry
from dpspark.mechanisms import WordMechanism, sample_noise
from dpspark.neighbours import ExactIndex
E = load_default().vectors; vocab = np.arange(50_000)
g = geometry(E[vocab], {lam}); idx = ExactIndex(E[vocab])
words = np.sort(np.random.default_rng(0).choice(vocab, 50, replace=False))
for eps in {epsilons}:
    m = WordMechanism(E, vocab, eps, g.a, idx)
    t = time.perf_counter(); m.perturb_copies(words, 100, np.random.default_rng(1)); total = time.perf_counter() - t
    t = time.perf_counter(); sample_noise(5000, 50, eps, np.random.default_rng(1), g.a)
    noise = time.perf_counter() - t
    share = 100 * noise / total
    print(f"  eps {{eps:>4g}}: {{5000 / total:>9,.0f}} draws/s on one core; noise {{share:.1f}}% of the time, "
          "search (and the 2|Z| ball where it applies) the rest")
"""
    subprocess.run([sys.executable, "-c", code], check=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--words", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--epsilons", default="5,10,20")
    ap.add_argument("--lambdas", default="0,1")
    a = ap.parse_args()
    eps = [float(x) for x in a.epsilons.split(",")]
    lams = a.lambdas.split(",")
    draws = a.words * a.runs * len(eps) * len(lams)
    print(
        f"== privacy-stats, local[2]: {a.words:,} words x K={a.runs} x {len(lams)} lambda x {len(eps)} epsilon "
        f"= {draws:,} draws, vocabulary 50,000, exact search"
    )
    with tempfile.TemporaryDirectory(prefix="dpspark-bench-") as tmp:
        out = Path(tmp) / "stats"
        t0 = time.perf_counter()
        cmd = [
            str(Path(sys.executable).with_name("dpspark")),
            "privacy-stats",
            "--output",
            str(out),
            "--words",
            str(a.words),
            "--runs",
            str(a.runs),
            "--epsilons",
            a.epsilons,
            "--lambdas",
            a.lambdas,
            "--vocab-size",
            "50000",
            "--master",
            "local[2]",
        ]
        subprocess.run(cmd, check=True, capture_output=True, env={**os.environ})
        wall = time.perf_counter() - t0
        m = json.loads((out / "_dpspark_manifest.json").read_text())
    t = m["timings"]
    print(
        f"  {m['draws']:,} draws in {t['statistics_s']:.1f} s = {t['draws_per_s']:,.0f} draws/s "
        f"({m['tasks']} tasks); preparation {t['preparation_s']} s; whole command {wall:.1f} s"
    )
    print("== what dominates (one core, in process, 50 words x K=100, lambda=1)")
    one_core_split(eps, 1.0)


if __name__ == "__main__":
    main()
