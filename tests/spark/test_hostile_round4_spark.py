"""Hostile and careless use, round 4 (issue 30): the defects that need a Spark session. Each refusal: its
exit code, its one sentence, and nothing changed or left behind."""

from __future__ import annotations

import json
import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from outputs import entries, snapshot

import dpspark
from dpspark.cli import main

pytestmark = pytest.mark.spark

VOCAB = ["--vocab-size", "2000"]


def test_ledger_of_three_guarantee_types_on_one_output(spark, dataset, tmp_path, capsys):
    out = tmp_path / "out"
    before = snapshot(dataset)
    base = ["perturb", "--input", str(dataset), "--output", str(out), "--columns", "text", *VOCAB, "--quiet"]
    assert main([*base, "--epsilon", "10", "--mechanism", "laplace"]) == 0
    again = [*base, "--mode", "overwrite", "--allow-rerelease"]
    assert main([*again, "--epsilon", "2", "--mechanism", "santext-plus", "--p", "0.2"]) == 0
    assert "unbounded" not in capsys.readouterr().out
    assert main([*again, "--epsilon", "1000", "--mechanism", "truncated-gumbel"]) == 0
    assert capsys.readouterr().out.strip().endswith("; no guarantee: this release spends an unbounded budget")
    assert snapshot(dataset) == before

    got = [(e["mechanism"], e["guarantee_type"], e["spent"]) for e in entries(out)]
    assert got == [
        ("laplace", "metric", 10.0),
        ("santext-plus", "umldp", pytest.approx(2.0 + math.log(1 / 0.2))),
        ("truncated-gumbel", "none", None),
    ]
    m = json.loads((out / "_dpspark_manifest.json").read_text())
    (row,) = m["ledger"]["epsilon_spent"]
    sums = {k["guarantee_type"]: (k["spent"], k["unbounded"], k["releases"]) for k in row["by_guarantee_type"]}
    assert sums == {
        "metric": (10.0, False, 1),
        "umldp": (pytest.approx(2.0 + math.log(5.0)), False, 1),
        "none": (None, True, 1),
    }
    assert row["epsilon_at_most"] is None  # never a sum across types (it was 1012)
    assert m["ledger"]["unbounded"] is True  # this release spends an unbounded budget
    # dpspark's own files carry no Hadoop checksum files beside them
    assert not [p for p in (out / "_dpspark_ledger").iterdir() if p.name.endswith(".crc")]
    assert not (out / "._dpspark_manifest.json.crc").exists()


def test_report_folders_hold_no_crc_files(spark, tmp_path):
    out = tmp_path / "stats"
    argv = ["privacy-stats", "--output", str(out), "--mechanisms", "laplace", "--epsilons", "5", "--runs", "2"]
    assert main([*argv, "--words", "5", *VOCAB, "--quiet"]) == 0
    names = [p.name for p in out.rglob("*")]
    assert "_dpspark_manifest.json" in names and "summary.md" in names
    assert not [n for n in names if n.endswith(".crc")]


def test_nan_labels_are_refused_not_a_third_class(spark, tmp_path, capsys):
    raw = tmp_path / "raw.parquet"
    texts = ["the city is quiet", "a dog ran home", "the house is old", "we ran to the city"] * 5
    labels = [0.0, 1.0, float("nan"), 1.0] * 5
    pq.write_table(pa.table({"text": texts, "label": pa.array(labels, pa.float64())}), raw)
    before = snapshot(tmp_path)
    out = tmp_path / "out"
    argv = ["compare", "--input", str(raw), "--text-column", "text", "--label-column", "label", "--output", str(out)]
    assert main([*argv, "--mechanisms", "laplace", "--epsilons", "5", *VOCAB]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        "dpspark compare: error: label column 'label' has 5 null or NaN value(s): drop or label those rows first "
        "(every row needs a class)"
    )
    assert snapshot(tmp_path) == before and not out.exists()


def test_release_of_a_partition_without_a_dataframe(spark, tmp_path):
    raw = tmp_path / "raw"
    for day in ("2026-11-20", "2026-11-21"):
        (raw / f"date={day}").mkdir(parents=True)
        pq.write_table(pa.table({"text": ["the city is quiet", "a dog ran home"]}), raw / f"date={day}" / "p.parquet")
    before = snapshot(raw)
    out = tmp_path / "out"
    m = dpspark.release(
        None, output=str(out), columns="text", epsilon=10, partition="date=2026-11-21", input=str(raw), vocab_size=2000
    )
    assert m["partition"] == "date=2026-11-21" and m["counts"]["rows"] == 2
    assert [p.name for p in out.iterdir() if p.name.startswith("date=")] == ["date=2026-11-21"]
    assert snapshot(raw) == before


def test_compare_on_a_text_column_of_empty_strings(spark, tmp_path, capsys):
    """Texts without a token (blank strings, each different so that the split spreads them): refused, naming the
    text column. All the same empty string: every row of a class falls on one side of the split (a keyed hash of
    class and text), and the split's refusal says so."""
    out = tmp_path / "out"
    argv = ["compare", "--text-column", "text", "--label-column", "label", "--output", str(out)]
    argv += ["--mechanisms", "laplace", "--epsilons", "5", *VOCAB, "--runs", "4", "--refine", "0"]
    for texts, message in (
        ([" " * i for i in range(40)], "text column 'text' has no token with a vector"),
        ([""] * 40, "too few rows for the split"),
    ):
        raw = tmp_path / "raw.parquet"
        pq.write_table(pa.table({"text": texts, "label": ["a", "b"] * 20}), raw)
        before = snapshot(tmp_path)
        code = main([*argv, "--input", str(raw)])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 3, err
        assert err[-1].startswith(f"dpspark compare: error: {message}"), err[-1]
        assert snapshot(tmp_path) == before and not out.exists()
    assert "the same text always fall on the same side" in err[-1]
