from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from dpspark.config import EvaluateVectorsConfig
from dpspark.embeddings import load_default
from dpspark.errors import ConfigError, OutputExistsError
from dpspark.evaluation import privemb_eval as pe

# runtime: numpy, pyarrow and Python differ across the Databricks runtimes (CONTRIBUTING.md)
pytestmark = pytest.mark.runtime


@pytest.fixture(scope="module")
def glove():
    return load_default()


def test_lift_keeps_distances_and_inner_products():
    x = np.random.default_rng(3).standard_normal((40, 50))
    q = pe.lift_matrix(50, 300, seed=0)
    assert q.shape == (300, 50)
    np.testing.assert_allclose(q.T @ q, np.eye(50), atol=1e-12)
    y = pe.lift(x, q)
    assert y.shape == (40, 300)
    np.testing.assert_allclose(y @ y.T, x @ x.T, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(pe._distances(y, y), pe._distances(x, x), rtol=1e-7, atol=1e-6)
    np.testing.assert_array_equal(pe.lift_matrix(50, 300, seed=0), q)  # fixed for a seed


def test_pairs_are_fixed_for_a_seed_and_disjoint():
    a1, b1 = pe.sample_pairs(400000, seed=0)
    a2, b2 = pe.sample_pairs(400000, seed=0)
    np.testing.assert_array_equal(a1, a2)
    np.testing.assert_array_equal(b1, b2)
    assert len(a1) == len(b1) == 100
    assert len(np.union1d(a1, b1)) == 200 and max(a1.max(), b1.max()) < pe.POOL
    a3, _ = pe.sample_pairs(400000, seed=1)
    assert not np.array_equal(a1, a3)


def test_errors_are_zero_without_noise():
    x = np.random.default_rng(0).standard_normal((6, 4))
    errs = pe.pair_errors(x[:3], x[3:], x[:3], x[3:])
    assert all(np.allclose(e, 0, atol=1e-12) and e.size == 9 for e in errs.values())


def test_m2_beats_m1_at_d300_beta_09_and_projection_floor_at_large_epsilon(glove):
    ev = pe.evaluate(glove, epsilons=[1.0, 20.0, 1000.0], betas=[0.9], skip_classifier=True, seed=0)
    f = {(r["d"], r["metric"], r["epsilon"]): r for r in ev.report["findings"]}
    for metric in pe.METRICS:
        small = f[(300, metric, 20.0)]
        # ε = 20: errors are far below those at ε = 1, and M2 (noise in m = 47 dims) beats M1 (300 dims).
        assert small["m2_medians"][0.9] < small["m1_median"] < f[(300, metric, 1.0)]["m1_median"] / 10
        # ε = 1000: both errors are small; M1 wins, the projection's distortion is M2's floor.
        big = f[(300, metric, 1000.0)]
        assert big["m1_median"] < big["m2_medians"][0.9] < 3.0
    assert ev.approx.m[300][0.9] == 47


def test_tiny_run_writes_every_file(tmp_path):
    out = tmp_path / "eval"
    config = EvaluateVectorsConfig.parse(
        {"output": str(out), "epsilons": "5", "betas": "0.9,0.6", "class-epsilons": "10", "runs": 2, "pairs": 10}
    )
    assert pe.run(config) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(pe.FILES)
    rep = json.loads((out / "evaluation.json").read_text())
    assert rep["settings"]["betas"] == [0.6, 0.9]
    rows = list(csv.DictReader((out / "approximation.csv").read_text().splitlines()))
    # 2 dims × 2 metrics × (M1 + 2 β of M2)
    assert len(rows) == 12 and all(int(r["pairs"]) == 100 for r in rows)
    cls = list(csv.DictReader((out / "classification.csv").read_text().splitlines()))
    assert [r["mechanism"] for r in cls] == ["non-private", "M1", "M2"]
    assert all(int(r["runs"]) == 2 for r in cls)
    assert float(cls[0]["accuracy_mean"]) > 0.7  # GloVe separates VADER sentiment words
    md = (out / "evaluation.md").read_text()
    assert "## Findings" in md and "| M2 (β=0.8, m=59) | 10 |" in md
    with pytest.raises(OutputExistsError):
        pe.run(config)


def test_config_validates_the_grids():
    c = EvaluateVectorsConfig.parse({"output": "x"})
    assert (c.epsilons, c.betas, c.class_epsilons, c.seed, c.pairs) == (
        [1.0, 2.0, 5.0],
        list(pe.BETAS),
        [5.0, 10.0, 20.0],
        0,
        100,
    )
    with pytest.raises(ConfigError, match="beta"):
        EvaluateVectorsConfig.parse({"output": "x", "betas": "0.5,1.2"})
    with pytest.raises(ConfigError, match="epsilon"):
        EvaluateVectorsConfig.parse({"output": "x", "class_epsilons": "5,-1"})
    with pytest.raises(ConfigError, match="delta"):
        EvaluateVectorsConfig.parse({"output": "x", "delta": 0})
    with pytest.raises(ConfigError, match="--output"):
        pe.run(EvaluateVectorsConfig.parse({}))


def test_failed_write_leaves_nothing(tmp_path, monkeypatch, glove):
    ev = pe.evaluate(glove, epsilons=[5.0], betas=[0.9], skip_classifier=True, n_pairs=5)

    def boom(*a, **k):
        raise RuntimeError("disk full")

    monkeypatch.setattr(pe, "_plot", boom)
    out = tmp_path / "a" / "b"
    with pytest.raises(RuntimeError):
        pe.write_outputs(ev, out)
    assert not (tmp_path / "a").exists()


def test_classifier_on_private_vectors_learns_less_than_on_raw_ones(glove):
    rows, labels, _ = pe.sentiment_dataset(glove, pe.vader_lexicon(), 0.5, seed=0)
    x = glove.vectors[rows].astype(np.float64)
    res = pe.classification(x, labels, epsilons=[5.0], beta=0.8, runs=2, delta=1e-6, seed=0)
    acc = {r["mechanism"]: r["accuracy_mean"] for r in res["rows"]}
    raw = max(v for k, v in acc.items() if k not in ("M1", "M2"))
    assert raw > 0.75 and acc["M1"] < raw and acc["M2"] < raw
