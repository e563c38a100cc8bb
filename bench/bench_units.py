"""Privacy units at the samplers: every mechanism drawing each token at its own ε (``sample_at``) against
``sample`` at one ε, side by side in one run.

Three ways of drawing the same tokens, interleaved, each repeated and the median kept:
- ``sample``: every token at ε (today's path, the token unit);
- ``sample_at`` with every εᵢ = ε: the unit path when all tokens share one ε (the must-show: within 10% of
  ``sample``);
- ``sample_at`` with a document unit's allocation: units of 5 to 80 tokens under ``scale`` at a budget
  E = 20·ε, so each token gets E/n (tens of distinct ε per batch).

Prints tokens/s of each and the ratios to ``sample``, with the CPU line.

    python bench/bench_units.py [--vocab 20000] [--tokens 20000] [--repeats 5] [--mechanisms a,b] [--smoke]
"""

from __future__ import annotations

import argparse
import statistics
import time

# isort: off
from cpu import cpu_line  # drops a machine-wide OPENBLAS_CORETYPE before numpy loads

from dpspark import _blas

_blas.prefer_fast_kernels()  # as `dpspark` commands do, before numpy loads OpenBLAS
import numpy as np  # noqa: E402

# isort: on
from dpspark import units  # noqa: E402
from dpspark.embeddings import load_default, select_vocabulary  # noqa: E402
from dpspark.mechanisms import REGISTRY, Space, WordMechanism, parse  # noqa: E402

EPSILON = {"syntf": 20.0, "syntf-words": 20.0, "1-diffractor": 1.0, "custext": 4.0, "custext-plus": 4.0}


def timed(
    mechanism: WordMechanism, rows: np.ndarray, epsilons: dict[str, np.ndarray], repeats: int
) -> dict[str, list[float]]:
    """Seconds of ``sample`` and of ``sample_at`` under each of ``epsilons``, interleaved repeat by repeat (the
    machine's noise falls on all alike); the per-ε samplers are built once before, as a long task would."""
    mechanism.sample_at(rows, epsilons["documents"], np.random.default_rng(0))
    times: dict[str, list[float]] = {"sample": [], **{k: [] for k in epsilons}}
    for r in range(repeats):
        for key in times:
            t0 = time.perf_counter()
            if key == "sample":
                mechanism.sample(rows, np.random.default_rng(r))
            else:
                mechanism.sample_at(rows, epsilons[key], np.random.default_rng(r))
            times[key].append(time.perf_counter() - t0)
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", type=int, default=20_000)
    ap.add_argument("--tokens", type=int, default=20_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--mechanisms", default=",".join(n for n in REGISTRY if n != "truncated-gumbel"))
    ap.add_argument("--smoke", action="store_true", help="a few seconds: 2,000 words, 2,000 tokens, 1 repeat")
    args = ap.parse_args()
    if args.smoke:
        args.vocab, args.tokens, args.repeats, args.mechanisms = 2000, 2000, 1, "laplace,santext,custext"
    print(cpu_line())
    glove = load_default()
    space = Space(glove.vectors, select_vocabulary(glove, args.vocab), words=glove.word_rows)
    rng = np.random.default_rng(1)
    rows = space.vocab_rows[rng.integers(0, args.vocab, args.tokens)]
    lengths = rng.integers(5, 81, args.tokens // 5)
    lengths = lengths[np.cumsum(lengths) <= args.tokens]
    lengths = np.append(lengths, args.tokens - lengths.sum()) if lengths.sum() < args.tokens else lengths
    print(f"W = {args.vocab:,} words, {args.tokens:,} tokens; document units of 5 to 80 tokens: {len(lengths):,} units")
    print(f"{'mechanism':14} {'sample':>12} {'sample_at =':>12} {'ratio':>6} {'documents':>12} {'ratio':>6}  tokens/s")
    for name in args.mechanisms.split(","):
        epsilon = EPSILON.get(name, 10.0)
        spec = parse({"name": name, "epsilon": epsilon})
        spec.prepare(space)
        mechanism = spec.build(space)
        same = np.full(args.tokens, epsilon)
        per_unit = units.allocate(lengths, 20.0 * epsilon, units.Allocation()).epsilons
        times = timed(mechanism, rows, {"same": same, "documents": per_unit}, args.repeats)
        rate = {k: args.tokens / statistics.median(v) for k, v in times.items()}
        print(
            f"{name:14} {rate['sample']:12,.0f} {rate['same']:12,.0f} {rate['same'] / rate['sample']:6.2f} "
            f"{rate['documents']:12,.0f} {rate['documents'] / rate['sample']:6.2f}"
        )


if __name__ == "__main__":
    main()
