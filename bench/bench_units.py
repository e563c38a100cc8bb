"""Privacy units at the samplers: every mechanism drawing each token at its own ε (``sample_at``) against
``sample`` at one ε, side by side in one run.

Three ways of drawing the same tokens, interleaved, each repeated and the median kept:
- ``sample``: every token at ε (today's path, the token unit);
- ``sample_at`` with every εᵢ = ε: the unit path when all tokens share one ε (the must-show: within 10% of
  ``sample``);
- ``sample_at`` with a document unit's allocation: units of 5 to 80 tokens under ``scale`` at a budget
  E = 20·ε, so each token gets E/n (tens of distinct ε per batch).

Prints tokens/s of each and the ratios to ``sample``, with the CPU line.

``--releases N``: then the whole release, side by side in one local[2] Spark session: ``dpspark.release`` of
the same Parquet input (N tokens of public words, texts of 5 to 80 tokens, a ``user_id`` shared by every
tenth row) per token at ε, per document at E = 20·ε and per user (``column:user_id``) at E = 200·ε, in turn,
``--pairs`` times; the manifests' transform-and-write seconds and those plus the preparation (where a
``column:`` unit's count pass runs), medians and their ratios to the token unit (the issue's bars: the
document unit within 1.05×, the column unit within 1.5×).

    python bench/bench_units.py [--vocab 20000] [--tokens 20000] [--repeats 5] [--mechanisms a,b]
                                [--releases 400000 --pairs 3 --mechanism mahalanobis] [--smoke]
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


def releases(tokens: int, vocab: int, pairs: int, mechanism: str) -> None:
    """The release per token and per document, side by side (see the module docstring)."""
    import tempfile
    from pathlib import Path

    import pyarrow as pa
    import pyarrow.parquet as pq

    import dpspark
    from dpspark.spark.session import get_session

    glove = load_default()
    rng = np.random.default_rng(2)
    lengths = rng.integers(5, 81, tokens // 5 + 1)
    lengths = lengths[: int(np.searchsorted(np.cumsum(lengths), tokens)) + 1]
    words = np.asarray(glove.words[:50_000], dtype=object)[rng.integers(0, 50_000, int(lengths.sum()))]
    starts = np.cumsum(lengths) - lengths
    texts = [" ".join(words[s : s + n]) for s, n in zip(starts, lengths)]
    epsilon = EPSILON.get(mechanism, 10.0)
    with tempfile.TemporaryDirectory(prefix="dpspark-bench-units-") as tmp:
        src = Path(tmp) / "in.parquet"
        users = [f"u{i % max(len(texts) // 10, 1)}" for i in range(len(texts))]
        table = pa.table({"id": np.arange(len(texts)), "user_id": users, "text": texts})
        pq.write_table(table, src, row_group_size=5_000)
        spark = get_session(master="local[2]")
        df = spark.read.parquet(str(src))
        ways = {
            "token": {"epsilon": epsilon},
            "document": {"privacy_unit": "document", "unit_budget": 20 * epsilon},
            "column": {"privacy_unit": "column:user_id", "unit_budget": 200 * epsilon},
        }
        times: dict[str, list[float]] = {k: [] for k in ways}
        whole: dict[str, list[float]] = {k: [] for k in ways}
        for p in range(pairs + 1):  # the first round warms the session and the bundle caches: not counted
            for kind, unit in ways.items():
                out = str(Path(tmp) / f"{kind}-{p}")
                m = dpspark.release(df, out, ["text"], mechanism=mechanism, vocab_size=vocab, **unit)
                if p:
                    times[kind].append(m["timings"]["transform_and_write_s"])
                    whole[kind].append(m["timings"]["transform_and_write_s"] + m["timings"]["preparation_s"])
        spark.stop()
    med = {k: statistics.median(v) for k, v in times.items()}
    med_whole = {k: statistics.median(v) for k, v in whole.items()}
    total = int(lengths.sum())
    print(f"\nreleases: {len(texts):,} rows, {total:,} tokens (texts of 5 to 80), {mechanism}, W = {vocab:,}, local[2]")
    print(f"  {len(set(users)):,} users of about 10 rows each (column:user_id)")
    for kind in ways:
        print(
            f"  {kind:9} transform and write {med[kind]:7.2f} s ({total / med[kind]:,.0f} tokens/s), with the "
            f"preparation {med_whole[kind]:7.2f} s; runs {times[kind]}"
        )
    for kind in ("document", "column"):
        print(
            f"  {kind} / token: transform and write {med[kind] / med['token']:.3f}, with the preparation "
            f"{med_whole[kind] / med_whole['token']:.3f}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", type=int, default=20_000)
    ap.add_argument("--tokens", type=int, default=20_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--mechanisms", default=",".join(n for n in REGISTRY if n != "truncated-gumbel"))
    ap.add_argument("--releases", type=int, default=0, help="tokens of the release comparison (0: none)")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--mechanism", default="mahalanobis", help="the release comparison's mechanism")
    ap.add_argument("--smoke", action="store_true", help="a few seconds: 2,000 words, 2,000 tokens, 1 repeat")
    args = ap.parse_args()
    if args.smoke:
        args.vocab, args.tokens, args.repeats, args.mechanisms = 2000, 2000, 1, "laplace,santext,custext"
        args.releases, args.pairs = 3000, 1
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
    if args.releases:
        releases(args.releases, args.vocab, args.pairs, args.mechanism)


if __name__ == "__main__":
    main()
