"""Hostile use, round 5 (issue 39), defects 3 and 10: word files are read as the tokenizer reads text (lower
case, Unicode NFC), so a sensitive word written with capitals or decomposed accents is protected; a YAML key
given twice and an embedding that holds the placeholder [UNK] are refused. The Spark runs (the corpus too
short for --vocab-from-corpus, the placeholder through the CLI, santext-plus end to end):
tests/spark/test_hostile_round5_words.py."""

from __future__ import annotations

import numpy as np
import pytest
from refusals import refused

from dpspark.errors import ConfigError, DPSparkWarning, EmbeddingError

# Capitals, mixed case and a decomposed spelling ("Sa" + COMBINING TILDE + "o": NFD of "São").
TRICKY = ["Paris", "LONDON", "BeRLiN", "Sa\u0303o"]
TRICKY_WORDS = ["paris", "london", "berlin", "são"]  # GloVe's spellings of them, written out by hand
# Lower-case neighbours that make the protected set large enough for P(w|w) to sit well below 1 − p = 0.8.
CITIES = "rome madrid tokyo moscow vienna athens beijing cairo dublin lisbon prague warsaw rio paulo porto brazil"


@pytest.fixture
def raw(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    d = tmp_path / "raw"
    d.mkdir()
    pq.write_table(pa.table({"text": ["Paris is quiet", "a dog ran home"]}), d / "part-0.parquet")
    return d


@pytest.mark.runtime  # Python's Unicode tables differ across the runtimes' interpreters
def test_the_tokenizer_and_word_files_share_one_normalisation(tmp_path):
    from dpspark.text import normalize, tokenize
    from dpspark.wordfiles import read_word_list

    assert tokenize(" ".join(TRICKY))[0] == TRICKY_WORDS
    assert tokenize("CAFE\u0301")[0] == ["café"]  # one token, not "cafe" and a lone accent
    words = tmp_path / "words.txt"
    words.write_text("\n".join([*TRICKY, "paris", "  São  ", ""]) + "\n", encoding="utf-8")
    assert read_word_list(str(words)) == TRICKY_WORDS  # one entry per normalised word
    assert [normalize(w) for w in TRICKY] == TRICKY_WORDS


@pytest.mark.statistical
def test_sensitive_words_in_any_case_and_nfd_are_protected(glove, tmp_path):
    """Each tricky word is in V_S, and its verbatim share is at most the closed form's P(w|w) =
    1 / Σ_{y ∈ V_S} exp(−ε‖φ(w) − φ(y)‖/2) (SanText+ on a protected word), computed here in numpy.
    2,000 draws per word, seed 11: the check fails falsely with probability ≤ 4·10⁻⁶ (binomial upper
    bound at 1 − 10⁻⁶ per word); an unprotected word comes out verbatim with probability 1 − p = 0.8,
    against closed forms of 0.33 to 0.52 here, which the bound (at most 0.58) catches with power ≈ 1."""
    from scipy.stats import binom

    from dpspark.mechanisms import Space, parse

    words = tmp_path / "sensitive.txt"
    words.write_text("\n".join([*TRICKY, *CITIES.split()]) + "\n", encoding="utf-8")
    space = Space(glove.vectors, np.arange(20_000), words=glove.word_rows)
    epsilon, n = 1.0, 2_000
    mech = parse({"name": "santext-plus", "epsilon": epsilon, "p": 0.2, "sensitive_words": str(words)}).build(space)

    protected = np.array(sorted(glove.word_index[w] for w in [*TRICKY_WORDS, *CITIES.split()]))
    rows = np.array([glove.word_index[w] for w in TRICKY_WORDS])
    vectors = glove.vectors.astype(np.float64)
    dist = np.linalg.norm(vectors[rows][:, None, :] - vectors[protected][None, :, :], axis=2)
    closed = 1.0 / np.exp(-epsilon * dist / 2.0).sum(axis=1)
    assert closed.max() < 0.6

    out = mech.sample(np.repeat(rows, n), np.random.default_rng(11)).reshape(4, n)
    verbatim = (out == rows[:, None]).sum(axis=1)
    bound = binom.ppf(1 - 1e-6, n, closed)
    assert (verbatim <= bound).all(), dict(zip(TRICKY_WORDS, zip(verbatim / n, closed)))
    # and the exact figures agree: each word is in V_S, and P(w|w) is the closed form
    np.testing.assert_allclose(mech.distribution(rows)[np.arange(4), rows], closed, rtol=1e-6)
    assert np.array_equal(np.flatnonzero(mech.mask), protected)  # W = the first 20,000 rows: position = row


def test_sensitive_words_that_match_nothing_warn_with_their_lines(glove, tmp_path):
    from dpspark.mechanisms import Space, parse

    space = Space(glove.vectors, np.arange(2_000), words=glove.word_rows)
    words = tmp_path / "sensitive.txt"
    words.write_text("Paris\nzzqxvw\nLONDON\n\nqqxxzk\n", encoding="utf-8")
    spec = parse({"name": "santext-plus", "epsilon": 2, "sensitive_words": str(words)})
    with pytest.warns(DPSparkWarning, match=r"2 of the 4 words of sensitive words file .* \(lines 2, 5\)") as caught:
        protected = spec.protected(space)
    assert "zzqxvw" not in str(caught[0].message)  # line numbers, never the words of a sensitive list
    assert sorted(protected) == sorted(glove.word_index[w] for w in ("paris", "london"))

    words.write_text("zzqxvw\nqqxxzk\n", encoding="utf-8")  # nothing matches: refused, as before
    spec = parse({"name": "santext-plus", "epsilon": 2, "sensitive_words": str(words)})
    with pytest.raises(ConfigError, match="none of the 2 words .* is in the output vocabulary"):
        spec.protected(Space(glove.vectors, np.arange(2_000), words=glove.word_rows))


@pytest.mark.parametrize(
    "lines, phrase",
    [
        (["epsilon: 5", "mechanism: laplace", "epsilon: 1"], "sets 'epsilon' twice (lines 4 and 6)"),
        (["epsilon: 5", "vocab-size: 2000", "vocab_size: 3000"], "sets 'vocab_size' twice (two spellings of it)"),
    ],
)
def test_a_yaml_key_given_twice_is_refused(capsys, tmp_path, raw, lines, phrase):
    conf = tmp_path / "c.yaml"
    conf.write_text("\n".join([f"input: {raw}", f"output: {tmp_path / 'out'}", "columns: text", *lines]) + "\n")
    refused(capsys, tmp_path, ["perturb", "--config", str(conf)], 2, f"config file {conf} {phrase}", "keep the one")


def test_an_embedding_holding_the_placeholder_is_refused(glove):
    from dpspark.config import PerturbConfig
    from dpspark.embeddings import Embeddings
    from dpspark.prepare import prepare

    words = [*glove.words[:99], "[UNK]"]
    emb = Embeddings(words, glove.vectors[:100].copy(), "tiny.txt", "0" * 64)
    settings = {"columns": ["text"], "epsilon": 5, "mechanism": "santext", "vocab_size": 100}
    with pytest.raises(EmbeddingError, match=r"embeddings tiny.txt hold the word '\[UNK\]'.*--oov-token"):
        prepare(PerturbConfig(**settings), embeddings=emb)
    assert prepare(PerturbConfig(**settings, oov_token="<oov>"), embeddings=emb).vocab_rows.size == 100
    assert prepare(PerturbConfig(**settings, oov="drop"), embeddings=emb).vocab_rows.size == 100  # no placeholder
    assert prepare(PerturbConfig(**{**settings, "vocab_size": 99}), embeddings=emb).vocab_rows.size == 99  # not in W
