"""Hostile use, round 5 (issue 39), through the CLI on one output: the ledger sums per guarantee type
and exact unit, shows the converted Euclidean total, reads an entry that contradicts itself as damaged
(exit 8, nothing changed), and says the output's budget is unbounded once any release is."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from outputs import entries, snapshot

from dpspark.cli import main
from dpspark.embeddings import load_default

pytestmark = pytest.mark.spark

VOCAB = ["--vocab-size", "2000"]


def factor(lam):
    """1/sqrt(λ·ξ_min + 1 − λ), ξ_min of numpy's covariance of the first 2,000 GloVe vectors scaled to trace d."""
    x = np.asarray(load_default().vectors[:2000], dtype=np.float64)
    cov = np.cov(x, rowvar=False)
    cov *= x.shape[1] / np.trace(cov)
    return 1.0 / math.sqrt(lam * np.linalg.eigvalsh(cov)[0] + 1.0 - lam)


def test_six_releases_of_one_output_are_summed_per_type_and_unit(spark, dataset, tmp_path):
    out = tmp_path / "out"
    before = snapshot(dataset)
    base = ["perturb", "--input", str(dataset), "--output", str(out), "--columns", "text", *VOCAB, "--quiet"]
    again = ["--mode", "overwrite", "--allow-rerelease"]
    runs = [
        ["--mechanism", "laplace", "--epsilon", "10"],
        ["--mechanism", "mahalanobis", "--lambda", "1", "--epsilon", "10", *again],
        ["--mechanism", "mahalanobis", "--lambda", "0.5", "--epsilon", "8", *again],
        ["--mechanism", "vickrey", "--lambda", "1", "--epsilon", "6", *again],
        ["--mechanism", "custext", "--top-k", "20", "--epsilon", "3", *again],
        ["--mechanism", "custext", "--top-k", "5", "--epsilon", "2", *again],
    ]
    for run in runs:
        assert main([*base, *run]) == 0
    assert snapshot(dataset) == before

    m = json.loads((out / "_dpspark_manifest.json").read_text())
    (row,) = m["ledger"]["epsilon_spent"]
    got = sorted(
        (
            k["guarantee_type"],
            k["exact_unit"].get("distance") or k["exact_unit"].get("groups"),
            k["spent"],
            k["releases"],
        )
        for k in row["by_guarantee_type"]
    )
    # vickrey λ = 1 shares mahalanobis λ = 1's norm: 10 + 6; every other setting is its own unit
    assert got == [
        ("group", "custext/groups/v1/k=20/cosine", 3.0, 1),
        ("group", "custext/groups/v1/k=5/cosine", 2.0, 1),
        ("metric", "euclidean", 10.0, 1),
        ("metric", "regularized-mahalanobis", 8.0, 1),
        ("metric", "regularized-mahalanobis", 16.0, 1 + 1),
    ]
    lambdas = {
        k["exact_unit"].get("lambda"): k["spent"] for k in row["by_guarantee_type"] if "lambda" in k["exact_unit"]
    }
    assert lambdas == {1.0: 16.0, 0.5: 8.0}
    assert row["epsilon_at_most"] is None  # never one number across units (it was 39)
    (conv,) = row["converted"]
    assert conv["exact_unit"]["distance"] == "euclidean" and conv["releases"] == 4
    assert conv["spent_at_most"] == pytest.approx(10 + 16 * factor(1.0) + 8 * factor(0.5), rel=1e-6)
    assert "Lemma 2" in conv["how"]
    # each entry states its unit in words, and the RM releases their factor
    mahalanobis = entries(out)[1]
    assert mahalanobis["converted"]["factor"] == pytest.approx(factor(1.0), rel=1e-6)
    assert "regularized Mahalanobis" in mahalanobis["unit_text"]


def test_an_edited_entry_is_damaged_and_nothing_is_released(spark, dataset, tmp_path, capsys):
    out = tmp_path / "out"
    base = ["perturb", "--input", str(dataset), "--output", str(out), "--columns", "text", *VOCAB, "--quiet"]
    assert main([*base, "--mechanism", "laplace", "--epsilon", "10"]) == 0
    (path,) = (out / "_dpspark_ledger").glob("*.json")
    path.write_text(json.dumps({**json.loads(path.read_text()), "guarantee_type": "bogus", "spent": 0}))
    before, raw = snapshot(out), snapshot(dataset)
    capsys.readouterr()
    code = main([*base, "--mechanism", "laplace", "--epsilon", "5", "--mode", "overwrite", "--allow-rerelease"])
    err = capsys.readouterr().err
    assert code == 8
    assert f"ledger entry {path}" in err or path.name in err
    assert "unknown guarantee_type 'bogus'" in err and "restore it from a backup" in err
    assert snapshot(out) == before and snapshot(dataset) == raw
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "raw"]


def test_the_output_stays_unbounded_after_a_release_without_a_guarantee(spark, dataset, tmp_path, capsys):
    out = tmp_path / "out"
    base = ["perturb", "--input", str(dataset), "--output", str(out), "--columns", "text", *VOCAB, "--quiet"]
    again = ["--mode", "overwrite", "--allow-rerelease"]
    assert main([*base, "--mechanism", "truncated-gumbel", "--epsilon", "1000"]) == 0
    capsys.readouterr()
    assert main([*base, "--mechanism", "laplace", "--epsilon", "10", *again]) == 0
    assert (
        capsys.readouterr()
        .out.strip()
        .endswith("; the output's budget is unbounded: an earlier release of it has no guarantee")
    )
    led = json.loads((out / "_dpspark_manifest.json").read_text())["ledger"]
    assert led["unbounded"] is True and led["this_release_unbounded"] is False
    (row,) = led["epsilon_spent"]
    assert {k["guarantee_type"]: k["unbounded"] for k in row["by_guarantee_type"]} == {"none": True, "metric": False}
