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
    python bench/bench_demo.py --smoke   # 5,000 words, one run (this tree against itself) and one logged run

The baseline runs with this interpreter and ``PYTHONPATH=<baseline>``, so both use the same
installed libraries and read the same input (this tree's examples/reviews.parquet); only
dpspark's code differs.

``--breakdown`` runs each tree once more with Spark's INFO log (millisecond timestamps, a
log4j file of this script's) and splits perturb-and-write into: planning (from the bundle's
``addArchive`` to the write job's start: the DataFrame plan, its analysis and code generation),
the write's job(s), and inside them the Python runner's own times of its slowest task (boot:
daemon and worker start; init: the UDF's unpickling and imports; finish: bundle load,
perturbation and output), then the commit. Logging costs a little, so these runs are not
counted in the medians.
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
from pathlib import Path

from cpu import cpu_line

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "examples" / "reviews.parquet"


# The log goes to a file: under --quiet, dpspark drops the local JVM's stderr once the session is up.
LOG4J = """rootLogger.level = info
rootLogger.appenderRef.file.ref = file
appender.file.type = File
appender.file.name = file
appender.file.fileName = {path}
appender.file.append = false
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{HH:mm:ss.SSS}} %p %c{{1}}: %m%n
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = info
"""


def jvm_opts(tree: Path) -> str:
    """The JVM flags a tree's local session sets (dpspark.spark.session.local_jvm_flags, or the
    _LOCAL_JVM_OPTS string of older trees): the logged run replaces SPARK_SUBMIT_OPTS, so it
    passes them on."""
    code = "from dpspark.spark.session import local_jvm_flags as f; print(f())"
    env = {**os.environ, "PYTHONPATH": str(tree)}
    p = subprocess.run([sys.executable, "-c", code], cwd=tree, env=env, capture_output=True, text=True)
    if p.returncode == 0:
        return p.stdout.strip()
    m = re.search(r'^_LOCAL_JVM_OPTS = "([^"]*)"', (tree / "dpspark/spark/session.py").read_text(), re.M)
    return m.group(1) if m else ""


def _ms(stamp: str) -> float:
    h, m, s = stamp.split(":")
    return (int(h) * 60 + int(m)) * 60_000 + float(s) * 1000


def breakdown(log: str) -> dict[str, float]:
    """Phases of the write (seconds) from a Spark INFO log (see the module docstring)."""
    stamps: dict[str, float] = {}
    out: dict[str, float] = {}
    for line in log.splitlines():
        m = re.match(r"(\d\d:\d\d:\d\d\.\d{3}) ", line)
        if not m:
            continue
        t = _ms(m.group(1))
        if "Added archive" in line:
            stamps["shipped"] = t
        elif "Starting job:" in line and "shipped" in stamps:
            stamps.setdefault("job_start", t)  # the write's first job (a shuffle may add more)
        elif re.search(r"Job \d+ finished:", line):
            stamps["job_end"] = t
        elif "FileFormatWriter: Finished processing stats" in line:
            stamps["committed"] = t
        elif "Times: total" in line:  # several tasks: the slowest (the first on each worker)
            for k, v in re.findall(r"(total|boot|init|finish) = (-?\d+)", line):
                out[f"python_{k}"] = max(out.get(f"python_{k}", 0.0), int(v) / 1000)
    out["planning"] = (stamps["job_start"] - stamps["shipped"]) / 1000
    out["jobs"] = (stamps["job_end"] - stamps["job_start"]) / 1000
    out["commit"] = (stamps["committed"] - stamps["job_end"]) / 1000
    return out


def run(tree: Path, out: Path, log4j: Path | None = None, extra: tuple[str, ...] = ()) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    if log4j is not None:
        env["SPARK_SUBMIT_OPTS"] = f"{jvm_opts(tree)} -Dlog4j2.configurationFile=file:{log4j}"
    cmd = [sys.executable, "-c", "import sys; from dpspark.cli import main; sys.exit(main())"]
    cmd += ["perturb", "--config", "conf/perturb.yaml", "--epsilon", "6", "--output", str(out), "--quiet"]
    cmd += ["--input", str(SAMPLE), *extra]  # both trees read this tree's sample: only the code differs
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"{tree}: exit {p.returncode}\n{p.stderr[-3000:]}")
    t = json.loads((out / "_dpspark_manifest.json").read_text())["timings"]
    write = t.get("transform_and_write_s", t.get("perturb_and_write_s"))
    r = {"write_s": write, "prep_s": t.get("preparation_s"), "wall_s": wall}
    if log4j is not None:
        r["phases"] = breakdown((log4j.parent / "spark.log").read_text())
    return r


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", type=Path, help="a checkout (git worktree) to compare with")
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--breakdown", action="store_true", help="also split perturb-and-write into phases")
    ap.add_argument("--smoke", action="store_true", help="5,000 words, one run for both trees (this one), a breakdown")
    a = ap.parse_args()
    extra = ("--vocab-size", "5000") if a.smoke else ()
    if a.smoke:
        a.baseline, a.pairs, a.breakdown = a.baseline or ROOT, 1, True
    if a.baseline is None:
        ap.error("--baseline is required (or --smoke)")
    print(f"CPU: {cpu_line()}; python {sys.version.split()[0]}")
    trees = {"baseline": a.baseline.resolve(), "this": ROOT}
    results: dict[str, list[dict]] = {k: [] for k in trees}
    with tempfile.TemporaryDirectory(prefix="dpspark-bench-demo-") as tmp:
        for i in range(a.pairs):
            order = list(trees) if i % 2 == 0 else list(reversed(trees))
            same: dict[Path, dict] = {}  # the smoke's two trees are one: its run stands for both
            for name in order:
                r = same.get(trees[name]) if a.smoke else None
                r = r or run(trees[name], Path(tmp) / f"{name}-{i}", extra=extra)
                same[trees[name]] = r
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
    if a.breakdown:
        with tempfile.TemporaryDirectory(prefix="dpspark-bench-demo-") as tmp:
            log4j = Path(tmp) / "log4j2.properties"
            log4j.write_text(LOG4J.format(path=Path(tmp) / "spark.log"))
            print("== breakdown of perturb-and-write, one logged run each (s)")
            # The smoke's baseline is this tree: one logged run covers the code.
            for name, tree in list(trees.items())[-1:] if a.smoke else trees.items():
                r = run(tree, Path(tmp) / f"{name}-logged", log4j, extra)
                phases = ", ".join(f"{k} {v:.2f}" for k, v in r["phases"].items())
                print(f"  {name:>8}: perturb-and-write {r['write_s']:.2f}: {phases}")


if __name__ == "__main__":
    main()
