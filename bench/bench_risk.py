"""privacy-risk at its defaults (the default grid: laplace and mahalanobis λ 0.5, 1 at ε 4, 5, 6, 8, 10;
K = 20; the 50,000-word vocabulary; exact search) on SMS spam in local[2], this checkout against a
baseline checkout.

Prints per run and as medians: the whole command's wall time, the manifest's risk_s, the draws per
second, and the longest wait between two of dpspark's log lines once the work started (the bar: a
progress line at least every 30 s).

    git worktree add /tmp/base <commit>
    python bench/bench_risk.py --baseline /tmp/base [--rows 1000] [--pairs 1]
    python bench/bench_risk.py --rows 4837          # this tree only, all of SMS spam
    python bench/bench_risk.py --smoke              # 60 rows, two settings, 2,000 words: that it runs

The baseline runs with this interpreter and ``PYTHONPATH=<baseline>``, reading the same input, so only
dpspark's code differs; the two trees alternate so that both see the same load.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from cpu import cpu_line

ROOT = Path(__file__).resolve().parents[1]


def longest_silence(log: str) -> float:
    """Seconds of the longest gap between two of dpspark's timestamped log lines."""
    stamps = [
        datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f")
        for m in re.finditer(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO dpspark", log, re.M)
    ]
    return max(((b - a).total_seconds() for a, b in zip(stamps, stamps[1:])), default=0.0)


def run(tree: Path, data: Path, out: Path, extra: list[str]) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree), "OPENBLAS_NUM_THREADS": "1"}
    cmd = [sys.executable, "-c", "import sys; from dpspark.cli import main; sys.exit(main())", "privacy-risk"]
    cmd += ["--input", str(data), "--text-column", "text", "--output", str(out), "--master", "local[2]", *extra]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"{tree}: exit {p.returncode}\n{p.stderr[-3000:]}")
    m = json.loads((out / "_dpspark_manifest.json").read_text())
    draws = m["draws"] + m["fit_draws_added"]
    return {"wall_s": wall, "risk_s": m["timings"]["risk_s"], "draws": draws, "silence_s": longest_silence(p.stderr)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", type=Path, help="a checkout (git worktree) to compare with")
    ap.add_argument("--rows", type=int, default=4837, help="the first N messages of SMS spam (all: 4,837)")
    ap.add_argument("--pairs", type=int, default=1)
    ap.add_argument("--smoke", action="store_true", help="60 rows, two settings, 2,000 words; this tree only")
    a = ap.parse_args()
    extra = ["--mechanisms", "laplace", "--epsilons", "5,10", "--vocab-size", "2000"] if a.smoke else []
    rows = 60 if a.smoke else a.rows
    print(f"CPU: {cpu_line()}; python {sys.version.split()[0]}; {rows} rows, {'smoke grid' if a.smoke else 'defaults'}")
    trees = {"this": ROOT} if a.baseline is None else {"baseline": a.baseline.resolve(), "this": ROOT}
    sys.path.insert(0, str(ROOT))
    from dpspark.evaluation.datasets import sms_spam

    results: dict[str, list[dict]] = {k: [] for k in trees}
    with tempfile.TemporaryDirectory(prefix="dpspark-bench-risk-") as tmp:
        data = sms_spam(Path(tmp) / "sms", rows=rows)
        for i in range(1 if a.smoke else a.pairs):
            for name in list(trees) if i % 2 == 0 else list(reversed(trees)):
                r = run(trees[name], data, Path(tmp) / f"{name}-{i}", extra)
                results[name].append(r)
                print(
                    f"  run {i + 1} {name:>8}: command {r['wall_s']:7.1f} s, risk {r['risk_s']:7.1f} s, "
                    f"{r['draws'] / r['risk_s']:9,.0f} draws/s, longest silence {r['silence_s']:5.1f} s",
                    flush=True,
                )
    med = {k: {m: statistics.median(r[m] for r in v) for m in ("wall_s", "risk_s")} for k, v in results.items()}
    for k, v in med.items():
        print(f"== median {k}: command {v['wall_s']:.1f} s, risk {v['risk_s']:.1f} s")
    if "baseline" in med:
        b, t = med["baseline"], med["this"]
        print(f"== baseline / this: command {b['wall_s'] / t['wall_s']:.2f}x, risk {b['risk_s'] / t['risk_s']:.2f}x")


if __name__ == "__main__":
    main()
