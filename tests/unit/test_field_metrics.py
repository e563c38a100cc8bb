"""The field's privacy metrics and the equal-privacy interpolation (dpspark.evaluation.field_metrics):
hand-made inputs with known answers, a mechanism with noise off, Nw/Sw against closed forms (with
power), and the isotonic crossing on monotone, noisy and out-of-grid curves. No Spark.
"""

from __future__ import annotations

import math
import os
import sys

import numpy as np
import pytest

from dpspark.errors import ConfigError, InputDataError
from dpspark.evaluation import field_metrics as fm
from dpspark.evaluation.field_metrics import GridPoint
from dpspark.mechanisms import Space, WordMechanism, parse

# runtime: numpy, pyarrow and Python differ across the Databricks runtimes (CONTRIBUTING.md)
pytestmark = pytest.mark.runtime

# ---- test mechanisms ---------------------------------------------------------------------------


class Identity(WordMechanism):
    """Noise off: every word is released as itself (P(w|w) = 1)."""

    def __init__(self, space: Space) -> None:
        super().__init__(space, None)

    def sample(self, rows, rng):
        pos, found = self.space.positions(rows)
        assert found.all()
        return pos

    def distribution(self, rows):
        pos, _ = self.space.positions(rows)
        p = np.zeros((len(rows), self.space.size))
        p[np.arange(len(rows)), pos] = 1.0
        return p


class RandomizedResponse(WordMechanism):
    """Keeps the word with probability q, else a uniform other word of W: E[Nw] = Kq and
    E[Sw_MLDP] = (V − 1)(1 − (1 − (1 − q)/(V − 1))^K) in closed form."""

    def __init__(self, space: Space, q: float) -> None:
        super().__init__(space, None)
        self.q = q

    def sample(self, rows, rng):
        pos, _ = self.space.positions(rows)
        other = rng.integers(0, self.space.size - 1, len(rows))
        other += other >= pos
        return np.where(rng.random(len(rows)) < self.q, pos, other)

    def distribution(self, rows):
        pos, _ = self.space.positions(rows)
        v = self.space.size
        p = np.full((len(rows), v), (1 - self.q) / (v - 1))
        p[np.arange(len(rows)), pos] = self.q
        return p


class Fixed(WordMechanism):
    """Returns preset outputs (positions in W) for ``sample_copies``: Nw and Sw known by hand."""

    def __init__(self, space: Space, outputs: np.ndarray) -> None:
        super().__init__(space, None)
        self.outputs = outputs

    def sample(self, rows, rng):  # pragma: no cover - only sample_copies is used
        raise NotImplementedError

    def sample_copies(self, rows, copies, rng):
        return self.outputs


def small_space(v: int = 50, dim: int = 4) -> Space:
    return Space(np.random.default_rng(0).normal(size=(v, dim)).astype(np.float32), np.arange(v))


# ---- PP ----------------------------------------------------------------------------------------

ORIG = [["a", "b", "c", "d"], ["e", "f"]]
PERT = [["a", "x", "c", "y"], ["z", "f"]]


def test_pp_counts_changed_positions():
    assert fm.perturbation_partial(ORIG, PERT) == (3, 6)
    assert fm.perturbation_percentage(ORIG, PERT) == pytest.approx(0.5)
    # the first token of each document: a = a, e ≠ z
    assert fm.perturbation_partial(ORIG, PERT, first=1) == (1, 2)
    # the first 3 tokens of the corpus: a b c → only b changed; the first 5: also d, e
    assert fm.perturbation_corpus_partial(ORIG, PERT, 3) == (1, 3)
    assert fm.perturbation_corpus_partial(ORIG, PERT, 5) == (3, 5)
    assert fm.perturbation_corpus_partial(ORIG, PERT, 100) == fm.perturbation_partial(ORIG, PERT)


def test_partitions_add_up_to_the_one_pass_figure():
    parts = [fm.perturbation_partial(ORIG[:1], PERT[:1]), fm.perturbation_partial(ORIG[1:], PERT[1:])]
    assert fm.combine(parts) == fm.perturbation_partial(ORIG, PERT)
    assert fm.finish(fm.combine(parts)) == pytest.approx(0.5)
    assert math.isnan(fm.finish((0, 0)))


def test_strings_are_tokenised_like_perturb():
    # "don't" → "do" "n't", "!" its own token (dpspark.text.tokenize)
    assert fm.tokens_of("Don't stop!") == ["do", "n't", "stop", "!"]
    assert fm.perturbation_partial(["Don't stop!"], ["do n't go ?"]) == (2, 4)


def test_misaligned_documents_are_refused_with_the_fix():
    with pytest.raises(InputDataError, match="OOV policy other than drop"):
        fm.perturbation_partial([["a", "b"]], [["a"]])
    with pytest.raises(InputDataError, match="same rows"):
        fm.perturbation_partial([["a"]], [])
    with pytest.raises(ConfigError, match="first"):
        fm.perturbation_partial(ORIG, PERT, first=0)


# ---- LOW ---------------------------------------------------------------------------------------


def test_low_least_occurring_words_and_their_survival():
    originals = [["the", "cat", "saw", "the", "dog", "."], ["the", "dog", "met", "zed", "!"]]
    perturbeds = [["a", "cat", "saw", "the", "cow", "."], ["the", "dog", "net", "zed", "?"]]
    counts = fm.word_counts(originals)
    assert counts == {"the": 3, "dog": 2, "cat": 1, "saw": 1, "met": 1, "zed": 1}  # punctuation is no word
    # ties at count 1 broken by the word: cat, met, saw, zed
    assert fm.least_occurring(counts, 2) == {"cat", "met"}
    assert fm.least_occurring(counts, 5) == {"cat", "met", "saw", "zed", "dog"}
    rare = fm.least_occurring(counts, 4)
    # cat and saw and zed survive, met → net does not: 3 of 4
    assert fm.low_partial(originals, perturbeds, rare) == (3, 4)
    assert fm.least_occurring_survival(originals, perturbeds, 4) == pytest.approx(0.75)
    # "dog" occurs twice: once replaced (cow), once kept
    assert fm.low_partial(originals, perturbeds, {"dog"}) == (1, 2)
    with pytest.raises(ConfigError, match="at least 1"):
        fm.least_occurring(counts, 0)


# ---- CS ----------------------------------------------------------------------------------------

TINY = {"a": 0, "b": 1, "c": 2}
TINY_VECTORS = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])


def tiny_encoder():
    from dpspark.embeddings import WordRows

    return fm.mean_vector_encoder(TINY_VECTORS, WordRows(list(TINY)))


def test_cs_of_mean_vectors():
    encode = tiny_encoder()
    originals = [["a"], ["a", "b"], ["a"], ["q"], []]
    perturbeds = [["b"], ["c"], ["a", "b"], ["a"], ["a"]]
    cos = fm.cosine_similarities(originals, perturbeds, encode)
    # orthogonal; mean (½, ½) ∥ (1, 1); (1, 0)·(½, ½)/(1·√½) = √½; no vector (OOV only, empty): undefined
    np.testing.assert_allclose(cos[:3], [0.0, 1.0, math.sqrt(0.5)], atol=1e-12)
    assert np.isnan(cos[3:]).all()
    assert fm.cosine_partial(originals, perturbeds, encode) == pytest.approx((1 + math.sqrt(0.5), 3))
    assert fm.cosine_similarity(originals, perturbeds, encode) == pytest.approx((1 + math.sqrt(0.5)) / 3)


def test_sentence_encoder_needs_the_package_and_downloads_nothing(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # restored after the test
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # as if not installed
    with pytest.raises(ConfigError, match="sentence-transformers"):
        fm.sentence_encoder("all-MiniLM-L6-v2")
    assert os.environ["HF_HUB_OFFLINE"] == "1"  # the hub is offline before anything could load


# ---- dictionary share --------------------------------------------------------------------------


def test_dictionary_share_by_hand():
    words = {"the", "cat", "do", "stop"}
    # the cat sat . → the, cat, "." (punctuation reads as text) are; sat is not
    assert fm.dictionary_partial([["the", "cat", "sat", "."]], words) == (3, 4)
    # clitics and numbers count; an unknown word does not
    assert fm.dictionary_partial(["Don't stop 1995 xqzv"], words) == (4, 5)
    assert fm.dictionary_share([["xqzv"], ["the"]], words) == pytest.approx(0.5)


def test_english_word_list_from_pyspellchecker():
    import spellchecker  # noqa: F401 - the spark extra's; its list is the default dictionary

    words = fm.english_words()
    assert "pyspellchecker" in words.source
    assert len(words.words) > 100_000
    for w in ("dogs", "walked", "quickly", "internet"):
        assert w in words
    assert "xqzv" not in words and "qwrtzp" not in words


def test_english_word_list_falls_back_to_the_embedding_and_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "spellchecker", None)
    words = fm.english_words(fallback=["the", ",", "of", "1995", "cat", "dog"], top=3)
    assert words.words == {"the", "of", "cat"}
    assert "embedding" in words.source
    with pytest.raises(ConfigError, match="pyspellchecker"):
        fm.english_words()


# ---- MLDP Nw and Sw ----------------------------------------------------------------------------


def test_mldp_nw_sw_leaves_the_word_itself_out():
    space = small_space(10)
    rows = np.array([2, 5])
    outputs = np.array([[2, 2, 3, 4, 3], [5, 5, 5, 5, 5]])  # positions = rows here (W is every row)
    result = fm.mldp_nw_sw(Fixed(space, outputs), rows, trials=5, rng=np.random.default_rng(0))
    assert result.nw.tolist() == [2, 5]
    assert result.sw.tolist() == [2, 0]  # {3, 4} and nothing; dpspark's Sw would be 3 and 1
    assert result.mean_nw == 3.5 and result.mean_sw == 1.0
    assert result.exact_nw is None and result.exact_mean_sw is None


def test_mldp_words_are_a_uniform_sample_of_the_vocabulary():
    vocab = np.arange(100, 400)
    words = fm.mldp_words(vocab, rng=np.random.default_rng(3))
    assert len(words) == 25 == len(np.unique(words))
    assert np.all(np.diff(words) > 0) and np.isin(words, vocab).all()
    np.testing.assert_array_equal(words, fm.mldp_words(vocab, rng=np.random.default_rng(3)))
    np.testing.assert_array_equal(fm.mldp_words(vocab[:10], 25), vocab[:10])


def test_mldp_exact_expectations_and_monte_carlo_agree():
    v, q, k = 50, 0.3, 100
    space = small_space(v)
    mech = RandomizedResponse(space, q)
    rows = np.repeat(np.arange(v), 8)  # 400 words: SE of the mean Sw ≈ 0.15
    result = fm.mldp_nw_sw(mech, rows, trials=k, rng=np.random.default_rng(11))
    e_sw = (v - 1) * (1 - (1 - (1 - q) / (v - 1)) ** k)
    np.testing.assert_allclose(result.exact_nw, k * q)
    np.testing.assert_allclose(result.exact_sw, e_sw, rtol=1e-12)
    se_nw = math.sqrt(k * q * (1 - q) / len(rows))
    se_sw = result.sw.std(ddof=1) / math.sqrt(len(rows))
    assert abs(result.mean_nw - k * q) < 4 * se_nw
    assert abs(result.mean_sw - e_sw) < 4 * se_sw
    # power: dpspark's Sw (the word itself counted, E ≈ e_sw + 1) would be rejected
    assert abs(result.mean_sw - (e_sw + 1 - (1 - q) ** k)) > 4 * se_sw


def test_mldp_nw_sw_of_a_registry_mechanism_matches_its_closed_form():
    space = small_space(200, 8)
    mech = parse({"name": "tem", "epsilon": 3}).build(space)
    words = np.repeat(fm.mldp_words(space.vocab_rows, rng=np.random.default_rng(1)), 8)
    result = fm.mldp_nw_sw(mech, words, rng=np.random.default_rng(2))
    assert result.trials == fm.MLDP_TRIALS and len(result.nw) == 200
    se_nw = result.nw.std(ddof=1) / math.sqrt(len(words))
    se_sw = result.sw.std(ddof=1) / math.sqrt(len(words))
    assert abs(result.mean_nw - result.exact_mean_nw) < 4 * se_nw
    assert abs(result.mean_sw - result.exact_mean_sw) < 4 * se_sw


# ---- noise off ---------------------------------------------------------------------------------

TEXTS = [
    "The film was a quiet triumph, and the cast was superb.",
    "I didn't like the ending; it felt rushed and hollow.",
    "Tom met Anna in Paris on a rainy morning in June.",
]


def test_noise_off_gives_pp_0_low_1_cs_1_and_mldp_nw_k_sw_0(glove):
    space = Space(glove.vectors, np.arange(20_000))
    mech = Identity(space)
    originals = [fm.tokens_of(t) for t in TEXTS]
    rng = np.random.default_rng(0)
    perturbeds = []
    for toks in originals:
        rows = glove.word_rows.rows(toks)
        assert (rows >= 0).all() and (rows < 20_000).all()
        perturbeds.append(list(glove.word_rows.take(space.vocab_rows[mech.sample(rows, rng)])))
    assert fm.perturbation_percentage(originals, perturbeds) == 0.0
    assert fm.least_occurring_survival(originals, perturbeds) == 1.0
    assert fm.cosine_similarity(originals, perturbeds, fm.glove_encoder(glove)) == pytest.approx(1.0, abs=1e-12)
    words = fm.mldp_words(space.vocab_rows, rng=np.random.default_rng(1))
    result = fm.mldp_nw_sw(mech, words, trials=fm.MLDP_TRIALS, rng=rng)
    assert (result.nw == 100).all() and (result.sw == 0).all()
    assert result.exact_mean_nw == pytest.approx(100.0) and result.exact_mean_sw == pytest.approx(0.0, abs=1e-12)
    composite = fm.puc(utility=0.9, baseline_utility=0.9, pp=0.0, low=1.0, cs=1.0, nw=100, sw=0)
    assert (composite.privacy, composite.utility, composite.puc) == (0.0, 1.0, 0.0)


# ---- PUC ---------------------------------------------------------------------------------------


def test_puc_by_hand():
    c = fm.puc(utility=0.6, baseline_utility=0.8, pp=0.5, low=0.2, cs=0.7, nw=40, sw=30, trials=100)
    assert c.scores == pytest.approx({"pp": 0.5, "low": 0.8, "cs": 0.3, "nw": 0.6, "sw": 0.3})
    assert c.privacy == pytest.approx(0.5)
    assert c.utility == pytest.approx(0.75)
    assert c.puc == pytest.approx(0.375)
    # a negative cosine counts as 0 (score 1); scores stay in [0, 1]
    assert fm.puc(utility=1, baseline_utility=1, pp=1, low=0, cs=-0.2, nw=0, sw=100).privacy == 1.0
    with pytest.raises(ConfigError, match="cs"):
        fm.puc(utility=1, baseline_utility=1, pp=1, low=0, cs=math.nan, nw=0, sw=1)
    with pytest.raises(ConfigError, match="positive"):
        fm.puc(utility=1, baseline_utility=0, pp=1, low=0, cs=0, nw=0, sw=1)
    assert "U · P" in fm.PUC_DEFINITION


# ---- equal privacy -----------------------------------------------------------------------------

EPS = [1.0, 2.0, 4.0, 8.0, 16.0]


def curve(values, utilities=None, half_width=None):
    utilities = utilities or [0.5 + 0.1 * math.log2(e) for e in EPS]
    return [
        GridPoint(
            e,
            v,
            None if half_width is None else v - half_width,
            None if half_width is None else v + half_width,
            u,
            u - 0.02,
            u + 0.02,
        )
        for e, v, u in zip(EPS, values, utilities)
    ]


def test_isotonic_pools_adjacent_violators():
    np.testing.assert_allclose(fm.isotonic([1, 3, 2, 4]), [1, 2.5, 2.5, 4])
    np.testing.assert_allclose(fm.isotonic([1, 3, 2], [1, 1, 3]), [1, 2.25, 2.25])
    np.testing.assert_allclose(fm.isotonic([5, 4, 3]), [4, 4, 4])
    np.testing.assert_allclose(fm.isotonic([0, 1, 2]), [0, 1, 2])
    with pytest.raises(ConfigError):
        fm.isotonic([1, math.nan])


def test_monotone_curve_known_crossing():
    # metric = 0.05·log2 ε: reaches 0.11 at log2 ε = 2.2, ε = 2^2.2 = 4.595
    points = curve([0.05 * math.log2(e) for e in EPS])
    r = fm.equal_privacy({"cmp": points}, 0.11)["cmp"]
    assert r.epsilon == pytest.approx(2**2.2, rel=1e-12)
    assert r.status == "between 4 and 8"
    assert r.bracket == (4.0, 8.0)
    assert r.utility == pytest.approx(0.5 + 0.1 * 2.2)
    assert (r.utility_low, r.utility_high) == pytest.approx((0.70, 0.74))
    assert r.refine == (4.59, 5.66)  # the crossing and the geometric midpoint of 4 and 8, 3 digits
    assert all(4 < x < 8 for x in r.refine)
    assert r.epsilon_conservative is None  # no intervals given


def test_crossing_on_a_grid_point_and_duplicates():
    points = curve([0.0, 0.05, 0.1, 0.15, 0.2])
    r = fm.crossing(points, 0.1)
    assert r.epsilon == pytest.approx(4.0) and r.bracket == (4.0, 8.0)
    # a repeated ε is merged (values averaged): (0.08 + 0.12)/2 = 0.1 at ε = 4
    r2 = fm.crossing([*points, GridPoint(4.0, 0.08), GridPoint(4.0, 0.12)], 0.1)
    assert r2.epsilon == pytest.approx(4.0)


def test_noisy_curve_is_fitted_isotonic_first():
    # 0.12 at ε = 2 then 0.06 at ε = 4: pooled to 0.09 each; the target 0.10 is crossed once, between 4 and 8
    points = curve([0.02, 0.12, 0.06, 0.15, 0.30])
    r = fm.crossing(points, 0.10)
    assert [v for _, v in r.fitted] == pytest.approx([0.02, 0.09, 0.09, 0.15, 0.30])
    assert r.status == "between 4 and 8"
    assert r.epsilon == pytest.approx(4 * 2 ** (1 / 6))  # (0.10 − 0.09)/(0.15 − 0.09) of the way in log ε
    # with intervals, narrow ones weigh more: ε = 2 (± 0.1) yields to ε = 4 (± 0.01)
    weighted = [
        GridPoint(e, v, v - h, v + h)
        for e, v, h in zip(EPS, [0.02, 0.12, 0.06, 0.15, 0.30], [0.01, 0.1, 0.01, 0.01, 0.01])
    ]
    fit = dict(fm.crossing(weighted, 0.10).fitted)
    assert fit[2.0] == fit[4.0] == pytest.approx((0.12 * 100 + 0.06 * 10_000) / 10_100)


def test_conservative_epsilon_uses_the_upper_bounds():
    points = curve([0.05 * math.log2(e) for e in EPS], half_width=0.02)
    r = fm.crossing(points, 0.11)
    # the upper bound 0.05·log2 ε + 0.02 reaches 0.11 at log2 ε = 1.8
    assert r.epsilon_conservative == pytest.approx(2**1.8)
    assert r.epsilon_conservative < r.epsilon


def test_below_and_above_the_grid():
    below = fm.crossing(curve([0.2, 0.3, 0.4, 0.5, 0.6]), 0.1)
    assert below.epsilon is None
    assert below.status == "below the grid: every ε in the grid exceeds the target; try ε < 1"
    assert below.bracket == (None, 1.0) and below.refine == (0.25, 0.5)
    above = fm.crossing(curve([0.01, 0.02, 0.03, 0.04, 0.05]), 0.1)
    assert above.epsilon is None
    assert above.status == "above the grid: every grid ε meets it; try larger ε"
    assert above.bracket == (16.0, None) and above.refine == (32.0, 64.0)
    assert above.utility == pytest.approx(0.9)
    one = fm.crossing([GridPoint(5.0, 0.3)], 0.1)
    assert one.status.startswith("below the grid") and one.status.endswith("try ε < 5")


def test_equal_privacy_refuses_bad_grids():
    with pytest.raises(ConfigError, match="no grid points"):
        fm.crossing([], 0.1)
    with pytest.raises(ConfigError, match="positive"):
        fm.crossing([GridPoint(0.0, 0.1)], 0.1)
    with pytest.raises(ConfigError, match="not finite"):
        fm.crossing([GridPoint(1.0, math.nan)], 0.1)
    with pytest.raises(ConfigError, match="target"):
        fm.crossing([GridPoint(1.0, 0.1)], math.inf)


def test_bags_of_words_pp_and_low_count_the_multiset_intersection():
    """SynTF's documents are bags of drawn words, not one token per position: an original token is
    kept while the output still holds an unmatched copy of it."""
    orig = [["the", "cat", "the", "zebra", "ran"]]
    pert = [["the", "dog", "ran", "ran"]]  # one fewer token: positions do not correspond
    with pytest.raises(InputDataError, match="aligned=False"):
        fm.perturbation_partial(orig, pert)
    # kept: the (1 of 2), ran: 2 of the 5 original tokens survive
    assert fm.perturbation_partial(orig, pert, aligned=False) == (3, 5)
    assert fm.perturbation_partial(orig, pert, first=2, aligned=False) == (1, 2)
    assert fm.low_partial(orig, pert, frozenset({"zebra", "ran"}), aligned=False) == (1, 2)
    same = [["b", "a", "a"]]
    assert fm.perturbation_partial([["a", "a", "b"]], same, aligned=False) == (0, 3)  # order does not matter
