"""One in-process measurement (one core): tokens/s of TextPerturber on a fixed token list.

Run by bench_perturb.py in a fresh interpreter so that the BLAS settings in the
environment (OPENBLAS_NUM_THREADS=1, optionally OPENBLAS_CORETYPE) take effect
before numpy loads. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

# isort: off
from dpspark import _blas  # noqa: E402

_blas.prefer_fast_kernels()  # as `dpspark` commands do, before numpy loads OpenBLAS
import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

# isort: on
from dpspark.config import PerturbConfig  # noqa: E402
from dpspark.embeddings import load_default  # noqa: E402
from dpspark.prepare import prepare  # noqa: E402


def token_texts(words: list[str], n_tokens: int, per_text: int = 20) -> list[str]:
    """The benchmark's fixed tokens (same draw as bench/peers.py), as texts of ``per_text`` words."""
    rng = np.random.default_rng(0)
    idx = rng.integers(0, 50_000, size=max(n_tokens, 100_000))[:n_tokens]
    toks = [words[i] for i in idx]
    return [" ".join(toks[i : i + per_text]) for i in range(0, len(toks), per_text)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab-size", type=int)
    ap.add_argument("--tokens", type=int)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--epsilon", type=float, default=10.0)
    ap.add_argument("--lam", type=float, default=1.0)
    ap.add_argument("--smoke", action="store_true", help="a few seconds: 5,000 words, 2,000 tokens, one repeat")
    a = ap.parse_args()
    if a.smoke:
        a.vocab_size, a.tokens, a.repeats = a.vocab_size or 5_000, a.tokens or 2_000, 1
    if not (a.vocab_size and a.tokens):
        ap.error("--vocab-size and --tokens are required (or --smoke)")

    emb = load_default()
    t0 = time.perf_counter()
    prepared = prepare(PerturbConfig(epsilon=a.epsilon, vocab_size=a.vocab_size, lam=a.lam), embeddings=emb)
    prep_s = time.perf_counter() - t0
    perturber = prepared.perturber()
    texts = pa.array(token_texts(emb.words, a.tokens), pa.string())
    perturber.perturb_array(texts.slice(0, 500), np.random.default_rng(99))  # warm-up: page in the matrices
    rates, tokens = [], 0
    for r in range(a.repeats):
        rng = np.random.default_rng(r)
        t0 = time.perf_counter()
        _, per_row = perturber.perturb_array(texts, rng)
        dt = time.perf_counter() - t0
        tokens = int(per_row[:, 0].sum())
        rates.append(tokens / dt)
    print(
        json.dumps(
            {
                "vocab_size": a.vocab_size,
                "tokens": tokens,
                "epsilon": a.epsilon,
                "lambda": a.lam,
                "tokens_per_s_median": statistics.median(rates),
                "tokens_per_s_runs": [round(x, 1) for x in rates],
                "preparation_s": round(prep_s, 3),
                "coretype": os.environ.get("OPENBLAS_CORETYPE", "openblas"),
                "index": type(perturber.mechanism.space.index).__name__,
            }
        )
    )


if __name__ == "__main__":
    main()
