"""The privacy–utility loop on SMS spam in local[2] (issue 10): evaluate-utility over the
default grid (ε 1,2,5,10,20 × λ 0,0.5,1, R = 3, train-time and test-time, tfidf-logreg,
GloVe 50-d with a 5,000-word vocabulary), then privacy-risk over the same grid.

Prints the CPU model, the total time, the time per grid point and the tables; the bar is
≤ 10 minutes for evaluate-utility. Outputs stay in --output (default out/bench_utility).

    python bench/bench_utility.py [--output out/bench_utility] [--repeats 3] [--skip-risk]
    python bench/bench_utility.py --smoke   # 100 messages, one grid point, R = 1, 2,000 words, in a temporary folder
    python bench/bench_utility.py --engines spark,local --pairs 3 --skip-risk   # both engines, side by side

``--engines spark,local`` runs evaluate-utility on each engine in turn, ``--pairs`` times interleaved (the Spark
session started once, before the first pair; seed 1 on both, so their tables must be equal), and prints each run's
seconds and perturbed tokens/s, the medians, their ratio and whether the last pair's results are equal.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from cpu import cpu_line


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--output", default="out/bench_utility")
    ap.add_argument("--epsilons", default="1,2,5,10,20")
    ap.add_argument("--lambdas", default="0,0.5,1")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--vocab-size", type=int, default=5000)
    ap.add_argument("--model", default="tfidf-logreg")
    ap.add_argument("--runs", type=int, default=20, help="K of privacy-risk")
    ap.add_argument("--skip-risk", action="store_true")
    ap.add_argument("--rows", type=int, help="only the first ROWS messages (default: all)")
    ap.add_argument("--engines", default="spark", help="spark, local, or spark,local side by side (spark)")
    ap.add_argument("--pairs", type=int, default=3, help="runs per engine with --engines spark,local (3)")
    ap.add_argument("--smoke", action="store_true", help="a few seconds: 100 messages, one grid point, R = 1")
    args = ap.parse_args()
    if args.smoke:
        with tempfile.TemporaryDirectory(prefix="dpspark-bench-utility-") as tmp:
            args.output, args.rows, args.epsilons, args.lambdas = tmp, 100, "10", "1"
            args.repeats, args.vocab_size, args.runs, args.pairs, args.engines = 1, 2_000, 2, 1, "spark,local"
            return run(args)
    run(args)


def run(args: argparse.Namespace) -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    from dpspark.config import RiskConfig
    from dpspark.evaluation.datasets import sms_spam
    from dpspark.spark.risk import run_privacy_risk
    from dpspark.spark.session import get_session

    out = Path(args.output)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    data = sms_spam(out / "data", args.rows)
    print(f"CPU: {cpu_line()}; Spark local[2]; data {data}")
    t0 = time.perf_counter()
    spark = get_session("local[2]")
    spark.sparkContext.setLogLevel("ERROR")
    print(f"session start: {time.perf_counter() - t0:.1f} s")

    grid = {"epsilons": args.epsilons, "lambdas": args.lambdas, "vocab_size": args.vocab_size}
    engines = args.engines.split(",")
    if len(engines) > 1:
        side_by_side(args, data, out, grid, spark, engines)
    else:
        single(args, data, out, grid, spark)
    if not args.skip_risk:
        risk = RiskConfig.parse(
            {"input": data, "text_column": "text", "output": str(out / "risk"), "runs": args.runs, **grid}
        )
        t0 = time.perf_counter()
        r = run_privacy_risk(risk, spark)
        took = time.perf_counter() - t0
        print(f"privacy-risk: {took:.1f} s, {r['draws']:,} draws; timings {json.dumps(r['timings'])}")
        print((out / "risk" / "summary.md").read_text(encoding="utf-8"))
    spark.stop()


def single(args: argparse.Namespace, data: str, out: Path, grid: dict, spark: object) -> None:
    """evaluate-utility once on Spark, with its timings and summary."""
    from dpspark.config import EvaluateUtilityConfig
    from dpspark.spark.utility import run_evaluate_utility

    config = EvaluateUtilityConfig.parse(
        {
            "input": data,
            "text_column": "text",
            "label_column": "label",
            "output": str(out / "utility"),
            "repeats": args.repeats,
            "model": args.model,
            **grid,
        }
    )
    t0 = time.perf_counter()
    m = run_evaluate_utility(config, spark)
    total = time.perf_counter() - t0
    t = m["timings"]
    print(
        f"evaluate-utility: {total:.1f} s total ({total / 60:.1f} min; bar 10 min); "
        f"preparation {t['preparation_s']} s, "
        f"baseline {t['baseline_s']} s, {t['grid_points']} grid points in {t['grid_s']} s = "
        f"{t['per_grid_point_s']} s per grid point (R = {args.repeats}, train-time + test-time)"
    )
    print((out / "utility" / "summary.md").read_text(encoding="utf-8"))


def side_by_side(args: argparse.Namespace, data: str, out: Path, grid: dict, spark: object, engines: list[str]) -> None:
    """evaluate-utility on each engine, ``args.pairs`` times interleaved: seconds, perturbed tokens/s, medians."""
    import statistics

    import pyarrow.parquet as pq

    from dpspark import local
    from dpspark.config import EvaluateUtilityConfig
    from dpspark.spark.utility import run_evaluate_utility
    from dpspark.text import tokenize

    tokens = sum(len(tokenize(t)[0]) for t in pq.read_table(data).column("text").to_pylist() if t)
    times: dict[str, list[float]] = {e: [] for e in engines}
    results: dict[str, object] = {}
    for pair in range(args.pairs):
        for engine in engines:
            config = EvaluateUtilityConfig.parse(
                {"input": data, "text_column": "text", "label_column": "label", "repeats": args.repeats}
                | {"model": args.model, "engine": engine, "output": str(out / f"utility-{engine}-{pair}"), **grid}
                | {"seed": 1}  # the same draws on both engines: their tables must be equal
            )
            t0 = time.perf_counter()
            m = run_evaluate_utility(config, spark) if engine == "spark" else local.evaluate_utility(config)
            took = time.perf_counter() - t0
            times[engine].append(took)
            perturbed = tokens * args.repeats * m["timings"]["grid_points"]
            print(f"pair {pair + 1} {engine:<5}: {took:6.1f} s, {perturbed / took:,.0f} perturbed tokens/s")
            results[engine] = pq.read_table(out / f"utility-{engine}-{pair}" / "results.parquet")
    medians = {e: statistics.median(t) for e, t in times.items()}
    print(f"{tokens:,} tokens in the data; medians: " + ", ".join(f"{e} {v:.1f} s" for e, v in medians.items()))
    a, b = engines[:2]
    print(
        f"{a} / {b}: {medians[a] / medians[b]:.2f}; the last pair's results.parquet equal: {results[a] == results[b]}"
    )


if __name__ == "__main__":
    main()
