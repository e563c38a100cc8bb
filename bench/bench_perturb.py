"""Benchmark of the perturb job (issue: GloVe 50-d, Mahalanobis λ = 1, ε = 10, exact search).

Prints tokens/s for
  1. in-process, one core, vocabulary 400,000 and 50,000 (median of repeats): dpspark's
     default BLAS kernel choice (dpspark/_blas.py) and OpenBLAS's own choice side by side;
  2. end-to-end `dpspark perturb` in local[2] on >= 1,000,000 tokens of Parquet text,
     with one-off preparation reported separately, and its ratio to the one-core rate;
  3. pypantera and mldp-text on the same tokens with the 50,000-word vocabulary, as
     ratios (needs bench/.peers-venv: `make bench-peers-venv`; skipped with a note if absent).

    python bench/bench_perturb.py [--quick | --smoke] [--e2e-vocab 50000] [--skip-e2e] [--skip-peers]
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

from cpu import cpu_line

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PEERS_PY = HERE / ".peers-venv" / "bin" / "python"


def run_json(cmd: list[str], env: dict | None = None) -> dict:
    out = subprocess.run(cmd, env={**os.environ, **(env or {})}, capture_output=True, text=True, cwd=ROOT)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def inprocess(vocab: int, tokens: int, repeats: int, keep_openblas_choice: bool, exact: str) -> dict:
    env = {
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "DPSPARK_KEEP_BLAS": "1" if keep_openblas_choice else "0",
        "DPSPARK_EXACT": exact,
    }
    cmd = [
        sys.executable,
        str(HERE / "inprocess.py"),
        "--vocab-size",
        str(vocab),
        "--tokens",
        str(tokens),
        "--repeats",
        str(repeats),
    ]
    return run_json(cmd, env)


def make_parquet(path: Path, n_tokens: int) -> int:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    sys.path.insert(0, str(HERE))
    from inprocess import token_texts

    from dpspark.embeddings import load_default

    texts = token_texts(load_default().words, n_tokens)
    n = len(texts)
    table = pa.table({"id": np.arange(n), "text": texts, "score": np.random.default_rng(1).random(n)})
    # Row groups of 5,000 rows (≈ 110,000 tokens): Parquet splits only at row-group boundaries,
    # so ten of them give both cores an even share (20,000 left one core idle for the last third).
    pq.write_table(table, path, row_group_size=5_000)
    return n


def end_to_end(vocab: int, n_tokens: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="dpspark-bench-") as tmp:
        src = Path(tmp) / "in.parquet"
        rows = make_parquet(src, n_tokens)
        out = Path(tmp) / "out"
        t0 = time.perf_counter()
        cmd = [
            str(Path(sys.executable).with_name("dpspark")),
            "perturb",
            "--input",
            str(src),
            "--output",
            str(out),
            "--columns",
            "text",
            "--epsilon",
            "10",
            "--lambda",
            "1",
            "--vocab-size",
            str(vocab),
            "--master",
            "local[2]",
            "--quiet",
        ]
        subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)  # --quiet: stderr only on a failure
        wall = time.perf_counter() - t0
        m = json.loads((out / "_dpspark_manifest.json").read_text())
    t = m["timings"]
    return {
        "vocab_size": vocab,
        "rows": rows,
        "tokens": m["counts"]["tokens"],
        "tokens_per_s": m["counts"]["tokens"] / t["transform_and_write_s"],
        "preparation_s": t["preparation_s"],
        "perturb_and_write_s": t["transform_and_write_s"],
        "process_wall_s": round(wall, 1),
    }


def peers(n_tokens: int) -> list[dict]:
    results = []
    for pkg, extra in (("pypantera", []), ("mldp-text", ["--no-faiss"]), ("mldp-text", [])):
        cmd = [
            str(PEERS_PY),
            str(HERE / "peers.py"),
            "--package",
            pkg,
            "--tokens",
            str(n_tokens),
            "--epsilon",
            "10",
            "--vocab-size",
            "50000",
            "--mechanism",
            "mahalanobis",
            "--lam",
            "1.0",
            *extra,
        ]
        results.append(run_json(cmd))
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer tokens and repeats (smoke run)")
    ap.add_argument("--e2e-vocab", type=int, default=50_000)
    ap.add_argument("--e2e-tokens", type=int, default=1_000_000)
    ap.add_argument("--skip-e2e", action="store_true")
    ap.add_argument("--skip-peers", action="store_true")
    ap.add_argument("--smoke", action="store_true", help="--quick at 5,000 words and 5,000 tokens, no peers")
    a = ap.parse_args()
    repeats = 1 if a.quick or a.smoke else 3
    sizes = {400_000: 4_000 if a.quick else 20_000, 50_000: 20_000 if a.quick else 100_000}
    if a.smoke:
        sizes, a.e2e_vocab, a.e2e_tokens, a.skip_peers = {5_000: 2_000}, 5_000, 5_000, True

    print("== in-process, one core, Mahalanobis lambda=1, epsilon=10, exact search")
    print(f"  CPU: {cpu_line()}")
    # dpspark's default (its BLAS kernel choice; AdaptiveIndex where the CPU has bf16 GEMMs),
    # float32 search with dpspark's kernel choice, and float32 with OpenBLAS's own choice.
    variants = (("dpspark default", False, "auto"), ("fp32", False, "fp32"), ("fp32, OpenBLAS's", True, "fp32"))
    one_core = {}
    for vocab, n in sizes.items():
        for label, keep, exact in variants:
            r = inprocess(vocab, n, repeats, keep, exact)
            one_core[(vocab, label)] = r["tokens_per_s_median"]
            print(
                f"  vocab {vocab:>7,}  {label:<16} ({r['index']}, kernel {r['coretype']:<8}) "
                f"{r['tokens_per_s_median']:>9,.0f} tokens/s (runs {r['tokens_per_s_runs']}, {r['tokens']:,} tokens; "
                f"prep {r['preparation_s']} s)"
            )
        base = one_core[(vocab, "fp32")]
        print(
            f"  vocab {vocab:>7,}  ratios to fp32: default {one_core[(vocab, 'dpspark default')] / base:.2f}x, "
            f"OpenBLAS's own kernel {one_core[(vocab, 'fp32, OpenBLAS' + chr(39) + 's')] / base:.2f}x"
        )
    auto = {v: one_core[(v, "dpspark default")] for v in sizes}

    if not a.skip_e2e:
        print(f"== end-to-end `dpspark perturb`, local[2], vocab {a.e2e_vocab:,}, >= {a.e2e_tokens:,} tokens")
        e = end_to_end(a.e2e_vocab, a.e2e_tokens)
        print(
            f"  {e['tokens']:,} tokens in {e['perturb_and_write_s']:.1f} s = {e['tokens_per_s']:,.0f} tokens/s "
            f"(read, perturb, write); preparation {e['preparation_s']} s; whole process {e['process_wall_s']} s"
        )
        print(
            f"  ratio to the one-core in-process rate (dpspark default): {e['tokens_per_s'] / auto[a.e2e_vocab]:.2f}x"
        )

    if not a.skip_peers:
        print("== peers, same tokens, vocab 50,000, Mahalanobis lambda=1, epsilon=10, one core")
        if not PEERS_PY.exists():
            print("  skipped: bench/.peers-venv missing (make bench-peers-venv)")
        else:
            for r in peers(300 if a.quick else 500):
                print(
                    f"  {r['package']:<10} {r['tokens_per_s']:>8,.1f} tokens/s  [{r['mechanism']}]  "
                    f"dpspark is {auto[50_000] / r['tokens_per_s']:,.0f}x faster"
                )


if __name__ == "__main__":
    main()
