"""DeviceIndex (dpspark.device): CertifiedIndex's certificate on a torch device answers exactly the
float64 argmin and best two. Here the device is the CPU (``device="cpu"``); the same code runs on
CUDA (bench/gpu_device_run.sh).

The reference is independent of the certificate: plain float32 squared distances (torch GEMM)
keep every word within 2⁻¹³(‖q‖ + max‖x‖)² of the smallest (or second smallest) one, far more
than float32's error, and numpy's float64 ((q − x)**2).sum(axis=1) orders those, ties to the
lowest row: exactly np.argmin / the first two of np.lexsort((rows, d)) over every word.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

# runtime: numpy, pyarrow and Python differ across the Databricks runtimes (CONTRIBUTING.md)
pytestmark = pytest.mark.runtime

torch = pytest.importorskip("torch", reason="DeviceIndex needs PyTorch (pip install 'dpspark[gpu]')")

from dpspark import device as device_module  # noqa: E402
from dpspark.device import DeviceIndex, exact_index, task_device  # noqa: E402
from dpspark.mechanisms import sample_noise  # noqa: E402
from dpspark.mechanisms.geometry import geometry  # noqa: E402
from dpspark.neighbours import ExactIndex  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One thread, as in a Spark task (the device index follows BLAS's limit)."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    with threadpoolctl.threadpool_limits(1):
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        yield
        torch.set_num_threads(threads)


def float64_best_two(x: np.ndarray, q: np.ndarray) -> np.ndarray:
    """The float64 best two of each query (n×2, nearest first, ties to the lower row)."""
    x64 = np.asarray(x, dtype=np.float64)
    xx = (x64 * x64).sum(axis=1)
    rmax = np.sqrt(xx.max())
    xt = torch.from_numpy(x64.astype(np.float32))
    xx32 = torch.from_numpy(xx.astype(np.float32))
    out = np.empty((len(q), 2), dtype=np.int64)
    for s in range(0, len(q), 64):
        qc = np.asarray(q[s : s + 64], dtype=np.float64)
        d = xx32 - 2 * (torch.from_numpy(qc.astype(np.float32)) @ xt.T)  # ‖x‖² − 2q·x, float32
        v, i = (t.numpy() for t in torch.topk(d, 8, dim=1, largest=False))
        lim = v[:, 1] + 2.0**-13 * (np.sqrt((qc * qc).sum(axis=1)) + rmax) ** 2
        # Rows whose 8th smallest is beyond the limit: every candidate is among the 8, ordered at once.
        dist = np.where(v <= lim[:, None], ((qc[:, None, :] - x64[i]) ** 2).sum(axis=2), np.inf)
        order = np.lexsort((i, dist), axis=-1)[:, :2]
        out[s : s + len(qc)] = np.take_along_axis(i, order, axis=1)
        for r in np.flatnonzero(v[:, 7] <= lim):  # more candidates than 8: the whole row
            rows = np.flatnonzero(d[r].numpy() <= lim[r])
            out[s + r] = rows[np.lexsort((rows, ((qc[r] - x64[rows]) ** 2).sum(axis=1)))[:2]]
    return out


def brute_best_two(x, q):
    """The same reference, directly: one float64 distance row per query."""
    x = np.asarray(x, dtype=np.float64)
    rows = np.arange(len(x))
    return np.array([np.lexsort((rows, ((p - x) ** 2).sum(axis=1)))[:2] for p in np.asarray(q, dtype=np.float64)])


@pytest.fixture(scope="module")
def vocab(glove):
    return glove.vectors[:50_000]


@pytest.fixture(scope="module")
def index(vocab):
    return DeviceIndex(vocab, "cpu")


@pytest.mark.slow
def test_argmin_equals_float64_on_80000_noisy_points(index, vocab):
    """80,000 noisy GloVe points at four ε (Laplace and Mahalanobis noise), 50,000 words."""
    rng = np.random.default_rng(32)
    a = geometry(vocab, 1.0).a
    found, expected = [], []
    for epsilon, shape in ((1.0, None), (5.0, a), (10.0, None), (40.0, a)):
        q = vocab[rng.integers(0, len(vocab), 20_000)] + sample_noise(20_000, vocab.shape[1], epsilon, rng, shape)
        found.append(index.query(q))
        expected.append(float64_best_two(vocab, q)[:, 0])
    np.testing.assert_array_equal(np.concatenate(found), np.concatenate(expected))
    assert index.open_queries < 100  # fp32's certificate almost never needs a full row


@pytest.mark.slow
def test_best_two_equals_float64_on_noisy_points_and_15000_near_ties(index, vocab):
    """Best two on 30,000 noisy points, and argmin and best two on 15,000 midpoints between a
    word and its nearest other word (both at the same distance, up to rounding)."""
    rng = np.random.default_rng(33)
    q = vocab[rng.integers(0, len(vocab), 30_000)] + sample_noise(30_000, vocab.shape[1], 10.0, rng)
    np.testing.assert_array_equal(index.query_two(q), float64_best_two(vocab, q))
    words = rng.choice(len(vocab), 15_000, replace=False)
    pairs = ExactIndex(vocab).query_two(vocab[words])
    other = np.where(pairs[:, 0] == words, pairs[:, 1], pairs[:, 0])
    mid = (vocab[words].astype(np.float64) + vocab[other]) / 2
    expected = float64_best_two(vocab, mid)
    assert (np.sort(expected, axis=1) == np.sort(np.stack([words, other], axis=1), axis=1)).mean() > 0.95
    np.testing.assert_array_equal(index.query(mid), expected[:, 0])
    np.testing.assert_array_equal(index.query_two(mid), expected)
    # The test means something: float32 search gets some of these ties wrong.
    assert (ExactIndex(vocab).query(mid) != expected[:, 0]).sum() > 0


@pytest.mark.parametrize("scores", ["fp32", "bf16"])
def test_duplicates_ties_subsets_and_odd_queries(glove, scores):
    x = glove.vectors[:3000].copy()
    x[2000] = x[1500] = x[10]  # exact duplicates: the lowest row wins
    x[2999] = x[11]
    c = np.round(x[5].astype(np.float64) * 64) / 64 + 0.5  # three words exactly 50/256 away from c
    sign = np.where(np.arange(50) % 2, 1.0, -1.0)
    x[2100], x[40], x[700] = c + 1 / 16, c - 1 / 16, c + sign / 16
    index = DeviceIndex(x, "cpu", scores)
    rng = np.random.default_rng(6)
    q = np.concatenate(
        [
            x[[10, 1500, 2000, 11, 2999, 0, 1234]],
            c[None],
            x[[10, 11]] + rng.normal(0, 1e-3, (2, 50)),
            (x[[3, 40]].astype(np.float64) + x[[4, 41]]) / 2,
            x[rng.integers(0, 3000, 200)] + sample_noise(200, 50, 5.0, rng),
            rng.standard_normal((8, 50)) * np.array([1e3, 1e5, 1e8, 1e11, 1e13, 1e16, 0.0, 1e-30])[:, None],
        ]
    )
    expected = brute_best_two(x, q)
    np.testing.assert_array_equal(index.query(q), expected[:, 0])
    got = index.query_two(q)
    np.testing.assert_array_equal(got, expected)
    assert got[:8].tolist()[:5] == [[10, 1500], [10, 1500], [10, 1500], [11, 2999], [11, 2999]]
    assert got[7].tolist() == [40, 700]
    rows = np.array([5, 10, 11, 40, 700, 1500, 2000, 2100, 2500, 2999])
    np.testing.assert_array_equal(index.query_among(q, rows), rows[brute_best_two(x[rows], q)[:, 0]])
    np.testing.assert_array_equal(index.query_two(q, rows), rows[brute_best_two(x[rows], q)])
    # within: a superset of each ball, as ExactIndex's.
    radii = np.full(3, 4.0)
    for found, centre in zip(index.within(x[[0, 10, 40]], radii), x[[0, 10, 40]]):
        inside = np.flatnonzero(((x.astype(np.float64) - centre) ** 2).sum(axis=1) < 16.0)
        assert set(inside) <= set(found)
    bad = np.array([[np.nan] * 50, [np.inf] + [0.0] * 49])
    np.testing.assert_array_equal(index.query(bad), [0, 0])
    np.testing.assert_array_equal(index.query_two(bad), [[0, 1], [0, 1]])
    assert index.query(np.zeros((0, 50))).shape == (0,)
    assert index.params()["device"] == "cpu" and index.method == "exact"


def test_best_two_is_certified_on_the_device_without_a_float64_rerank(glove):
    """fp32 scores settle almost every noisy query's best two by the certificate alone (the third
    score below the second's limit, the second below the best's): the float64 re-rank sees a few
    (query, word) pairs, not the two or more of every query that it saw before (4,005 here)."""
    x = glove.vectors[:5000]
    index = DeviceIndex(x, "cpu")
    rng = np.random.default_rng(9)
    q = x[rng.integers(0, len(x), 2000)] + sample_noise(2000, 50, 10.0, rng)
    np.testing.assert_array_equal(index.query_two(q), brute_best_two(x, q))
    assert index.reranked < 100


def test_bf16_scores_reach_the_full_scan_and_stay_exact(glove):
    """bf16 scores leave many words within the bound: the top scores cannot certify the answer
    for many queries, which then scan their whole row; the answers stay exact."""
    x = glove.vectors[:4000]
    index = DeviceIndex(x, "cpu", "bf16")
    rng = np.random.default_rng(8)
    q = x[rng.integers(0, len(x), 300)] + sample_noise(300, 50, 2.0, rng)
    np.testing.assert_array_equal(index.query(q), brute_best_two(x, q)[:, 0])
    assert index.open_queries > 30


def test_the_bound_is_what_makes_it_exact(glove):
    """With the bound switched off (c₁ = c₂ = 0) the top fp32 score alone decides, and some
    near-ties between a word and its nearest other word come out wrong: the certificate is
    what makes the device index exact."""
    x = glove.vectors[:20_000]
    rng = np.random.default_rng(4)
    words = rng.choice(len(x), 3000, replace=False)
    pairs = ExactIndex(x).query_two(x[words])
    other = np.where(pairs[:, 0] == words, pairs[:, 1], pairs[:, 0])
    mid = (x[words].astype(np.float64) + x[other]) / 2
    expected = float64_best_two(x, mid)[:, 0]
    np.testing.assert_array_equal(DeviceIndex(x, "cpu").query(mid), expected)
    weak = DeviceIndex(x, "cpu")
    weak._c1 = weak._c2 = 0.0
    assert (weak.query(mid) != expected).sum() > 0


def test_task_device_and_the_factory(glove, monkeypatch):
    task_device.cache_clear()
    assert task_device("cpu") is None
    with pytest.raises(ValueError, match="device must be one of"):
        task_device("tpu")
    if not torch.cuda.is_available():
        assert task_device("auto") is None  # no GPU here: the numpy path, unchanged
        with pytest.raises(RuntimeError, match="no CUDA GPU"):
            task_device("cuda")
        assert type(exact_index(glove.vectors[:1000], "auto")) is not DeviceIndex
    # A process whose task was given a device searches there.
    monkeypatch.setattr(device_module, "task_device", lambda choice: "cpu")
    index = exact_index(glove.vectors[:1000], "auto")
    assert type(index) is DeviceIndex and index.device == "cpu"
    task_device.cache_clear()


def test_device_travels_from_the_settings_to_the_executors_index(glove, tmp_path, monkeypatch):
    """--device is a setting of every command with a search (one field), written into the bundle and read
    where the executor builds its index; the manifest names it and the certified device search."""
    from dpspark.bundle import load_bundle
    from dpspark.config import PerturbConfig
    from dpspark.errors import ConfigError
    from dpspark.prepare import prepare

    assert PerturbConfig(epsilon=10.0).device == "auto"
    with pytest.raises(ConfigError, match="device"):
        PerturbConfig.from_sources(None, {"epsilon": 10.0, "device": "tpu"})
    real = importlib.util.find_spec
    with monkeypatch.context() as m:  # a driver without torch refuses cuda before any work
        m.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
        with pytest.raises(ConfigError, match=r"pip install 'dpspark\[gpu\]'"):
            PerturbConfig.from_sources(None, {"epsilon": 10.0, "device": "cuda"})
    config = PerturbConfig(epsilon=10.0, vocab_size=2000, device="cpu")
    prepared = prepare(config, embeddings=glove)
    assert type(prepared.index) is not DeviceIndex  # cpu: the numpy path, unchanged
    nn = prepared.manifest_fields()["nearest_neighbour"]
    assert nn["device"] == "cpu" and "float64" in nn["device_search"]
    bundle = prepared.write_bundle(tmp_path / "bundle")
    seen = []
    monkeypatch.setattr(device_module, "task_device", lambda choice: seen.append(choice) or "cpu")
    res = load_bundle(bundle, (glove.vectors, glove.word_rows))
    assert seen == ["cpu"] and type(res.index) is DeviceIndex  # the executor asks for the bundle's choice
    auto = prepare(PerturbConfig(epsilon=10.0, vocab_size=2000), embeddings=glove)
    load_bundle(auto.write_bundle(tmp_path / "auto"), (glove.vectors, glove.word_rows))
    assert seen[-1] == "auto"


def test_statistics_and_risk_manifests_name_the_device(glove):
    """privacy-stats and privacy-risk write the same account of the search as perturb: method, device and
    the certified device search."""
    pytest.importorskip("pyspark")
    from dpspark.config import StatsConfig
    from dpspark.device import DEVICE_SEARCH
    from dpspark.run.settings import mechanism_fields

    config = StatsConfig(output="unused", epsilons=[10.0], device="cuda")
    nn = mechanism_fields(config, glove, np.arange(1000), None)["nearest_neighbour"]
    assert nn == {"method": "exact", "params": {}, "device": "cuda", "device_search": DEVICE_SEARCH}
