"""Small-job latency: `make demo`'s perturb command, this checkout against a baseline checkout.

Runs the demo's command (conf/perturb.yaml: 500 rows of examples/reviews.parquet, ε = 10,
λ = 1, 50,000 words, exact search) in `local[2]`, alternating this tree and the baseline
tree so that both see the same machine load, and prints per run and as medians:
  - perturb-and-write: the manifest's transform_and_write_s (perturb_and_write_s in
    checkouts from before the one release path);
  - preparation: the manifest's preparation_s;
  - the whole command's wall-clock time, Spark's start included.

    git worktree add /tmp/base <commit>
    python bench/bench_demo.py --baseline /tmp/base [--pairs 4]

The baseline runs with this interpreter and ``PYTHONPATH=<baseline>``, so both use the same
installed libraries; only dpspark's code differs.
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

ROOT = Path(__file__).resolve().parents[1]


def run(tree: Path, out: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = [sys.executable, "-c", "import sys; from dpspark.cli import main; sys.exit(main())"]
    cmd += ["perturb", "--config", "conf/perturb.yaml", "--epsilon", "10", "--output", str(out), "--quiet"]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"{tree}: exit {p.returncode}\n{p.stderr[-3000:]}")
    t = json.loads((out / "_dpspark_manifest.json").read_text())["timings"]
    write = t.get("transform_and_write_s", t.get("perturb_and_write_s"))
    return {"write_s": write, "prep_s": t.get("preparation_s"), "wall_s": wall}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", required=True, type=Path, help="a checkout (git worktree) to compare with")
    ap.add_argument("--pairs", type=int, default=4)
    a = ap.parse_args()
    print(f"CPU: {cpu_line()}; python {sys.version.split()[0]}")
    trees = {"baseline": a.baseline.resolve(), "this": ROOT}
    results: dict[str, list[dict]] = {k: [] for k in trees}
    with tempfile.TemporaryDirectory(prefix="dpspark-bench-demo-") as tmp:
        for i in range(a.pairs):
            order = list(trees) if i % 2 == 0 else list(reversed(trees))
            for name in order:
                r = run(trees[name], Path(tmp) / f"{name}-{i}")
                results[name].append(r)
                print(
                    f"  pair {i + 1} {name:>8}: perturb-and-write {r['write_s']:6.2f} s, "
                    f"preparation {r['prep_s']:5.2f} s, command {r['wall_s']:6.2f} s",
                    flush=True,
                )
    keys = ("write_s", "prep_s", "wall_s")
    med = {k: {m: statistics.median(r[m] for r in v) for m in keys} for k, v in results.items()}
    print(f"== medians of {a.pairs} interleaved pairs")
    for m, label in (("write_s", "perturb-and-write"), ("prep_s", "preparation"), ("wall_s", "whole command")):
        b, t = med["baseline"][m], med["this"][m]
        print(f"  {label:>17}: baseline {b:6.2f} s, this {t:6.2f} s, {b / t:5.2f}x")


if __name__ == "__main__":
    main()
