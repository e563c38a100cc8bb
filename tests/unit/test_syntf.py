"""SynTF's synthetic documents (``syntf``): n words, each the word draw of a word drawn from the
document's term frequencies, released as sorted words and their counts (dpspark.text.TextPerturber)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from scipy import stats

from dpspark.errors import ConfigError
from dpspark.mechanisms import Space, parse
from dpspark.text import COLUMN_TYPES, TextPerturber

# runtime: numpy, pyarrow and Python differ across the Databricks runtimes (CONTRIBUTING.md)
pytestmark = pytest.mark.runtime


@pytest.fixture(scope="module")
def space(glove) -> Space:
    return Space(glove.vectors, np.arange(5000), words=glove.word_rows)


def perturber(glove, space, epsilon: float, **params) -> TextPerturber:
    mech = parse({"name": "syntf", "epsilon": epsilon, **params}).build(space)
    return TextPerturber(mech, glove.word_rows)


def test_documents_are_their_draws_and_counts(glove, space):
    p = perturber(glove, space, 30.0)
    assert p.text_level and set(p.mechanism.spec.extra_columns) == {"tf"}
    texts = pa.array(["Paris is lovely, qwxzzy!", None, "", "zzqxv qqwzx", "the the the"], pa.string())
    out, tf, counts = p.perturb_documents(texts, np.random.default_rng(0))
    same, extra, same_counts = p.perturb(texts, np.random.default_rng(0))  # the level-blind entry point
    assert same.equals(out) and extra["tf"].equals(tf) and (same_counts == counts).all()
    assert extra["tf"].type == COLUMN_TYPES[p.mechanism.spec.extra_columns["tf"]]
    out, tf = out.to_pylist(), tf.to_pylist()
    # n = the in-vocabulary tokens: "paris is lovely , !" (5; the unknown word is left out), none, none, 3.
    assert [len(t.split()) if t else 0 for t in out[:1]] == [5] and counts[:, 0].tolist() == [5, 0, 0, 0, 3]
    assert out[1] is None and tf[1] is None and out[2] == "" and tf[2] == [] and out[3] == "" and tf[3] == []
    for text, freq in zip(out, tf):
        if text:
            words = text.split()
            assert words == sorted(words)
            assert dict(freq) == {w: words.count(w) for w in set(words)}


def test_fixed_draws(glove, space):
    p = perturber(glove, space, 30.0, draws=7)
    out, tf, counts = p.perturb_documents(pa.array(["a b", "c", "zzqxv"], pa.string()), np.random.default_rng(1))
    assert counts[:, 0].tolist() == [7, 7, 0] and sum(c for _, c in tf.to_pylist()[0]) == 7


def test_each_word_is_the_mixture_of_the_documents_terms(glove, space):
    """P(y | doc) = Σ_v tf(v)·P(y | v): draws from "paris paris london" against (2·p(paris) + p(london))/3."""
    epsilon = 25.0
    p = perturber(glove, space, epsilon)
    docs = pa.array(["paris paris london"] * 20_000, pa.string())
    out, _, _ = p.perturb_documents(docs, np.random.default_rng(2))
    words = " ".join(out.to_pylist()).split()
    drawn = glove.word_rows.rows(words)
    law = p.mechanism.distribution(np.array([glove.index_of("paris"), glove.index_of("london")]))
    mixture = (2 * law[0] + law[1]) / 3
    wrong = (law[0] + law[1]) / 2  # power: equal weights instead of the term frequencies
    counts = np.bincount(drawn, minlength=space.size)
    for expected, should_pass in ((mixture, True), (wrong, False)):
        big = expected * len(words) >= 5
        obs = np.append(counts[big], counts[~big].sum())
        exp = np.append(expected[big], expected[~big].sum()) * len(words)
        pvalue = stats.chisquare(obs, exp).pvalue
        assert (pvalue > 1e-4) if should_pass else (pvalue < 1e-6), (should_pass, pvalue)


def test_draws_must_be_a_positive_whole_number():
    for bad in (0, -1, 2.5, "x"):
        with pytest.raises(ConfigError, match="draws must be a whole number"):
            parse({"name": "syntf", "epsilon": 1.0, "draws": bad})
    spec = parse({"name": "syntf", "epsilon": 1.0})
    assert spec.guarantee_type == "document" and spec.outside()
