"""CertifiedIndex: low-precision scores plus a proven bound give the float64 argmin, always.

The reference is np.argmin(((q − X)**2).sum(axis=1)) in float64, ties to the lowest row.
Tests with the emulated coarse scorer run without torch and exercise the certificate where
many candidates survive; the bf16 (torch) tests run where torch is installed (`make test`
installs it).
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from dpspark import neighbours
from dpspark.device import exact_index
from dpspark.mechanisms import Space, parse, sample_noise
from dpspark.mechanisms.geometry import geometry
from dpspark.neighbours import (
    LOWP_WORD_BLOCK,
    AdaptiveIndex,
    CertifiedIndex,
    ExactIndex,
    _Emulated,
    lowp_available,
)

# runtime: numpy, pyarrow and Python differ across the Databricks runtimes (CONTRIBUTING.md)
pytestmark = pytest.mark.runtime


def brute_force(x, q):
    """The float64 reference, directly: one distance row per query."""
    x = np.asarray(x, dtype=np.float64)
    return np.array([((p - x) ** 2).sum(axis=1).argmin() for p in np.asarray(q, dtype=np.float64)], dtype=np.int64)


def float64_argmin(x, q):
    """The same reference, fast enough for 50,000 words: a float64 GEMM keeps the words within
    2⁻³⁰(‖q‖ + max‖x‖)² of its smallest distance (its rounding error, and that of the distances
    below, are under 2⁻⁴⁰ of that), and the float64 distances of those decide."""
    x = np.asarray(x, dtype=np.float64)
    xx = (x * x).sum(axis=1)
    rmax = np.sqrt(xx.max())
    out = np.empty(len(q), dtype=np.int64)
    for s in range(0, len(q), 256):
        qc = np.asarray(q[s : s + 256], dtype=np.float64)
        qq = (qc * qc).sum(axis=1)
        d = qq[:, None] - 2 * qc @ x.T + xx
        near = d <= (d.min(axis=1) + 2.0**-30 * (np.sqrt(qq) + rmax) ** 2)[:, None]
        for i, p in enumerate(qc):
            rows = np.flatnonzero(near[i])
            out[s + i] = rows[((p - x[rows]) ** 2).sum(axis=1).argmin()]
    return out


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One BLAS thread, as in a Spark task (torch follows it when an index is built): on a busy
    2-core machine, two threads wait on each other in every small GEMM."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # optional: the tests still run, with whatever threads there are
        yield
        return
    with threadpool_limits(1):
        yield


@pytest.fixture(scope="module")
def vocab(glove):
    return glove.vectors[:50_000]


@pytest.fixture(scope="module")
def bf16(vocab):
    pytest.importorskip("torch")
    return CertifiedIndex(vocab)


def noisy(vectors, n, epsilon, seed):
    rng = np.random.default_rng(seed)
    a = geometry(vectors, 1.0).a
    return vectors[rng.integers(0, len(vectors), n)] + sample_noise(n, vectors.shape[1], epsilon, rng, a)


@pytest.mark.parametrize("epsilon", [1.0, 5.0, 10.0, 20.0, 40.0])
def test_bf16_equals_float64_argmin_on_noisy_glove(bf16, vocab, epsilon):
    q = noisy(vocab, 600, epsilon, seed=int(epsilon))
    np.testing.assert_array_equal(bf16.query(q), float64_argmin(vocab, q))


@pytest.mark.parametrize(("flags", "k"), [("avx512f avx512_bf16", 54), ("avx512f avx512_bf16 amx_bf16 amx_tile", 64)])
def test_bf16_rows_are_padded_to_amx_tiles_only_where_amx_runs(vocab, monkeypatch, flags, k):
    # AVX512-BF16 multiplies pairs: d + 4 = 54 columns; AMX tiles hold 32 bf16: 64. Exact either way.
    pytest.importorskip("torch")
    from dpspark import _blas

    monkeypatch.setattr(_blas, "cpu_fields", lambda: {"flags": flags})
    index = CertifiedIndex(vocab[:5000])
    assert index._k == k
    q = noisy(vocab[:5000], 500, 10.0, seed=3)
    np.testing.assert_array_equal(index.query(q), float64_argmin(vocab[:5000], q))


def test_bf16_across_query_blocks_and_against_float32(bf16, vocab, monkeypatch):
    # Several searches and GEMMs per call, partial ones last; a vocabulary that is not a whole
    # number of word blocks.
    assert len(vocab) % LOWP_WORD_BLOCK
    monkeypatch.setattr(neighbours, "LOWP_QUERY_BLOCK", 1024)
    monkeypatch.setattr(neighbours, "LOWP_GEMM_ROWS", 512)
    q = noisy(vocab, 2085, 10.0, seed=7)
    found = bf16.query(q)
    np.testing.assert_array_equal(found, float64_argmin(vocab, q))
    assert (found == ExactIndex(vocab).query(q)).mean() > 0.999  # float32 differs only at near-ties


@pytest.mark.parametrize("bits", [3, 5])
def test_certificate_alone_with_a_coarse_scorer(bits):
    """3- and 5-bit scores leave hundreds of candidates per query; the answers must be exact."""
    x = np.random.default_rng(0).standard_normal((3 * LOWP_WORD_BLOCK + 11, 20)).astype(np.float32)
    # Noisy points far from the words, as at a useful ε: many words at similar distances.
    q = x[np.random.default_rng(1).integers(0, len(x), 300)] + np.random.default_rng(2).normal(0, 2, (300, 20))
    expected = brute_force(x, q)
    emulated = _Emulated(bits)
    np.testing.assert_array_equal(CertifiedIndex(x, emulated).query(q), expected)
    # The test means something: the coarse scores alone pick another word for many queries
    # (≈ 18% at 3 bits, 5% at 5 bits).
    naive = (emulated.round(q) @ emulated.round(x).T - (x.astype(np.float64) ** 2).sum(axis=1) / 2).argmax(axis=1)
    assert (naive != expected).mean() > 0.02


def test_the_bound_is_what_makes_it_exact():
    """Rounding pushes the nearest word down and another up by almost 2u‖q‖‖x‖: the certified
    index finds the nearest one, and the same index with a bound 4× too small does not."""
    d = 8
    q = np.ones((1, d))  # exact in 4 bits
    farther = np.full(d, 1.1875 + 2.0**-12)  # rounds up to 1.25
    nearer = np.full(d, 1.0625 - 2.0**-12)  # rounds down to 1.0
    x = np.stack([farther, nearer])
    assert brute_force(x, q)[0] == 1
    assert CertifiedIndex(x, _Emulated(4)).query(q)[0] == 1
    weak = CertifiedIndex(x, _Emulated(4))
    weak._c1 /= 4
    weak._c2 /= 4
    assert weak.query(q)[0] == 0


@pytest.mark.parametrize("lowp", ["bf16", "emulated"])
def test_adversarial_cases(glove, lowp):
    if lowp == "bf16":
        pytest.importorskip("torch")
    make = (lambda x: CertifiedIndex(x)) if lowp == "bf16" else (lambda x: CertifiedIndex(x, _Emulated(6)))
    x = glove.vectors[:3000].copy()
    x[2000] = x[1500] = x[10]  # exact duplicates: the lowest row wins
    x[2999] = x[11]
    index = make(x)
    rng = np.random.default_rng(5)
    # Queries at words, at their duplicates, near them, between two words, and far away.
    q = np.concatenate(
        [
            x[[10, 1500, 2000, 11, 2999, 0, 1234]],
            x[[10, 11]] + rng.normal(0, 1e-3, (2, 50)),
            (x[[3, 40]] + x[[4, 41]]) / 2,
            rng.standard_normal((8, 50)) * np.array([1e3, 1e5, 1e8, 1e11, 1e13, 1e16, 0.0, 1e-30])[:, None],
        ]
    )
    found = index.query(q)
    np.testing.assert_array_equal(found, brute_force(x, q))
    assert list(found[:7]) == [10, 10, 10, 11, 11, 0, 1234]
    # query_among: exact among a subset, first of the subset on ties.
    rows = np.array([5, 10, 11, 1500, 2000, 2500, 2999])
    np.testing.assert_array_equal(index.query_among(q[:9], rows), rows[brute_force(x[rows], q[:9])])


@pytest.mark.parametrize("lowp", ["bf16", "emulated"])
def test_tiny_vocabularies_and_empty_or_odd_batches(glove, lowp):
    if lowp == "bf16":
        pytest.importorskip("torch")
    make = (lambda x: CertifiedIndex(x)) if lowp == "bf16" else (lambda x: CertifiedIndex(x, _Emulated(6)))
    one = make(glove.vectors[:1])
    q = np.random.default_rng(0).standard_normal((5, 50)) * 10
    np.testing.assert_array_equal(one.query(q), np.zeros(5, dtype=np.int64))
    two = make(glove.vectors[[7, 7]])
    np.testing.assert_array_equal(two.query(q), np.zeros(5, dtype=np.int64))
    assert one.query(np.zeros((0, 50), np.float32)).shape == (0,)
    # Non-finite queries: row 0, as np.argmin over their NaN/inf distances.
    bad = np.array([[np.nan] * 50, [np.inf] + [0.0] * 49])
    index = make(glove.vectors[:100])
    np.testing.assert_array_equal(index.query(bad), brute_force(glove.vectors[:100], bad))
    with pytest.raises(ValueError):
        make(np.zeros((0, 50), np.float32))


def test_copies_through_the_certificate_equal_the_full_search(glove, bf16):
    """perturb_copies mixes query_among (small balls) and query (the rest): both exact."""
    vocab = np.arange(50_000)
    mech = parse({"name": "mahalanobis", "epsilon": 10.0, "lambda": 1.0}).build(Space(glove.vectors, vocab, bf16))
    rows = np.array([0, 5, 17, 400, 9_999, 49_999, 60_000])  # the last one is not in the vocabulary
    got = mech.sample_copies(rows, 40, np.random.default_rng(3))
    z = sample_noise(len(rows) * 40, 50, 10.0, np.random.default_rng(3), mech.a)
    full = float64_argmin(glove.vectors[vocab], np.repeat(glove.vectors[rows], 40, axis=0) + z)
    np.testing.assert_array_equal(got, full.reshape(len(rows), 40))


def test_factory_and_override(glove, monkeypatch):
    x = glove.vectors[:1000]
    monkeypatch.setenv("DPSPARK_EXACT", "fp32")
    assert type(exact_index(x)) is ExactIndex
    monkeypatch.setenv("DPSPARK_EXACT", "fast")
    with pytest.raises(ValueError):
        exact_index(x)
    monkeypatch.delenv("DPSPARK_EXACT")
    expected = AdaptiveIndex if neighbours._bf16_cpu() else ExactIndex
    index = exact_index(x)
    assert type(index) is expected and index.method == "exact"
    if lowp_available():
        monkeypatch.setenv("DPSPARK_EXACT", "bf16")
        forced = exact_index(x)
        assert type(forced) is CertifiedIndex and forced.params()["scores"].startswith("bf16")


def slowed(monkeypatch, cls, method, seconds=0.02):
    """Make ``cls.method`` take ``seconds`` longer per call: a race this index must lose."""
    original = getattr(cls, method)

    def slow(self, *args):
        time.sleep(seconds)
        return original(self, *args)

    monkeypatch.setattr(cls, method, slow)


@pytest.mark.parametrize("faster", ["bf16", "float32"])
def test_adaptive_index_races_and_keeps_the_faster(glove, monkeypatch, faster):
    """float32 answers until LOWP_SWITCH_SCORES word scores; then the first call with enough
    scores races the two on its own queries and the faster answers from then on (the slower one,
    slowed here by 20 ms a call, loses). Calls too small to time stay float32 until then."""
    pytest.importorskip("torch")
    x = glove.vectors[:3000]
    monkeypatch.setattr(neighbours, "LOWP_SWITCH_SCORES", 3 * 100 * len(x))
    monkeypatch.setattr(neighbours, "LOWP_RACE_SCORES", 60 * len(x))
    monkeypatch.setattr(neighbours, "lowp_available", lambda: True)
    slowed(monkeypatch, ExactIndex if faster == "bf16" else CertifiedIndex, "query")
    rng = np.random.default_rng(5)
    index = AdaptiveIndex(x)
    fp32 = ExactIndex(x)
    sizes = [100, 100, 100, 50, 100, 100]  # the fourth call (50 queries) is too small to race
    for call, n in enumerate(sizes):
        q = x[rng.integers(0, len(x), n)] + sample_noise(n, x.shape[1], 5.0, rng, np.eye(x.shape[1]))
        got = index.query(q)
        if call < 4:
            assert index._certified is None and index.choice == "float32"
            np.testing.assert_array_equal(got, fp32.query(q))
            assert (index._challenger is not None) == (call == 3)
        else:
            assert index._challenger is None
            assert index.choice.startswith("certified bf16" if faster == "bf16" else "float32: measured")
            assert (type(index._certified) is CertifiedIndex) == (faster == "bf16")
            np.testing.assert_array_equal(got, brute_force(x, q) if faster == "bf16" else fp32.query(q))
    rows = np.arange(0, len(x), 7)
    np.testing.assert_array_equal(index.query_among(q, rows), rows[brute_force(x[rows], q)])


def test_adaptive_index_stays_float32_without_bf16(glove, monkeypatch):
    x = glove.vectors[:1000]
    monkeypatch.setattr(neighbours, "LOWP_SWITCH_SCORES", 0)
    monkeypatch.setattr(neighbours, "lowp_available", lambda: False)
    index = AdaptiveIndex(x)
    q = x[:50] + 0.01
    for _ in range(3):
        np.testing.assert_array_equal(index.query(q), ExactIndex(x).query(q))
    assert index._certified is None


def float64_best_two(x, q):
    """The float64 best two, ties to the lower row (the first two of np.lexsort((rows, d)) with
    d = ((q − X)**2).sum(axis=1)): as ``float64_argmin``, the GEMM keeps every word within
    2⁻³⁰(‖q‖ + max‖x‖)² of the second smallest distance, and their float64 distances decide."""
    x = np.asarray(x, dtype=np.float64)
    xx = (x * x).sum(axis=1)
    rmax = np.sqrt(xx.max())
    out = np.empty((len(q), 2), dtype=np.int64)
    for s in range(0, len(q), 256):
        qc = np.asarray(q[s : s + 256], dtype=np.float64)
        qq = (qc * qc).sum(axis=1)
        d = qq[:, None] - 2 * qc @ x.T + xx
        second = np.partition(d, 1, axis=1)[:, 1]
        near = d <= (second + 2.0**-30 * (np.sqrt(qq) + rmax) ** 2)[:, None]
        for i, p in enumerate(qc):
            rows = np.flatnonzero(near[i])
            out[s + i] = rows[np.lexsort((rows, ((p - x[rows]) ** 2).sum(axis=1)))[:2]]
    return out


def brute_best_two(x, q):
    """The float64 best two, directly: one distance row per query."""
    x = np.asarray(x, dtype=np.float64)
    rows = np.arange(len(x))
    return np.array([np.lexsort((rows, ((p - x) ** 2).sum(axis=1)))[:2] for p in np.asarray(q, dtype=np.float64)])


@pytest.mark.parametrize("epsilon", [5.0, 10.0, 40.0])
def test_bf16_best_two_equals_float64_on_noisy_glove(bf16, vocab, epsilon):
    rng = np.random.default_rng(int(epsilon) + 100)
    words = rng.integers(0, len(vocab), 20)
    q = np.concatenate(
        [
            noisy(vocab, 600, epsilon, seed=int(epsilon) + 100),
            vocab[words],  # at a word: itself first
            (vocab[words[:10]].astype(np.float64) + vocab[words[10:]]) / 2,  # between two words
        ]
    )
    got = bf16.query_two(q)
    np.testing.assert_array_equal(got, float64_best_two(vocab, q))
    np.testing.assert_array_equal(got[:, 0], bf16.query(q))
    assert (got[600:620, 0] == words).all()


def test_bf16_best_two_across_query_blocks(bf16, vocab, monkeypatch):
    monkeypatch.setattr(neighbours, "LOWP_QUERY_BLOCK", 1024)
    monkeypatch.setattr(neighbours, "LOWP_GEMM_ROWS", 512)
    q = noisy(vocab, 2085, 10.0, seed=8)
    got = bf16.query_two(q)
    np.testing.assert_array_equal(got, float64_best_two(vocab, q))
    # float32 ExactIndex.query_two differs only at near-ties
    assert (got == ExactIndex(vocab).query_two(q)).all(axis=1).mean() > 0.998


@pytest.mark.parametrize("bits", [3, 5])
def test_best_two_certificate_alone_with_a_coarse_scorer(bits):
    """Coarse scores leave many candidates for the second place too; the two must be exact."""
    x = np.random.default_rng(0).standard_normal((3 * LOWP_WORD_BLOCK + 11, 20)).astype(np.float32)
    q = x[np.random.default_rng(1).integers(0, len(x), 300)] + np.random.default_rng(2).normal(0, 2, (300, 20))
    np.testing.assert_array_equal(CertifiedIndex(x, _Emulated(bits)).query_two(q), brute_best_two(x, q))


@pytest.mark.parametrize("lowp", ["bf16", "emulated"])
def test_best_two_ties_duplicates_and_odd_queries(glove, lowp):
    """Exact float64 ties go to the lower rows, in both columns."""
    if lowp == "bf16":
        pytest.importorskip("torch")
    make = (lambda x: CertifiedIndex(x)) if lowp == "bf16" else (lambda x: CertifiedIndex(x, _Emulated(6)))
    x = glove.vectors[:3000].copy()
    x[2000] = x[1500] = x[10]  # exact duplicates
    x[2999] = x[11]
    # Three words at exactly the same float64 distance (50/256) from a dyadic point c, no other
    # word nearer (c is 3.5 away from x[5]).
    c = np.round(x[5].astype(np.float64) * 64) / 64 + 0.5
    sign = np.where(np.arange(50) % 2, 1.0, -1.0)
    x[2100], x[40], x[700] = c + 1 / 16, c - 1 / 16, c + sign / 16
    index = make(x)
    rng = np.random.default_rng(6)
    q = np.concatenate(
        [
            x[[10, 1500, 2000, 11, 2999, 0, 1234]],
            c[None],
            x[[10, 11]] + rng.normal(0, 1e-3, (2, 50)),
            (x[[3, 40]].astype(np.float64) + x[[4, 41]]) / 2,
            rng.standard_normal((8, 50)) * np.array([1e3, 1e5, 1e8, 1e11, 1e13, 1e16, 0.0, 1e-30])[:, None],
        ]
    )
    got = index.query_two(q)
    np.testing.assert_array_equal(got, brute_best_two(x, q))
    assert got[:8].tolist() == [
        [10, 1500],
        [10, 1500],
        [10, 1500],
        [11, 2999],
        [11, 2999],
        [0, got[5, 1]],
        [1234, got[6, 1]],
        [40, 700],
    ]
    # among: exact among a subset, ties to the first of the subset.
    rows = np.array([5, 10, 11, 40, 700, 1500, 2000, 2100, 2500, 2999])
    np.testing.assert_array_equal(index.query_two(q, rows), rows[brute_best_two(x[rows], q)])
    # Tiny vocabularies, empty batches, non-finite queries (rows 0 and 1, as the lexsort).
    two = make(x[[7, 7]])
    np.testing.assert_array_equal(two.query_two(q[:5]), np.tile([0, 1], (5, 1)))
    assert index.query_two(np.zeros((0, 50))).shape == (0, 2)
    bad = np.array([[np.nan] * 50, [np.inf] + [0.0] * 49])
    np.testing.assert_array_equal(index.query_two(bad), [[0, 1], [0, 1]])
    with pytest.raises(ValueError):
        make(x[:1]).query_two(q)
    with pytest.raises(ValueError):
        index.query_two(q, np.array([3]))


def test_adaptive_index_best_two_moves_to_certified(glove, monkeypatch):
    """query_two counts its scores as query does, races on its own calls, and answers the
    float64 best two once bf16 won."""
    pytest.importorskip("torch")
    x = glove.vectors[:3000]
    monkeypatch.setattr(neighbours, "LOWP_SWITCH_SCORES", 2 * 100 * len(x))
    monkeypatch.setattr(neighbours, "LOWP_RACE_SCORES", 60 * len(x))
    monkeypatch.setattr(neighbours, "lowp_available", lambda: True)
    slowed(monkeypatch, ExactIndex, "query_two")
    rng = np.random.default_rng(9)
    index = AdaptiveIndex(x)
    for call in range(4):
        q = x[rng.integers(0, len(x), 100)] + sample_noise(100, x.shape[1], 5.0, rng, np.eye(x.shape[1]))
        got = index.query_two(q)
        if call < 2:
            assert index._certified is None
            np.testing.assert_array_equal(got, ExactIndex(x).query_two(q))
        else:
            assert type(index._certified) is CertifiedIndex
            np.testing.assert_array_equal(got, brute_best_two(x, q))
    rows = np.arange(0, len(x), 7)
    np.testing.assert_array_equal(index.query_two(q, rows), rows[brute_best_two(x[rows], q)])
