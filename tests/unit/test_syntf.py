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


def test_a_document_unit_spreads_its_budget_over_the_rows_draws(glove, space):
    """Under a document unit (``perturb_batch`` with a unit budget), a row's draws over its text columns stand for
    its tokens: scale gives each draw E/n (n the row's draws over both columns), drawn as ``perturb_documents``
    draws at that ε; cap:3 makes the draws after a row's 3rd the placeholder, in the text, ``COL_tf`` and the
    per-row counts; the extra column is there either way."""
    from dpspark import units

    mech = parse({"name": "syntf", "epsilon": 30.0}).build(space)
    batch = pa.record_batch(
        [pa.array(["paris is lovely", None, "the cat"]), pa.array(["london", "rain", None])], ["a", "b"]
    )
    scaled = TextPerturber(mech, glove.word_rows, unit_budget=60.0)
    names, arrays, counts = scaled.perturb_batch(batch, np.random.default_rng(4), ["a", "b"], extra=["tf"])
    assert names == ["a", "b", "a_tf", "b_tf"] and counts.tolist() == [[4, 0], [1, 0], [2, 0]]
    # A row of 4 draws (3 in a, 1 in b) at 60/4: column a's draws are those of the column alone at ε = 15.
    one = pa.record_batch([pa.array(["paris is lovely"]), pa.array(["london"])], ["a", "b"])
    _, arrays_one, _ = scaled.perturb_batch(one, np.random.default_rng(4), ["a", "b"], extra=["tf"])
    alone = TextPerturber(parse({"name": "syntf", "epsilon": 15.0}).build(space), glove.word_rows)
    out, _, _ = alone.perturb_documents(pa.array(["paris is lovely"]), np.random.default_rng(4))
    assert arrays_one[0].equals(out)
    at_budget = TextPerturber(mech.at(60.0), glove.word_rows)  # the whole E on each draw: other words
    assert not at_budget.perturb_documents(pa.array(["paris is lovely"]), np.random.default_rng(4))[0].equals(out)
    capped = TextPerturber(mech, glove.word_rows, unit_budget=60.0, allocation=units.Allocation.parse("cap:3"))
    names, arrays, counts = capped.perturb_batch(batch, np.random.default_rng(5), ["a", "b"], extra=["tf"])
    assert counts.tolist() == [[4, 1], [1, 0], [2, 0]]
    assert arrays[1].to_pylist()[0] == "[UNK]" and dict(arrays[3].to_pylist()[0]) == {"[UNK]": 1}
    assert "[UNK]" not in arrays[0].to_pylist()[0].split()
