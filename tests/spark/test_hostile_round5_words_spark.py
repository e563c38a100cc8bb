"""Hostile use, round 5 (issue 39), defects 3 and 10 where a Spark session is needed: santext-plus protects
sensitive words written with capitals or decomposed accents, in the file and in the text, end to end; a
corpus too short for --vocab-from-corpus and an embedding that holds the placeholder [UNK] are refused, each
with its exit code and one sentence, nothing changed or left behind. The unit tests:
tests/unit/test_hostile_round5_words.py."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpspark.cli import main

pytestmark = pytest.mark.spark

TRICKY = ["Paris", "LONDON", "BeRLiN", "Sa\u0303o"]  # capitals, mixed case, NFD
TRICKY_WORDS = ["paris", "london", "berlin", "são"]
CITIES = "rome madrid tokyo moscow vienna athens beijing cairo dublin lisbon prague warsaw rio paulo porto brazil"


def snapshot(root):
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def refused(capsys, tmp_path, argv, code, phrase):
    """Run the CLI: the exit code, the last error line, and tmp_path (input, output's parent) unchanged."""
    before = snapshot(tmp_path)
    assert main(argv) == code
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"dpspark {argv[0]}: error: ") and phrase in err[-1], err[-1]
    assert snapshot(tmp_path) == before and not (tmp_path / "out").exists()


def test_a_corpus_too_short_for_the_mechanism_says_so(spark, tmp_path, capsys):
    raw = tmp_path / "raw.parquet"
    pq.write_table(pa.table({"text": ["the city is quiet home"] * 4}), raw)
    argv = ["perturb", "--input", str(raw), "--output", str(tmp_path / "out"), "--columns", "text"]
    argv += ["--epsilon", "5", "--vocab-from-corpus", "--vocab-size", "60", "--quiet"]
    refused(
        capsys,
        tmp_path,
        argv,
        4,
        "the input has only 5 distinct words with a vector in glove-6b-50d (--vocab-from-corpus asked for 60), and "
        "mahalanobis needs at least 51: use a larger corpus, or drop --vocab-from-corpus",
    )


def test_an_embedding_holding_the_placeholder_is_refused(spark, glove, tmp_path, capsys):
    raw = tmp_path / "raw.parquet"
    pq.write_table(pa.table({"text": ["the city is quiet", "a dog ran home"]}), raw)
    emb = tmp_path / "emb.txt"
    rows = [(w, glove.vectors[i]) for i, w in enumerate(glove.words[:59])] + [("[UNK]", glove.vectors[59])]
    emb.write_text("".join(w + " " + " ".join(f"{x:.5f}" for x in v) + "\n" for w, v in rows), encoding="utf-8")
    argv = ["perturb", "--input", str(raw), "--output", str(tmp_path / "out"), "--columns", "text"]
    argv += ["--epsilon", "5", "--mechanism", "santext", "--embeddings", str(emb), "--vocab-size", "60", "--quiet"]
    refused(capsys, tmp_path, argv, 4, f"embeddings {emb} hold the word '[UNK]'")


@pytest.mark.statistical
def test_santext_plus_protects_sensitive_words_in_any_case_end_to_end(spark, glove, tmp_path):
    """perturb with a sensitive-words file of capitals, mixed case and an NFD spelling, over texts that write
    the words the same ways: each word's verbatim share is at most the closed form's P(w|w) (numpy, as in the
    unit test). 400 rows, seed 3: false alarm ≤ 4·10⁻⁶ (binomial bound at 1 − 10⁻⁶ per word); an unprotected
    word is kept with probability 0.8 against bounds of at most 0.65 here (power ≈ 1)."""
    from scipy.stats import binom

    words = tmp_path / "sensitive.txt"
    words.write_text("\n".join([*TRICKY, *CITIES.split()]) + "\n", encoding="utf-8")
    raw = tmp_path / "raw.parquet"
    n = 400
    pq.write_table(pa.table({"text": [" ".join(TRICKY), "paris London BERLIN S\u00e3o"] * (n // 2)}), raw)
    before = snapshot(tmp_path)
    out = tmp_path / "out"
    argv = ["perturb", "--input", str(raw), "--output", str(out), "--columns", "text", "--mechanism", "santext-plus"]
    argv += ["--epsilon", "1", "--p", "0.2", "--vocab-size", "20000", "--sensitive-words", str(words)]
    assert main([*argv, "--seed", "3", "--quiet"]) == 0
    assert {k: v for k, v in snapshot(tmp_path).items() if not k.startswith("out")} == before

    released = [t.split() for t in pq.read_table(out).column("text").to_pylist()]
    assert {len(t) for t in released} == {4}  # "Sa\u0303o" is one token, as "São" is
    verbatim = np.array([sum(t[i] == w for t in released) for i, w in enumerate(TRICKY_WORDS)])
    protected = [glove.word_index[w] for w in [*TRICKY_WORDS, *CITIES.split()]]
    vectors = glove.vectors.astype(np.float64)
    rows = [glove.word_index[w] for w in TRICKY_WORDS]
    dist = np.linalg.norm(vectors[rows][:, None, :] - vectors[protected][None, :, :], axis=2)
    closed = 1.0 / np.exp(-dist / 2.0).sum(axis=1)
    bound = binom.ppf(1 - 1e-6, n, closed)
    assert (bound / n).max() < 0.65
    assert (verbatim <= bound).all(), dict(zip(TRICKY_WORDS, zip(verbatim / n, closed)))
