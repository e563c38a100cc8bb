from __future__ import annotations

import json

import numpy as np
import pytest

from dpspark.config import EmbeddingReportConfig
from dpspark.embeddings import Embeddings
from dpspark.errors import ConfigError, OutputExistsError
from dpspark.evaluation import embedding_report as er

# runtime: numpy, pyarrow and Python differ across the Databricks runtimes (CONTRIBUTING.md)
pytestmark = pytest.mark.runtime


def _brute_force(x: np.ndarray, ks, rows=None) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    rows = np.arange(len(x)) if rows is None else np.asarray(rows)
    d = np.sqrt(((x[rows][:, None, :] - x[None, :, :]) ** 2).sum(axis=2))
    d[np.arange(len(rows)), rows] = np.inf  # exclude the word itself
    d.sort(axis=1)
    return d[:, np.asarray(ks) - 1]


def _embeddings(x: np.ndarray) -> Embeddings:
    return Embeddings([f"w{i}" for i in range(len(x))], np.asarray(x, dtype=np.float32), "test", "0" * 64)


def test_knn_distances_equal_brute_force_float64():
    x = np.random.default_rng(1).standard_normal((300, 8)).astype(np.float32)
    got = er.knn_distances(x, ks=(1, 2, 5))
    np.testing.assert_allclose(got, _brute_force(x, (1, 2, 5)), rtol=1e-6, atol=1e-6)
    rows = np.array([0, 17, 299, 42])
    np.testing.assert_allclose(er.knn_distances(x, (1, 2, 5), rows), _brute_force(x, (1, 2, 5), rows), rtol=1e-6)


def test_knn_distances_blocked_path_and_shifted_data(monkeypatch):
    # Force many small blocks, and move the cloud far from the origin (float32 cancellation).
    monkeypatch.setattr(er, "_MAX_QUERY_BLOCK", 7)
    x = np.random.default_rng(2).standard_normal((200, 5)) + 100.0
    np.testing.assert_allclose(er.knn_distances(x, (1, 3, 199)), _brute_force(x, (1, 3, 199)), rtol=1e-6)


def test_knn_excludes_self_but_counts_duplicates():
    x = np.array([[0.0, 0.0], [0.0, 0.0], [3.0, 0.0], [3.0, 4.0]])
    np.testing.assert_allclose(er.knn_distances(x, (1, 2)), [[0, 3], [0, 3], [3, 3], [4, 5]])


def test_knn_rejects_k_beyond_vocabulary():
    with pytest.raises(ConfigError, match="k = 5"):
        er.knn_distances(np.zeros((5, 2)), ks=(5,))


def _line_report(**kwargs):
    # 200 points on a line (d = 1) with gaps 1, 2, ..., 199: word i's nearest-neighbour
    # distance is gap i (i ≥ 1), word 0's is gap 1.
    x = np.concatenate([[0.0], np.cumsum(np.arange(1, 200, dtype=np.float64))])[:, None]
    return er.embedding_report(_embeddings(x), np.arange(200), **kwargs)


def test_table5_statistics_on_a_line():
    report = _line_report(lam=0.5, sample=None)
    den = report["density"]
    assert den["d_max"] == pytest.approx(199, rel=1e-6)
    assert den["d_min"] == pytest.approx(1, rel=1e-6)
    assert den["d_max_over_d_min"] == pytest.approx(199, rel=1e-6)
    # 1-NN distances: word 0 → 1, word i → i for i = 1..199; the 50 largest are 150..199,
    # the 50 smallest are 1, 1, 2, ..., 49.
    sparse, dense = np.arange(150, 200).mean(), (1 + np.arange(1, 50).sum()) / 50
    assert den["sparse_mean"] == pytest.approx(sparse, rel=1e-5)
    assert den["dense_mean"] == pytest.approx(dense, rel=1e-6)
    assert den["sparse_over_dense"] == pytest.approx(sparse / dense, rel=1e-6)
    assert [w["word"] for w in den["sparsest"][:3]] == ["w199", "w198", "w197"]
    assert den["sparsest"][0]["nearest"] == "w198"
    assert {w["word"] for w in den["densest"][:2]} == {"w0", "w1"}
    assert len(den["sparsest"]) == len(den["densest"]) == 10


def test_spectrum_and_epsilon_factors():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((400, 6)) @ rng.standard_normal((6, 6)) * np.arange(1, 7)
    report = er.embedding_report(_embeddings(x), np.arange(400), lam=0.5, sample=50, seed=4)
    sp = report["spectrum"]
    ev = np.asarray(sp["eigenvalues"])
    assert ev.sum() == pytest.approx(6, rel=1e-10)  # trace d
    assert (np.diff(ev) <= 0).all() and sp["xi_min"] == ev[-1] and sp["xi_max"] == ev[0]
    for f in sp["euclidean_epsilon_factor"]:
        assert f["factor"] == pytest.approx(1 / np.sqrt(f["lambda"] * ev[-1] + 1 - f["lambda"]))
    assert sp["euclidean_epsilon_factor"][0]["factor"] == 1.0
    assert sp["euclidean_epsilon_factor_at_lambda"] == pytest.approx(1 / np.sqrt(0.5 * ev[-1] + 0.5))
    knn = report["knn_percentiles"]
    assert knn["sample_size"] == 50 and "default_rng(4)" in knn["sample_rule"]
    assert knn["ks"] == [1, 5, 10, 20, 50, 100]
    rows = np.sort(np.random.default_rng(4).choice(400, size=50, replace=False))
    x32 = x.astype(np.float32)  # Embeddings hold float32 vectors
    expected = np.percentile(_brute_force(x32, knn["ks"], rows), er.PERCENTILES, axis=0).T
    np.testing.assert_allclose(knn["distances"], expected, rtol=1e-6)


def test_eigenvalues_sum_to_d_on_glove(glove):
    report = er.embedding_report(glove, np.arange(3000), lam=1.0, sample=100)
    assert sum(report["spectrum"]["eigenvalues"]) == pytest.approx(50, rel=1e-10)


def test_write_report_creates_files_and_refuses_existing(tmp_path):
    report = _line_report(sample=None)
    out = tmp_path / "a" / "report"
    paths = er.write_report(report, out)
    assert sorted(p.name for p in out.iterdir()) == sorted(er.FILES) == sorted(p.name for p in paths)
    data = json.loads((out / "embedding_report.json").read_text(encoding="utf-8"))
    assert data["density"]["words"] == 200
    md = (out / "embedding_report.md").read_text(encoding="utf-8")
    assert "| k | p5 | p20 | p50 | p80 | p95 |" in md and "d_max/d_min" in md
    assert (out / "embedding_report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(OutputExistsError, match="already exists"):
        er.write_report(report, out)
    (out / "keep.txt").write_text("x")
    er.write_report(report, out, overwrite=True)
    assert (out / "keep.txt").exists()


def test_write_report_removes_what_it_created_on_failure(tmp_path, monkeypatch):
    report = _line_report(sample=None)

    def boom(*_args):
        raise RuntimeError("plot failed")

    monkeypatch.setattr(er, "_plot", boom)
    with pytest.raises(RuntimeError, match="plot failed"):
        er.write_report(report, tmp_path / "new" / "report")
    assert not (tmp_path / "new").exists()


def test_run_on_default_embeddings(tmp_path, capsys):
    out = tmp_path / "report"
    config = EmbeddingReportConfig.parse({"output": str(out), "vocab-size": "5000", "sample": "500"})
    assert er.run(config) == 0
    printed = capsys.readouterr().out
    assert "d_max/d_min" in printed and "xi_min" in printed and str(out) in printed
    report = json.loads((out / "embedding_report.json").read_text(encoding="utf-8"))
    assert report["vocabulary"]["size"] == 5000 and report["knn_percentiles"]["sample_size"] == 500
    assert "default_rng(0)" in report["knn_percentiles"]["sample_rule"]  # seed 0 by default
    dist = np.asarray(report["knn_percentiles"]["distances"])  # rows k, columns percentiles
    assert dist.shape == (6, 5)
    assert (np.diff(dist, axis=0) > 0).all()  # each percentile grows with k
    assert (np.diff(dist, axis=1) > 0).all()  # and with the percentile
    assert report["density"]["d_max_over_d_min"] > 1
    with pytest.raises(OutputExistsError):
        er.run(EmbeddingReportConfig.parse({"output": str(out), "vocab_size": 5000}))


def test_run_quiet_all_words_and_overwrite(tmp_path, capsys):
    out = tmp_path / "report"
    settings = {"output": str(out), "vocab_size": 300, "sample": 0, "lambda": 0.5, "quiet": True}
    assert er.run(EmbeddingReportConfig.parse(settings)) == 0
    assert capsys.readouterr().out == ""
    report = json.loads((out / "embedding_report.json").read_text(encoding="utf-8"))
    assert report["knn_percentiles"]["sample_size"] == 300  # sample 0 = every word
    assert report["spectrum"]["lambda"] == 0.5
    (out / "keep.txt").write_text("x")
    with pytest.raises(OutputExistsError):
        er.run(EmbeddingReportConfig.parse(settings))
    assert er.run(EmbeddingReportConfig.parse({**settings, "mode": "overwrite"})) == 0
    assert (out / "keep.txt").exists() and capsys.readouterr().out == ""


def test_config_rejects_bad_settings(tmp_path):
    with pytest.raises(ConfigError, match="lambda"):
        EmbeddingReportConfig.parse({"output": str(tmp_path / "x"), "lambda": 1.5})
    with pytest.raises(ConfigError, match="sample"):
        EmbeddingReportConfig.parse({"output": str(tmp_path / "x"), "sample": -3})
    with pytest.raises(ConfigError, match="mode"):
        EmbeddingReportConfig.parse({"output": str(tmp_path / "x"), "mode": "append"})
    with pytest.raises(ConfigError, match="--output"):
        er.run(EmbeddingReportConfig.parse({}))
    assert not (tmp_path / "x").exists()
