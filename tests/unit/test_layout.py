"""Output layout, invalid UTF-8 rows and output-only counts of TextPerturber."""

from __future__ import annotations

import sys

import numpy as np
import pyarrow as pa
import pytest

from dpspark.config import PerturbConfig
from dpspark.embeddings import WordRows
from dpspark.prepare import prepare
from dpspark.text import LAYOUTS, OOV_POLICIES, TextPerturber, assemble, decode_strings, tokenize

# runtime: numpy, pyarrow and Python differ across the Databricks runtimes (CONTRIBUTING.md)
pytestmark = pytest.mark.runtime

# Huge epsilon: every in-vocabulary word comes back as itself. "zqxwvkj", "qqzzrt" are OOV.
EPS = 1e6
MESSY = "  The  City\twas\r\non the\u2003river\u00a0.  \n"
EXPECTED = {
    "single": "the city was on the river .",
    "lines": "the city was\non the river .\n",
    "keep": "  the  city\twas\r\non the\u2003river\u00a0.  \n",
}
WHITESPACE_ONLY = " \t\r\n\u2003\u00a0\n  "


@pytest.fixture(scope="module")
def prepared(glove):
    return prepare(PerturbConfig(epsilon=EPS, vocab_size=5000, columns=["t"]), embeddings=glove)


@pytest.fixture(scope="module")
def vocab(prepared):
    return set(np.asarray(prepared.embeddings.words, dtype=object)[prepared.vocab_rows])


def make(prepared, oov: str = "unk", layout: str = "single") -> TextPerturber:
    return TextPerturber(prepared.mechanism, prepared.embeddings.word_rows, oov, layout=layout)


def test_words_of_these_tests_are_in_and_out_of_vocabulary(vocab):
    assert {"the", "city", "was", "on", "river", "."} <= vocab
    assert not {"zqxwvkj", "qqzzrt"} & vocab


@pytest.mark.parametrize("layout", LAYOUTS)
def test_layouts_on_messy_whitespace(prepared, layout):
    out = make(prepared, layout=layout).perturb_texts([MESSY, None, ""], np.random.default_rng(0))
    assert out == [EXPECTED[layout], None, ""]


@pytest.mark.parametrize("layout,expected", [("single", ""), ("lines", "\n\n"), ("keep", WHITESPACE_ONLY)])
def test_whitespace_only_text(prepared, layout, expected):
    out = make(prepared, layout=layout).perturb_texts([WHITESPACE_ONLY, "   "], np.random.default_rng(0))
    assert out == [expected, "   " if layout == "keep" else ""]  # never doubled


@pytest.mark.parametrize("layout", LAYOUTS)
def test_adjacent_tokens_are_separated_by_one_space(prepared, layout):
    out = make(prepared, layout=layout).perturb_texts(["city.", "\ncity!!"], np.random.default_rng(0))
    assert out == ["city .", {"single": "city ! !", "lines": "\ncity ! !", "keep": "\ncity ! !"}[layout]]


def test_lines_breaks_are_exactly_those_of_splitlines():
    for c in map(chr, range(sys.maxunicode + 1)):
        if not c.isspace():
            continue
        breaks = len(f"a{c}b".splitlines()) - 1
        assert assemble(*tokenize(f"a{c}b"), "lines") == ("a\nb" if breaks else "a b"), hex(ord(c))
    assert assemble(*tokenize("a\r\nb\n\rc"), "lines") == "a\nb\n\nc"  # CRLF is one break, LF CR two


@pytest.mark.parametrize(
    "layout,expected",
    [("single", "the city"), ("lines", "the\ncity\n"), ("keep", "  the\ncity \n")],
)
def test_drop_under_each_layout(prepared, layout, expected):
    texts = ["  the zqxwvkj\ncity  QQZZRT \n", "zqxwvkj  qqzzrt\n", "zqxwvkj"]
    out = make(prepared, "drop", layout).perturb_texts(texts, np.random.default_rng(0))
    assert out == [expected, "" if layout == "single" else "\n", ""]


@pytest.mark.parametrize("layout,expected", [("single", "city"), ("lines", "city\n\n"), ("keep", "city")])
def test_drop_of_trailing_tokens_on_their_own_lines(prepared, layout, expected):
    out = make(prepared, "drop", layout).perturb_texts(["city\nzqxwvkj\rqqzzrt"], np.random.default_rng(0))
    assert out == [expected]  # keep: each dropped token took the whitespace before it


def test_drop_keeps_line_breaks_around_a_dropped_token(prepared):
    out = make(prepared, "drop", "lines").perturb_texts(["city\r zqxwvkj\nriver"], np.random.default_rng(0))
    assert out == ["city\n\nriver"]  # the line that held only the dropped token stays, empty


def test_layout_and_oov_token_are_validated(prepared):
    with pytest.raises(ValueError, match="single.*lines.*keep"):
        make(prepared, layout="verbatim")
    with pytest.raises(ValueError, match="oov_token"):
        TextPerturber(prepared.mechanism, prepared.embeddings.word_rows, oov_token="[ UNK ]")


# Invalid UTF-8 ---------------------------------------------------------------------------


def corrupt(string_type: pa.DataType | None = None) -> pa.Array:
    string_type = string_type or pa.string()
    binary = pa.large_binary() if string_type == pa.large_string() else pa.binary()
    return pa.array([b"The city", b"\xff\xfe bad", None, b"", b"caf\xe9"], binary).view(string_type)


def test_the_test_array_is_invalid_utf8():
    with pytest.raises(UnicodeDecodeError):
        corrupt().to_pylist()


@pytest.mark.parametrize("string_type", [pa.string(), pa.large_string()])
def test_decode_strings(string_type):
    texts, invalid = decode_strings(corrupt(string_type))
    assert texts == ["The city", "\ufffd\ufffd bad", None, "", "caf\ufffd"]
    assert invalid.tolist() == [False, True, False, False, True]
    texts, invalid = decode_strings(pa.array(["a", None], string_type))
    assert texts == ["a", None] and invalid.dtype == bool and not invalid.any()


@pytest.mark.parametrize("policy", OOV_POLICIES)
@pytest.mark.parametrize("string_type", [pa.string(), pa.large_string()])
def test_invalid_utf8_row_is_one_oov_token(prepared, vocab, policy, string_type):
    out, per_row = make(prepared, policy).perturb_array(corrupt(string_type), np.random.default_rng(0))
    assert out.type == string_type
    texts = out.to_pylist()
    assert texts[0] == "the city" and texts[2] is None and texts[3] == ""
    for bad in (texts[1], texts[4]):
        if policy == "unk":
            assert bad == "[UNK]"
        elif policy == "random":
            assert bad in vocab
        elif policy == "drop":
            assert bad == ""
    if policy == "keep":
        assert texts[1] == "\ufffd\ufffd bad" and texts[4] == "caf\ufffd"  # verbatim, not lower-cased
    assert per_row[:, 0].tolist() == [len(t.split()) if t is not None else 0 for t in texts]
    assert per_row[:, 1].tolist() == ([0, 1, 0, 0, 1] if policy == "unk" else [0] * 5)


def test_invalid_utf8_row_is_oov_even_if_its_replacement_text_is_a_word(prepared):
    words = list(prepared.embeddings.words)
    words[prepared.embeddings.index_of("city")] = "caf\ufffd"  # the replacement text is now a word
    perturber = TextPerturber(prepared.mechanism, WordRows(words))
    assert perturber.perturb_array(corrupt(), np.random.default_rng(0))[0].to_pylist()[4] == "[UNK]"


def test_invalid_utf8_random_word_comes_from_the_batch_rng(prepared):
    perturber = make(prepared, "random")

    def bad_row(seed: int) -> str:
        return perturber.perturb_array(corrupt(), np.random.default_rng(seed))[0].to_pylist()[1]

    assert bad_row(3) == bad_row(3)
    assert len({bad_row(seed) for seed in range(20)}) > 1


# Counts ----------------------------------------------------------------------------------

PAIRS = [
    ("the city  zqxwvkj was on the river", "The  City was\ton the qqzzrt RIVER zqxwvkj"),
    ("city", "\r\n qqzzrt CITY zqxwvkj \u2003"),
]


@pytest.mark.parametrize("a,b", PAIRS)
def test_inputs_differing_in_dropped_tokens_case_and_whitespace_look_identical(prepared, a, b):
    perturber = make(prepared, "drop")
    out_a, rows_a = perturber.perturb_array(pa.array([a]), np.random.default_rng(0))
    out_b, rows_b = perturber.perturb_array(pa.array([b]), np.random.default_rng(0))
    assert out_a.to_pylist() == out_b.to_pylist()
    assert rows_a.tolist() == rows_b.tolist() == [[len(out_a[0].as_py().split()), 0]]


@pytest.mark.parametrize("policy", ["unk", "random"])
def test_counts_do_not_tell_which_tokens_were_oov(prepared, policy):
    # Same OOV positions, different OOV words, case and whitespace: same output, same counts.
    perturber = make(prepared, policy)
    a, b = "the zqxwvkj city", "THE\tqqzzrt  city"
    out_a, rows_a = perturber.perturb_array(pa.array([a]), np.random.default_rng(5))
    out_b, rows_b = perturber.perturb_array(pa.array([b]), np.random.default_rng(5))
    assert out_a.to_pylist() == out_b.to_pylist()
    assert rows_a.tolist() == rows_b.tolist() == [[3, 1 if policy == "unk" else 0]]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_placeholders_count_unk_tokens(prepared, layout):
    arr = pa.array(["the zqxwvkj city qqzzrt", "zqxwvkj", "the city", "", None])
    out, per_row = make(prepared, "unk", layout).perturb_array(arr, np.random.default_rng(0))
    assert out.to_pylist()[:3] == ["the [UNK] city [UNK]", "[UNK]", "the city"]
    assert per_row.tolist() == [[4, 2], [1, 1], [2, 0], [0, 0], [0, 0]]


@pytest.mark.parametrize("policy", OOV_POLICIES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_tokens_count_is_what_the_output_shows(prepared, policy, layout):
    texts = [MESSY, "zqxwvkj don't  stop!", "QQZZRT", WHITESPACE_ONLY, "", None]
    out, per_row = make(prepared, policy, layout).perturb_array(pa.array(texts), np.random.default_rng(1))
    shown = [len(t.split()) if t is not None else 0 for t in out.to_pylist()]
    assert per_row[:, 0].tolist() == shown
    assert per_row[:, 1].tolist() == [t.split().count("[UNK]") if t and policy == "unk" else 0 for t in out.to_pylist()]


def test_placeholders_are_zero_unless_the_policy_is_unk(prepared):
    arr = pa.array([b"[UNK] \xff"], pa.binary()).view(pa.string())
    out, per_row = make(prepared, "keep").perturb_array(arr, np.random.default_rng(0))
    assert out.to_pylist() == ["[UNK] \ufffd"] and per_row.tolist() == [[2, 0]]
