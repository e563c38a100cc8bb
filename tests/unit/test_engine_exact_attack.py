"""The exact attacker's combiners (``dpspark.engine.exact_attack``), without a JVM: any split of the
corpus words and any merge order give the figures of one pass, bit for bit."""

from __future__ import annotations

import random

import numpy as np
import pytest

from dpspark import risk
from dpspark.engine import exact_attack as ea
from dpspark.engine import fold
from dpspark.mechanisms import parse
from dpspark.mechanisms.base import Space

# runtime: numpy's partition and sort differ across the Databricks runtimes (CONTRIBUTING.md)
pytestmark = pytest.mark.runtime


def reference_top(scores, words, top):
    """The stable sort the single pass used: best ``top`` by score descending, then row."""
    order = np.argsort(-scores, axis=0, kind="stable")[:top]
    return np.take_along_axis(scores, order, axis=0), words[order]


@pytest.mark.parametrize("n", [1, 4, 5, 6, 40])
def test_chunk_top_equals_the_stable_sort_with_many_ties(n):
    rng = np.random.default_rng(n)
    scores = rng.integers(0, 3, size=(n, 300)).astype(np.float64)  # three values: ties everywhere
    scores[:, :7] = 0.0  # whole columns tied
    words = np.arange(100, 100 + n, dtype=np.int64)
    got = ea._chunk_top(scores, words, 5)
    want = reference_top(scores, words, 5)
    assert np.array_equal(got.score, want[0]) and np.array_equal(got.word, want[1])


def test_merging_is_the_best_of_the_union_in_any_order():
    rng = np.random.default_rng(0)
    scores = rng.integers(0, 4, size=(60, 200)).astype(np.float64)
    words = np.arange(60, dtype=np.int64) * 3
    parts = [ea._chunk_top(scores[a : a + 12], words[a : a + 12], 5) for a in range(0, 60, 12)]
    want = reference_top(scores, words, 5)
    for seed in range(4):
        random.Random(seed).shuffle(parts)
        merged = parts[0]
        for p in parts[1:]:
            merged = ea.merge_guesses(merged, p)
        assert np.array_equal(merged.score, want[0]) and np.array_equal(merged.word, want[1])


@pytest.mark.parametrize("n,block,parts", [(100, 7, 3), (100, 7, 50), (5, 7, 4), (70, 7, 10), (1, 1, 1)])
def test_spans_cover_the_words_in_whole_blocks(n, block, parts):
    s = ea.spans(n, block, parts)
    assert s[0][0] == 0 and s[-1][1] == n and len(s) <= parts
    assert all(a % block == 0 and a < b for a, b in s)
    assert all(b == c for (_, b), (c, _) in zip(s, s[1:]))


@pytest.mark.parametrize("name", ["tem", "santext", "custext", "1-diffractor", "santext-plus"])
@pytest.mark.parametrize("parts", [2, 5])
def test_any_split_of_the_words_gives_the_single_pass_bit_for_bit(glove, monkeypatch, name, parts):
    """Split into spans of whole blocks, each span's partials created on its own and merged in a shuffled
    order: the figures equal ``risk.exact_reidentification`` (one span) exactly."""
    space = Space(glove.vectors, np.arange(1200))
    rows = sorted(glove.word_index[w] for w in "the of and to in a is was he for it with as his on be at by".split())
    rows += list(range(300, 900, 9))  # corpus words beyond the vocabulary's most frequent, some outside it
    rows += [1500, 2500]
    prior = {int(w): float(1 + (7 * i) % 23) for i, w in enumerate(sorted(set(rows)))}
    sensitive = set(list(prior)[::5])
    mech = parse({"name": name, "epsilon": 6.0}).build(space)
    corpus = ea.Corpus.of(prior, sensitive)
    monkeypatch.setattr("dpspark.mechanisms.base.DISTANCE_ENTRIES", 8 * space.size)  # blocks of 8 words
    assert space.block == 8
    want = risk.exact_reidentification(mech, prior, sensitive, runs=20)
    spans = ea.spans(len(corpus.words), space.block, parts)
    assert len(spans) == parts
    random.Random(parts).shuffle(spans)
    scores = ea.exact_scores(mech, corpus)
    best = fold(spans, lambda s: ea.create_guesses(scores, space, corpus, s), ea.merge_guesses)[None]
    hits = fold(spans, lambda s: ea.create_hits(mech, corpus, s, best.word, 20), ea.merge_hits)[None]
    got = risk.finish(*ea.finish_hits(hits))
    assert got.keys() == want.keys()
    for k in got:
        assert got[k] == want[k] or (np.isnan(got[k]) and np.isnan(want[k])), k
    assert 0 < got["top1"] <= got["top5"] <= 1


def test_a_mechanism_without_a_closed_form_has_no_exact_attacker(glove):
    space = Space(glove.vectors, np.arange(500))
    corpus = ea.Corpus.of({3: 2.0, 9: 1.0})
    assert not ea.has_closed_form(parse({"name": "laplace", "epsilon": 5}).build(space), corpus)
    assert ea.has_closed_form(parse({"name": "tem", "epsilon": 5}).build(space), corpus)
