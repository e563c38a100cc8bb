"""Throughput of release-vectors (issue: >= 1,000,000 vectors of dimension 300, local[2]).

Writes the vectors as Parquet (array<float>), runs `dpspark release-vectors` (PrivEmb,
β = 0.8 → m = 59) in a fresh process, and prints vectors/s next to the one-core rate
of the arithmetic alone, to show whether Arrow I/O or the mechanism bounds the job.

    python bench/bench_vectors.py [--rows 1000000] [--dim 300] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def write_vectors(path: Path, rows: int, dim: int) -> None:
    rng = np.random.default_rng(0)
    with pq.ParquetWriter(path, pa.schema([("id", pa.int64()), ("vec", pa.list_(pa.float32()))])) as w:
        for start in range(0, rows, 100_000):
            n = min(100_000, rows - start)
            flat = rng.standard_normal(n * dim, dtype=np.float32)
            vec = pa.ListArray.from_arrays(pa.array(np.arange(n + 1, dtype=np.int32) * dim), pa.array(flat))
            w.write_table(pa.table({"id": np.arange(start, start + n), "vec": vec}), row_group_size=50_000)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--dim", type=int, default=300)
    ap.add_argument("--smoke", action="store_true", help="a few seconds: 2,000 vectors of dimension 50")
    a = ap.parse_args()
    if a.smoke:
        a.rows, a.dim = 2_000, 50
    from dpspark.privemb import draw_projection, privemb, projection_dim

    m = projection_dim(a.dim, 1e-6, 0.8)
    x = np.random.default_rng(1).standard_normal((min(a.rows, 100_000), a.dim))
    phi = draw_projection(m, a.dim, np.random.default_rng(2))
    t0 = time.perf_counter()
    privemb(x, phi, 5.0, 0.8, np.random.default_rng(3))
    core = len(x) / (time.perf_counter() - t0)
    with tempfile.TemporaryDirectory(prefix="dpspark-bench-") as tmp:
        src, out = Path(tmp) / "in.parquet", Path(tmp) / "out"
        t0 = time.perf_counter()
        write_vectors(src, a.rows, a.dim)
        print(
            f"== release-vectors, local[2]: {a.rows:,} vectors of dimension {a.dim} -> m = {m} "
            f"(input written in {time.perf_counter() - t0:.0f} s, {src.stat().st_size / 2**20:,.0f} MiB)"
        )
        cmd = [
            str(Path(sys.executable).with_name("dpspark")),
            "release-vectors",
            "--input",
            str(src),
            "--output",
            str(out),
            "--column",
            "vec",
            "--epsilon",
            "5",
            "--beta",
            "0.8",
            "--master",
            "local[2]",
            "--quiet",
        ]
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)  # --quiet: stderr only on a failure
        wall = time.perf_counter() - t0
        mf = json.loads((out / "_dpspark_manifest.json").read_text())
    t = mf["timings"]
    print(
        f"  {mf['rows']:,} vectors in {t['transform_and_write_s']:.1f} s = "
        f"{mf['rows'] / t['transform_and_write_s']:,.0f} vectors/s "
        f"(read, release, write; the validation pass runs before); whole command {wall:.1f} s"
    )
    print(f"  the arithmetic alone (Φx + noise, numpy, one process): {core:,.0f} vectors/s")


if __name__ == "__main__":
    main()
