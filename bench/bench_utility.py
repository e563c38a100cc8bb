"""The privacy–utility loop on SMS spam in local[2] (issue 10): evaluate-utility over the
default grid (ε 1,2,5,10,20 × λ 0,0.5,1, R = 3, train-time and test-time, tfidf-logreg,
GloVe 50-d with a 5,000-word vocabulary), then privacy-risk over the same grid.

Prints the CPU model, the total time, the time per grid point and the tables; the bar is
≤ 10 minutes for evaluate-utility. Outputs stay in --output (default out/bench_utility).

    python bench/bench_utility.py [--output out/bench_utility] [--repeats 3] [--skip-risk]
    python bench/bench_utility.py --smoke   # 100 messages, one grid point, R = 1, 2,000 words, in a temporary folder
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
    ap.add_argument("--smoke", action="store_true", help="a few seconds: 100 messages, one grid point, R = 1")
    args = ap.parse_args()
    if args.smoke:
        with tempfile.TemporaryDirectory(prefix="dpspark-bench-utility-") as tmp:
            args.output, args.rows, args.epsilons, args.lambdas = tmp, 100, "10", "1"
            args.repeats, args.vocab_size, args.runs = 1, 2_000, 2
            return run(args)
    run(args)


def run(args: argparse.Namespace) -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    from dpspark.config import EvaluateUtilityConfig, RiskConfig
    from dpspark.evaluation.datasets import sms_spam
    from dpspark.spark.risk import run_privacy_risk
    from dpspark.spark.session import get_session
    from dpspark.spark.utility import run_evaluate_utility

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


if __name__ == "__main__":
    main()
