from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from dpspark.config import PerturbConfig
from dpspark.prepare import prepare
from dpspark.text import COUNT_NAMES, TextPerturber, detokenize, tokenize

# runtime: numpy, pyarrow and Python differ across the Databricks runtimes (CONTRIBUTING.md)
pytestmark = pytest.mark.runtime


@pytest.mark.parametrize(
    "text,tokens",
    [
        ("The dog barked!", ["the", "dog", "barked", "!"]),
        ("don't stop", ["do", "n't", "stop"]),
        ("John's car, 42 km", ["john", "'s", "car", ",", "42", "km"]),
        ("", []),
        ("  \n ", []),
    ],
)
def test_tokenize_follows_glove_conventions(text, tokens):
    assert tokenize(text)[0] == tokens


def test_detokenize_keeps_whitespace_and_separates_adjacent_tokens():
    assert detokenize(*tokenize("  Two\n lines  here ")) == "  two\n lines  here "
    assert detokenize(*tokenize("dog!")) == "dog !"
    assert detokenize(*tokenize("")) == ""


@pytest.mark.parametrize("text", ["  ", " \t\r\n ", "\u2003"])
def test_detokenize_returns_whitespace_only_text_once(text):
    assert detokenize(*tokenize(text)) == text


@pytest.fixture(scope="module")
def prepared(glove):
    return {
        eps: prepare(PerturbConfig(epsilon=eps, vocab_size=5000, columns=["t"]), embeddings=glove)
        for eps in (1.0, 10.0, 50.0, 1000.0)
    }


TEXTS = ["the cat sat on the mat .", None, "", "zqxwvkj met qqzzrt at the station", "  spaced   out  "]


def test_output_is_faithful(prepared):
    p = prepared[10.0]
    out = p.perturber().perturb_texts(TEXTS, np.random.default_rng(0))
    assert len(out) == len(TEXTS)
    assert out[1] is None and out[2] == ""
    vocab = set(np.asarray(p.embeddings.words, dtype=object)[p.vocab_rows])
    for before, after in zip(TEXTS, out):
        if before:
            assert len(after.split()) == len(before.split())
            assert all(t in vocab or t == "[UNK]" for t in after.split())
            assert after == " ".join(after.split())  # default layout: single spaces only


def test_keep_layout_copies_whitespace(prepared):
    p = prepared[10.0]
    perturber = TextPerturber(p.mechanism, p.embeddings.word_rows, layout="keep")
    out = perturber.perturb_texts(TEXTS, np.random.default_rng(0))
    assert out[4].startswith("  ") and out[4].endswith("  ") and "   " in out[4]
    assert len(out[4].split()) == 2


def test_oov_tokens_never_appear_verbatim_by_default(prepared):
    out = prepared[1000.0].perturber().perturb_texts(TEXTS, np.random.default_rng(1))
    assert "zqxwvkj" not in out[3] and "qqzzrt" not in out[3]
    assert out[3].split()[0] == "[UNK]" and out[3].split()[2] == "[UNK]"


@pytest.mark.parametrize("policy", ["random", "drop", "keep"])
def test_oov_policies(glove, policy):
    p = prepare(PerturbConfig(epsilon=1000, vocab_size=5000, oov=policy), embeddings=glove)
    out = p.perturber().perturb_texts(["zqxwvkj met qqzzrt"], np.random.default_rng(2))[0]
    if policy == "keep":
        assert out == "zqxwvkj met qqzzrt"
    elif policy == "drop":
        assert out == "met"
    else:
        words = out.split()
        assert len(words) == 3 and "zqxwvkj" not in words and "[UNK]" not in words


def test_share_of_unchanged_tokens_rises_to_one_with_epsilon(prepared, glove):
    rng = np.random.default_rng(3)
    alpha = [w for w in glove.words[:5000] if w.isalpha()]
    words = [alpha[i] for i in rng.integers(0, len(alpha), 3000)]
    text = [" ".join(words)]
    shares = []
    for eps in (1.0, 10.0, 50.0, 1000.0):
        out = prepared[eps].perturber().perturb_texts(text, rng)[0].split()
        shares.append(np.mean([a == b for a, b in zip(out, words)]))
    assert shares == sorted(shares), shares
    assert shares[0] < 0.05 and shares[-1] > 0.99


def test_counts_per_row(prepared):
    arr = pa.array(["the cat zqxwvkj", None, "", "  \n"], pa.string())
    out, per_row = prepared[1000.0].perturber().perturb_array(arr, np.random.default_rng(4))
    assert out.type == pa.string()
    assert COUNT_NAMES == ("tokens", "placeholders")
    assert per_row.shape == (4, 2) and per_row.dtype == np.int64
    assert per_row[:, 0].tolist() == [3, 0, 0, 0]  # tokens of the output
    assert per_row[:, 1].tolist() == [1, 0, 0, 0]  # "[UNK]" placeholders
    assert out.to_pylist()[0].split()[2] == "[UNK]"
