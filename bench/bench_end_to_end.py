"""End-to-end `dpspark perturb` in local[2] against the one-core in-process rate, on the same text.

Builds a Parquet file of >= 1,000,000 tokens by resampling the texts of
examples/reviews.parquet (real English words, punctuation, out-of-vocabulary tokens,
nulls), twice: in 16 row groups, which Spark reads as a split per core, and as one row
group (as pyarrow and pandas write up to 1 M rows), which Spark reads as one task and
dpspark spreads over the cores through an encrypted shuffle. Then, per repeat, back to
back so that all see the same load on a shared machine:

  1. in-process, one core: ``TextPerturber.perturb_array`` on 10,000-row batches (Spark's
     Arrow batch size in dpspark) of the same rows, in a fresh interpreter with one BLAS
     thread (``--inprocess-tokens`` of them: the rate does not depend on the total);
  2. end-to-end: ``dpspark perturb --master local[2]`` (the CLI's ``main``) in a fresh
     process, on the 16-group file and then on the one-group file; tokens/s over the
     manifest's transform_and_write_s (read, perturb, write, commit), whole-process wall and
     CPU time (driver, JVM, Python workers) beside it;
  3. the local engine: ``dpspark perturb --engine local`` (one process, no JVM: the same release path, the
     partitions' transform in this process on one core) on the 16-group file, its tokens/s on the same
     terms, and the ratio of Spark's rate to it.

Both use the settings of conf/perturb.yaml (Mahalanobis λ = 1, ε = 10, 50,000 words,
exact search). Prints the CPU model, both rates per repeat, their medians and the ratio
(the target on 2 cores is >= 1.6x, and the one-group file within 10% of the 16-group one),
and per repeat the cores each run got and its CPU
cost per token. On a shared machine the wall-clock ratio says little by itself: Linux
shares the CPUs between sessions (autogroup), not threads, so while other sessions are
busy a run of two workers gets no more CPU than a run of one, and the ratio falls to
the ratio of CPU costs.

    python bench/bench_end_to_end.py [--tokens 1000000] [--repeats 3] [--master local[2]] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from cpu import cpu_line

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SETTINGS = ["--epsilon", "10", "--mechanism", "mahalanobis", "--lambda", "1", "--nn", "exact"]
BATCH_ROWS = 10_000


def make_input(path: Path, n_tokens: int, groups: int = 16) -> tuple[int, int]:
    """Resample the example reviews into ``path`` until they hold ``n_tokens`` tokens, in ``groups``
    row groups; (rows, tokens)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from dpspark.text import tokenize

    texts = pq.read_table(ROOT / "examples" / "reviews.parquet").column("text").to_pylist()
    lengths = np.array([len(tokenize(t)[0]) if t else 0 for t in texts])
    rng = np.random.default_rng(0)
    picks = rng.integers(0, len(texts), size=int(1.2 * n_tokens / lengths.mean()) + 1)
    rows = int(np.searchsorted(np.cumsum(lengths[picks]), n_tokens)) + 1
    picks = picks[:rows]
    table = pa.table(
        {
            "id": np.arange(rows),
            "text": pa.array([texts[i] for i in picks], pa.string()),
            "rating": rng.integers(1, 6, rows).astype(np.int32),
        }
    )
    pq.write_table(table, path, row_group_size=-(-rows // groups))
    return rows, int(lengths[picks].sum())


INPROCESS = """
import json, os, sys, time
import dpspark  # first: its BLAS kernel choice precedes numpy
import numpy as np, pyarrow.parquet as pq
from dpspark.config import PerturbConfig
from dpspark.prepare import prepare
path, n_tokens, batch_rows, settings = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4])
texts = pq.read_table(path, columns=["text"]).column("text").combine_chunks()
perturber = prepare(PerturbConfig(**settings)).perturber()
perturber.perturb_array(texts.slice(0, 200), np.random.default_rng(1))  # warm-up: page in the matrices
rng, tokens, t0, c0 = np.random.default_rng(2), 0, time.perf_counter(), time.process_time()
for start in range(0, len(texts), batch_rows):
    tokens += int(perturber.perturb_array(texts.slice(start, batch_rows), rng)[1][:, 0].sum())
    if tokens >= n_tokens:
        break
print(json.dumps({"tokens": tokens, "seconds": time.perf_counter() - t0, "cpu_s": time.process_time() - c0}))
"""


def inprocess(path: Path, n_tokens: int, vocab: int) -> dict:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    settings = {"epsilon": 10.0, "mechanism": "mahalanobis", "lam": 1.0, "vocab_size": vocab, "nn": "exact"}
    cmd = [sys.executable, "-c", INPROCESS, str(path), str(n_tokens), str(BATCH_ROWS), json.dumps(settings)]
    out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, text=True, cwd=ROOT, check=True)
    r = json.loads(out.stdout.strip().splitlines()[-1])
    return {**r, "tokens_per_s": r["tokens"] / r["seconds"]}


END_TO_END = """
import json, os, sys, time
from pathlib import Path
from dpspark.cli import main

def cpu(pid):  # CPU seconds of a live process and of its children that have exited
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(x) for x in f[11:15]) / os.sysconf("SC_CLK_TCK")

def tree(pid):  # the process and its live descendants (the JVM, the Python daemon and workers)
    kids = [k for t in Path(f"/proc/{pid}/task").iterdir() for k in (t / "children").read_text().split()]
    return cpu(pid) + sum(tree(int(k)) for k in kids)

t0 = time.perf_counter()
assert main(sys.argv[1:]) == 0
wall = time.perf_counter() - t0
print(json.dumps({"wall_s": wall, "cpu_s": tree(os.getpid())}))
"""


def end_to_end(path: Path, out: Path, master: str | None, vocab: int) -> dict:
    """`dpspark perturb` (the CLI's main, in a fresh process that measures its own CPU tree); ``master`` None:
    on the local engine."""
    args = ["perturb", "--input", str(path), "--output", str(out), "--columns", "text", *SETTINGS]
    where = ["--engine", "local"] if master is None else ["--master", master]
    cmd = [sys.executable, "-c", END_TO_END, *args, "--vocab-size", str(vocab), *where, "--quiet"]
    # stderr passes through: a failure's message and traceback (--quiet keeps it empty otherwise)
    p = subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    r = json.loads(p.stdout.splitlines()[-1])
    m = json.loads((out / "_dpspark_manifest.json").read_text())
    t = m["timings"]
    return {
        "tokens": m["counts"]["tokens"],
        "transform_and_write_s": t["transform_and_write_s"],
        "preparation_s": t["preparation_s"],
        "process_wall_s": r["wall_s"],
        "process_cpu_s": r["cpu_s"],
        "tokens_per_s": m["counts"]["tokens"] / t["transform_and_write_s"],
        "spread": m.get("spread"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=1_000_000, help="tokens of the end-to-end input")
    ap.add_argument("--inprocess-tokens", type=int, default=200_000, help="tokens perturbed in-process per repeat")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--vocab-size", type=int, default=50_000)
    ap.add_argument("--smoke", action="store_true", help="a few seconds: 5,000 tokens, 5,000 words, one repeat")
    a = ap.parse_args()
    if a.smoke:
        a.tokens, a.inprocess_tokens, a.repeats, a.vocab_size = 5_000, 2_000, 1, 5_000

    print(f"CPU: {cpu_line()}; load average {os.getloadavg()[0]:.1f} at start")
    with tempfile.TemporaryDirectory(prefix="dpspark-e2e-") as tmp:
        src, single = Path(tmp) / "reviews_resampled.parquet", Path(tmp) / "reviews_one_group.parquet"
        rows, tokens = make_input(src, a.tokens)
        make_input(single, a.tokens, groups=1)
        print(f"input: {rows:,} rows, {tokens:,} tokens (examples/reviews.parquet resampled), 16 row groups and 1")
        one, e2e, e2e_single, here = [], [], [], []
        for r in range(a.repeats):
            i = inprocess(src, a.inprocess_tokens, a.vocab_size)
            e = end_to_end(src, Path(tmp) / f"out{r}", a.master, a.vocab_size)
            s = end_to_end(single, Path(tmp) / f"single{r}", a.master, a.vocab_size)
            lo = end_to_end(src, Path(tmp) / f"local{r}", None, a.vocab_size)
            here.append(lo["tokens_per_s"])
            one.append(i["tokens_per_s"])
            e2e.append(e["tokens_per_s"])
            e2e_single.append(s["tokens_per_s"])
            print(
                f"  repeat {r + 1}: in-process one core {i['tokens_per_s']:,.0f} tokens/s ({i['tokens']:,} tokens); "
                f"end-to-end {a.master}, 16 groups {e['tokens_per_s']:,.0f} tokens/s ({e['tokens']:,} tokens in "
                f"{e['transform_and_write_s']:.1f} s, preparation {e['preparation_s']:.1f} s, whole process "
                f"{e['process_wall_s']:.1f} s); ratio {e['tokens_per_s'] / i['tokens_per_s']:.2f}x",
                flush=True,
            )
            print(
                f"    one group {s['tokens_per_s']:,.0f} tokens/s ({s['transform_and_write_s']:.1f} s, spread "
                f"{s['spread']}); ratio to one core {s['tokens_per_s'] / i['tokens_per_s']:.2f}x, to 16 groups "
                f"{s['tokens_per_s'] / e['tokens_per_s']:.2f}x",
                flush=True,
            )
            print(
                f"    local engine {lo['tokens_per_s']:,.0f} tokens/s ({lo['transform_and_write_s']:.1f} s, "
                f"preparation {lo['preparation_s']:.1f} s, whole process {lo['process_wall_s']:.1f} s); "
                f"{a.master} 16 groups over local: {e['tokens_per_s'] / lo['tokens_per_s']:.2f}x",
                flush=True,
            )
            # CPU seconds say what the wall clock hides on a shared machine: how much of a core
            # each run got, and what a token costs in CPU (the end-to-end figure includes the
            # JVM, session start and preparation).
            print(
                f"    cores used: in-process {i['cpu_s'] / i['seconds']:.2f}, end-to-end "
                f"{e['process_cpu_s'] / e['process_wall_s']:.2f} "
                f"(one group {s['process_cpu_s'] / s['process_wall_s']:.2f}); "
                f"CPU ms per 1,000 tokens: in-process {1e6 * i['cpu_s'] / i['tokens']:.0f}, end-to-end "
                f"{1e6 * e['process_cpu_s'] / e['tokens']:.0f} "
                f"(one group {1e6 * s['process_cpu_s'] / s['tokens']:.0f})",
                flush=True,
            )
    m1, me, ms = statistics.median(one), statistics.median(e2e), statistics.median(e2e_single)
    ml = statistics.median(here)
    print(
        f"median: in-process one core {m1:,.0f} tokens/s; end-to-end {a.master}: 16 groups {me:,.0f} tokens/s, "
        f"one group {ms:,.0f} tokens/s; local engine {ml:,.0f} tokens/s ({a.master} 16 groups over local: "
        f"{me / ml:.2f}x)"
    )
    print(
        f"ratio of medians to one core: 16 groups {me / m1:.2f}x, one group {ms / m1:.2f}x (target on 2 cores: >= 1.6x)"
    )
    print(f"one group / 16 groups: {ms / me:.2f} (target: within 10%)")
    print(f"load average {os.getloadavg()[0]:.1f} at end")


if __name__ == "__main__":
    main()
