"""SanText+'s protected set from the input corpus's own counts (``sensitive_from_corpus``): the least frequent
words, the driver-only counts, the refusals and what the guarantee says (dpspark.mechanisms.santext_plus).
The Spark counting, the warning and the manifest: tests/spark/test_mechanism_settings.py."""

from __future__ import annotations

import numpy as np
import pytest

from dpspark.config import PerturbConfig
from dpspark.errors import ConfigError
from dpspark.mechanisms import Space, parse
from dpspark.mechanisms.base import corpus_counts
from dpspark.mechanisms.santext_plus import CORPUS_COUNTS, least_frequent_in_corpus
from dpspark.prepare import prepare_grid

# runtime: numpy, pyarrow and Python differ across the Databricks runtimes (CONTRIBUTING.md)
pytestmark = pytest.mark.runtime


@pytest.fixture(scope="module")
def space(glove) -> Space:
    return Space(glove.vectors, np.arange(100), words=glove.word_rows)


def test_counts_land_on_the_vocabulary_positions(glove, space):
    counts = corpus_counts(space, {glove.words[3]: 7, glove.words[50]: 2, glove.words[5000]: 9, "zzqxv": 4})
    expected = np.zeros(100, dtype=np.int64)
    expected[[3, 50]] = [7, 2]  # a word outside W and a word without a vector count nowhere
    np.testing.assert_array_equal(counts, expected)


def test_the_least_frequent_words_of_the_corpus_in_the_vocabulary(space):
    counts = np.zeros(100, dtype=np.int64)
    present = np.arange(0, 100, 5)  # 20 words occur; the other 80 of W count 0 and are never protected
    counts[present] = [9, 3, 8, 1, 7, 3, 6, 2, 5, 4, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9]
    # the 10 least frequent: counts 1, 2, 3, 3, 4, 5, 6, 7, 8 and one of the 9s (the rarest in the embedding: row 95)
    expected = np.sort(present[[3, 7, 1, 5, 9, 8, 6, 4, 2, 19]])
    np.testing.assert_array_equal(least_frequent_in_corpus(space, counts, 0.5), expected)
    np.testing.assert_array_equal(least_frequent_in_corpus(space, counts, 0.01), [15])  # at least one word
    with pytest.raises(ConfigError, match="no word of the output vocabulary occurs in the input corpus"):
        least_frequent_in_corpus(space, np.zeros(100, dtype=np.int64), 0.5)


def test_the_spec_reads_the_counts_from_the_driver_and_ships_only_the_protected_set(glove, space):
    spec = parse({"name": "santext-plus", "epsilon": 3, "sensitive_from_corpus": True, "sensitive_fraction": 0.25})
    with pytest.raises(ConfigError, match="only perturb and release take"):
        spec.prepare(space)  # no corpus counts: a grid command or a bare Space
    counts = np.arange(100, 0, -1)  # the embedding's order reversed: row 99 is the corpus's rarest
    driver = Space(glove.vectors, np.arange(100), words=glove.word_rows, artefacts={CORPUS_COUNTS: counts})
    names = spec.prepare(driver)
    assert names == ["santext-plus/protected/corpus/fraction=0.25"]  # the counts stay on the driver
    np.testing.assert_array_equal(driver.artefacts(names)[names[0]], np.arange(75, 100))
    executor = Space(glove.vectors, np.arange(100), words=glove.word_rows, artefacts=driver.artefacts(names))
    np.testing.assert_array_equal(spec.build(executor).mask, spec.build(driver).mask)
    facts = spec.facts(driver)
    assert facts["parameters"]["sensitive_from_corpus"] is True
    assert "derived from the private data, outside the guarantee" in facts["guarantee"]
    assert any("derived from the private corpus" in note for note in facts["outside_guarantee"])


@pytest.mark.parametrize(
    "values,message",
    [
        ({"sensitive_from_corpus": True, "sensitive_words": "w.txt"}, "sensitive_words or sensitive_from_corpus"),
        ({"sensitive_from_corpus": "maybe"}, "sensitive_from_corpus must be true or false"),
    ],
)
def test_bad_settings_are_refused(values, message):
    with pytest.raises(ConfigError, match=message):
        parse({"name": "santext-plus", "epsilon": 3, **values})


def test_prepare_puts_the_corpus_counts_in_the_drivers_space(glove):
    config = PerturbConfig(
        columns=["text"], epsilon=3, mechanism="santext-plus", sensitive_from_corpus=True, vocab_size=200
    )
    counts = {w: 100 - i for i, w in enumerate(glove.words[:100])}  # the first 100 words, rarer down the list
    grid = prepare_grid(config, [config.spec], corpus_counts=counts)
    protected = grid.space.artefacts(grid.artefact_names)["santext-plus/protected/corpus/fraction=0.5"]
    np.testing.assert_array_equal(protected, np.arange(50, 100))  # words 100..199 do not occur: not protected
