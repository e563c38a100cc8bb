"""CusText and CusText+ (dpspark.mechanisms.custext): the blocked mapping against the sequential
construction, the closed form against the paper's formula, the sampler against the closed form (χ²),
stop words, the parameter guards, and the mapping as an artefact (bundle, disk cache).

GloVe 6B 50-d; W is its first 5,000 words (row order = frequency order); row 7,000 is a word outside W.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_exponential_mechanisms import pooled_chisquare

from dpspark.bundle import load_bundle, save_bundle
from dpspark.errors import ConfigError
from dpspark.mechanisms import REGISTRY, Space, parse
from dpspark.mechanisms.custext import CusText, CusTextPlus, group_words
from dpspark.mechanisms.stopwords import ENGLISH_STOP_WORDS

# runtime: numpy, pyarrow and Python differ across the Databricks runtimes (CONTRIBUTING.md)
pytestmark = pytest.mark.runtime

V = 5000
OUTSIDE = 7000
DRAWS = 40_000


@pytest.fixture(scope="module")
def space(glove):
    return Space(glove.vectors, np.arange(V), words=glove.word_rows)


def unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def scores(x, y, similarity):
    """s(x, y) for one vector x against the rows of y: cosine of unit vectors, or minus the distance."""
    if similarity == "cosine":
        return (unit(y) * unit(x)).sum(axis=1)
    return -np.linalg.norm(y - x, axis=1)


def sequential_groups(vectors, k, similarity):
    """The paper's construction, one seed at a time over every unassigned word (sorted in full)."""
    x = np.asarray(vectors, dtype=np.float64)
    alive = np.arange(len(x))
    groups = []
    while len(alive):
        s = scores(x[alive[0]], x[alive], similarity)
        group = alive[np.lexsort((alive, -s))[:k]]
        groups.append(group)
        alive = alive[~np.isin(alive, group)]
    return groups


def paper_probabilities(space, x, group, epsilon, similarity):
    """Pr[y | x] ∝ exp(ε·u(x, y)/2) over the group, u the similarity min-max scaled within it."""
    s = scores(np.asarray(x, dtype=np.float64), space.vocab64[group], similarity)
    u = (s - s.min()) / (s.max() - s.min()) if s.max() > s.min() else np.ones(len(s))
    w = np.exp(epsilon * u / 2)
    return w / w.sum()


# ---- the mapping ----------------------------------------------------------------------------


@pytest.mark.parametrize("similarity", ["cosine", "euclidean"])
@pytest.mark.parametrize("k", [5, 20])
@pytest.mark.parametrize("block,extra", [(None, None), (7, 1)])
def test_blocked_mapping_equals_the_sequential_construction(glove, similarity, k, block, extra):
    """2,013 words (K divides neither: a short last group); block = 7, extra = 1 runs the fallback often."""
    vectors = glove.vectors[:2013]
    expected = sequential_groups(vectors, k, similarity)
    members = group_words(vectors, k, similarity, block=block, extra=extra)
    assert members.shape == (len(expected), k)
    for row, group in zip(members, expected):
        np.testing.assert_array_equal(row[row >= 0], group)
    assert (members[:-1] >= 0).all() and (members[-1] >= 0).sum() == 2013 - k * (len(expected) - 1)


@pytest.mark.parametrize("similarity", ["cosine", "euclidean"])
@pytest.mark.parametrize("k", [5, 20])
def test_ties_go_to_the_more_frequent_word(glove, similarity, k):
    """500 vectors four times each, shuffled: exact ties everywhere (the screening's cut included)."""
    vectors = np.repeat(np.asarray(glove.vectors[:500]), 4, axis=0)[np.random.default_rng(0).permutation(2000)]
    expected = sequential_groups(vectors, k, similarity)
    for block, extra in [(None, None), (7, 1)]:
        members = group_words(vectors, k, similarity, block=block, extra=extra)
        assert len(members) == len(expected)
        for row, group in zip(members, expected):
            np.testing.assert_array_equal(row[row >= 0], group)


@pytest.mark.parametrize("similarity", ["cosine", "euclidean"])
def test_groups_are_disjoint_and_cover_w(space, similarity):
    spec = parse({"name": "custext", "epsilon": 4, "similarity": similarity})
    members = spec.groups(space)
    flat = members[members >= 0]
    np.testing.assert_array_equal(np.sort(flat), np.arange(V))
    assert members.shape == (V // 20, 20)
    # Each group's seed (its first word) is the most frequent word left when the group was formed.
    seeds = members[:, 0]
    assert (np.diff(seeds) > 0).all()
    assert all(seeds[g] == members[g:].min() for g in range(0, len(members), 37))
    mechanism = spec.build(space)
    np.testing.assert_array_equal(mechanism.group_of(members[3]), np.full(20, 3))


# ---- the closed form and the sampler ----------------------------------------------------------


@pytest.mark.parametrize("similarity", ["cosine", "euclidean"])
@pytest.mark.parametrize("epsilon", [1.0, 8.0])
def test_distribution_is_the_papers_formula(space, similarity, epsilon):
    mechanism = parse({"name": "custext", "epsilon": epsilon, "similarity": similarity, "top_k": 8}).build(space)
    rows = np.array([0, 17, 450, 4999, OUTSIDE])
    p = mechanism.distribution(rows)
    assert p.shape == (len(rows), V) and p.dtype == np.float64
    np.testing.assert_allclose(p.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    # An input outside W takes the group of its nearest word of W (Euclidean, float64 here).
    nearest = np.argmin(np.linalg.norm(space.vocab64 - space.vectors[OUTSIDE].astype(np.float64), axis=1))
    assert mechanism.group_of(np.array([OUTSIDE]))[0] == mechanism.group_of(np.array([nearest]))[0]
    for i, row in enumerate(rows):
        group = np.flatnonzero(p[i])
        assert len(group) == 8 and (row >= V or row in group)
        expected = paper_probabilities(space, space.vectors[row], group, epsilon, similarity)
        np.testing.assert_allclose(p[i, group], expected, rtol=1e-12)
        # Within one group: ε-DP, and the ε·u/2 scale reaches at most ε.
        others = np.flatnonzero(mechanism.group_of(np.arange(V)) == mechanism.group_of(np.array([group[0]]))[0])
        q = mechanism.distribution(others)
        assert np.abs(np.log(q[:, group][:, None, :]) - np.log(q[:, group][None, :, :])).max() <= epsilon + 1e-9


def test_sampler_draws_the_closed_form(space):
    """χ² of the draws of four words of W and one outside it, with power against ε × 0.8."""
    rows = np.array([0, 17, 450, 4321, OUTSIDE])
    mechanism = parse({"name": "custext", "epsilon": 6, "top_k": 20}).build(space)
    wrong = parse({"name": "custext", "epsilon": 4.8, "top_k": 20}).build(space)
    out = mechanism.sample(np.repeat(rows, DRAWS), np.random.default_rng(11)).reshape(len(rows), DRAWS)
    counts = np.stack([np.bincount(o, minlength=V) for o in out])
    p, q = mechanism.distribution(rows), wrong.distribution(rows)
    assert (counts[p == 0] == 0).all()
    pvalues = [pooled_chisquare(c, pr) for c, pr in zip(counts, p)]
    assert min(pvalues) > 1e-4, pvalues
    assert max(pooled_chisquare(c, pr) for c, pr in zip(counts, q)) < 1e-6
    # The draws are a function of the generator; shapes are kept.
    again = mechanism.sample(np.repeat(rows, DRAWS), np.random.default_rng(11)).reshape(len(rows), DRAWS)
    np.testing.assert_array_equal(out, again)
    grid = np.array([[0, 17], [450, OUTSIDE]])
    assert mechanism.sample(grid, np.random.default_rng(0)).shape == (2, 2)
    assert mechanism.sample_copies(rows, 3, np.random.default_rng(0)).shape == (len(rows), 3)


def test_table_holds_every_words_k_cumulative_probabilities(space):
    mechanism = parse({"name": "custext", "epsilon": 3, "top_k": 20}).build(space)
    assert mechanism.table.shape == (V, 20) and mechanism.table.dtype == np.float64
    assert (np.diff(mechanism.table, axis=1) >= 0).all() and (mechanism.table[:, -1] == 1.0).all()
    words = np.array([5, 600])
    p = mechanism.distribution(words)
    outputs = mechanism.members[mechanism.group[words]]
    np.testing.assert_allclose(np.diff(mechanism.table[words], prepend=0, axis=1), p[[[0], [1]], outputs], atol=1e-15)


# ---- CusText+ ------------------------------------------------------------------------------


def test_custext_plus_keeps_stop_words(space, glove):
    spec = parse({"name": "custext-plus", "epsilon": 4, "top_k": 10})
    mechanism = spec.build(space)
    stop = space.word_positions(sorted(ENGLISH_STOP_WORDS))
    assert 250 < len(stop) <= len(ENGLISH_STOP_WORDS) and glove.index_of("the") in stop
    # Each stop word: its own group, itself with probability 1.
    p = mechanism.distribution(stop)
    np.testing.assert_array_equal(p, np.eye(V)[stop])
    out = mechanism.sample(np.repeat(stop, 50), np.random.default_rng(3))
    np.testing.assert_array_equal(out, np.repeat(stop, 50))
    assert len(np.unique(mechanism.group_of(stop))) == len(stop)
    # The other words: grouped among themselves only, as CusText over W without the stop words.
    rest = np.setdiff1d(np.arange(V), stop)
    assert not np.isin(np.flatnonzero(mechanism.distribution(rest[:300]).sum(axis=0)), stop).any()
    expected = sequential_groups(space.vocab64[rest], 10, "cosine")
    members = spec.groups(space)
    for row, group in zip(members, expected):
        np.testing.assert_array_equal(row[row >= 0], rest[group])
    assert len(members) == len(expected) + len(stop)
    facts = spec.facts(space)
    assert facts["guarantee_type"] == "group"
    assert any("verbatim" in line and "stop words" in line for line in facts["outside_guarantee"])
    assert f"The {len(stop)} words of W" in facts["guarantee"]
    assert (
        f"splits the {V - len(stop)} words of W outside the stop list into {len(expected)} disjoint groups"
        in (facts["guarantee"])
    )


def test_shipped_stop_list_is_scikit_learns():
    text = pytest.importorskip("sklearn.feature_extraction.text")
    assert text.ENGLISH_STOP_WORDS == ENGLISH_STOP_WORDS


# ---- parameters and the manifest --------------------------------------------------------------


def test_registered_with_defaults():
    assert REGISTRY["custext"] is CusText and REGISTRY["custext-plus"] is CusTextPlus
    spec = parse({"name": "custext", "epsilon": 2})
    assert (spec.top_k, spec.similarity) == (20, "cosine")
    assert spec.axes() == {"top_k": 20, "similarity": "cosine"} and spec.guarantee_type == "group"
    assert parse({"name": "custext", "epsilon": 2, "top_k": "7", "similarity": " Euclidean"}).axes() == {
        "top_k": 7,
        "similarity": "euclidean",
    }
    assert parse({"name": "custext-plus", "epsilon": 2, "top_k": ""}).top_k == 20


@pytest.mark.parametrize(
    "values,field",
    [
        ({"top_k": 1}, "top_k"),
        ({"top_k": 0}, "top_k"),
        ({"top_k": 2.5}, "top_k"),
        ({"top_k": "many"}, "top_k"),
        ({"top_k": True}, "top_k"),
        ({"similarity": "dot"}, "similarity"),
        ({"beta": 0.1}, "beta"),
    ],
)
def test_parameter_guards(values, field):
    for name in ("custext", "custext-plus"):
        with pytest.raises(ConfigError, match=f"mechanism {name}: {field}"):
            parse({"name": name, "epsilon": 2, **values})


def test_guarantee_states_the_groups(space):
    spec = parse({"name": "custext", "epsilon": 3, "top_k": 30})
    text = spec.guarantee(space)
    assert "exp(3)" in text and "K = 30" in text and f"{-(-V // 30)} disjoint groups" in text
    assert f"the last of {V % 30}" in text and "discloses its input's group" in text
    assert any("distinguishable" in line for line in spec.outside())
    assert "Chen, Mo, Wang, Chen, Nie, Wang, Cui" in spec.paper and "ACL 2023" in spec.paper


# ---- the mapping as an artefact ---------------------------------------------------------------


def test_mapping_round_trips_through_a_bundle(space, glove, tmp_path):
    spec = parse({"name": "custext-plus", "epsilon": 5, "top_k": 12, "similarity": "euclidean"})
    names = spec.prepare(space)
    assert len(names) == 1 and names[0].startswith("custext-plus/groups/v1/k=12/euclidean/stop=")
    settings = {"settings": [spec.parameters()], "nn": "exact", "nn_params": {}}
    d = save_bundle(tmp_path / "b", glove, settings, np.arange(V), artefacts=space.artefacts(names))
    (executor,) = load_bundle(d).mechanisms()
    driver = spec.build(space)
    np.testing.assert_array_equal(executor.members, driver.members)
    rows = np.array([0, 3, 17, 450, OUTSIDE] * 200)
    np.testing.assert_array_equal(
        executor.sample(rows, np.random.default_rng(5)), driver.sample(rows, np.random.default_rng(5))
    )
    # An executor's space has the mapping by name: it never needs the words (the stop list) to build it again.
    bare = Space(glove.vectors, np.arange(V), artefacts=space.artefacts(names))
    np.testing.assert_array_equal(spec.build(bare).members, driver.members)
    with pytest.raises(ConfigError, match="needs the embedding's words"):
        spec.build(Space(glove.vectors, np.arange(V)))


def test_disk_cache_is_hit_by_a_second_space(glove, tmp_path):
    spec = parse({"name": "custext-plus", "epsilon": 5, "top_k": 9})
    first = Space(glove.vectors, np.arange(V), cache_dir=tmp_path, words=glove.word_rows)
    members = spec.groups(first)
    assert len(list(tmp_path.glob("dpspark-artefact-*.npy"))) == 1
    # Without the words the mapping cannot be computed: the second space can only have read it.
    second = Space(glove.vectors, np.arange(V), cache_dir=tmp_path)
    cached = spec.groups(second)
    assert isinstance(cached, np.memmap)
    np.testing.assert_array_equal(cached, members)
    # Another parameter is another name: not found there.
    other = parse({"name": "custext-plus", "epsilon": 5, "top_k": 10})
    with pytest.raises(ConfigError, match="needs the embedding's words"):
        other.groups(second)
