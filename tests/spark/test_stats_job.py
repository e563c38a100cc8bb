"""The privacy-stats and calibrate commands on a real local[2] session."""

from __future__ import annotations

import json
import logging

import numpy as np
import pyarrow.parquet as pq
import pytest

from dpspark import mechanisms, report
from dpspark.cli import main
from dpspark.config import StatsConfig
from dpspark.engine import nw_sw
from dpspark.prepare import prepare_grid
from dpspark.rng import SeededRunWarning, new_job_key
from dpspark.spark import resources
from dpspark.spark.backend import dataframe_per_word, spark_per_word
from dpspark.stats import plan, sample_words

pytestmark = pytest.mark.spark

SMALL = ["--vocab-size", "2000", "--words", "40", "--runs", "20"]


def stats_cli(out, *extra):
    with pytest.warns(SeededRunWarning):
        return main(["privacy-stats", "--output", str(out), "--seed", "11", *SMALL, *extra])


@pytest.mark.runtime
def test_spark_equals_plain_numpy_for_every_mechanism(spark, glove, tmp_path):
    """One grid of every registered mechanism: the executors' counts equal the plain numpy ones for
    the same key, on the reduceByKey path and on the DataFrame (Spark Connect) path."""
    # Truncated Gumbel refuses ε below (5 + 2 ln V)/Δ0 (46.7 on these 300 words): its own ε, in the same grid.
    others = [n for n in mechanisms.REGISTRY if n != "truncated-gumbel"]
    config = StatsConfig.parse({"mechanisms": others, "epsilons": "3,20", "grid": "lambda=0,1", "vocab_size": 300})
    specs = config.settings() + [mechanisms.parse({"name": "truncated-gumbel", "epsilon": e}) for e in (60.0, 90.0)]
    grid = prepare_grid(config, specs, tmp_path / "w")
    items = plan(grid.specs, sample_words(grid.vocab_rows, 25), runs=12, words_per_item=7, runs_per_item=5)
    with pytest.warns(SeededRunWarning):
        key = new_job_key(5)
    expected = nw_sw.finish(nw_sw.counts(items, key, grid.mechanisms()))
    shipment = resources.ship(spark, grid.write_bundle)
    got = spark_per_word(spark, items, key, shipment.name)
    twin = dataframe_per_word(spark, items, key, shipment.name)  # the Spark Connect path, here on classic
    shipment.close()
    assert got == expected and twin == expected
    assert {grid.specs[s].name for s, _ in got} == set(mechanisms.REGISTRY)
    assert all(v[2] == 12 for v in got.values()) and len(got) == len(grid.specs) * 25


@pytest.mark.runtime
@pytest.mark.xdist_group("connect")
def test_privacy_stats_of_every_mechanism_end_to_end(classic, stats_every_mechanism):
    """The command over every mechanism's grid (the run tests/connect compares its own with): a row per
    setting and word, every draw counted, the exact figures where the manifest says a closed form exists."""
    out = classic(stats_every_mechanism)
    names = [n for n in mechanisms.REGISTRY if n != "truncated-gumbel"]
    t = pq.read_table(out / "per_word.parquet").to_pylist()
    m = json.loads((out / "_dpspark_manifest.json").read_text())
    assert m["status"] == "succeeded" and m["mechanisms"] == names and m["draws"] == 2 * len(names) * 30 * 12
    assert len(t) == 2 * len(names) * 30 and {r["mechanism"] for r in t} == set(names)
    assert all(r["runs"] == 12 and 0 <= r["nw"] <= 12 and 1 <= r["sw"] <= 12 for r in t)
    exact = set(m["exact_statistics"])
    assert {"tem", "santext"} <= exact
    assert all((r["exact_nw"] is not None) == (r["mechanism"] in exact) for r in t)


def test_privacy_stats_outputs(spark, tmp_path, caplog):
    out = tmp_path / "s"
    with caplog.at_level(logging.INFO, logger="dpspark.progress"):
        assert stats_cli(out, "--epsilons", "2,10,40", "--lambdas", "0,1") == 0
    # The last progress line counts every grid point; the Spark job carries the step's name.
    progress = [r.getMessage() for r in caplog.records if r.name == "dpspark.progress"]
    assert progress[-1].startswith("privacy-stats: 6/6 grid points done, 0 left (took ")
    assert spark.sparkContext.getLocalProperty("spark.job.description").startswith("dpspark privacy-stats: ")
    for f in (
        "per_word.parquet",
        "summary.csv",
        "summary.md",
        "percentiles.png",
        "histograms.png",
        "_dpspark_manifest.json",
    ):
        assert (out / f).is_file(), f
    t = pq.read_table(out / "per_word.parquet")
    assert t.column_names == [
        "mechanism",
        "epsilon",
        *report.axis_names(),
        "word",
        "rank",
        "nw",
        "sw",
        "runs",
        "exact_nw",
        "exact_sw",
    ]
    assert report.axis_names()[0] == "lambda"  # today's column kept, first of the mechanisms' axes
    assert t.num_rows == 3 * 2 * 40
    nw = np.asarray(t.column("nw"))
    sw = np.asarray(t.column("sw"))
    assert ((0 <= nw) & (nw <= 20)).all() and ((1 <= sw) & (sw <= 20)).all()
    m = json.loads((out / "_dpspark_manifest.json").read_text())
    assert m["draws"] == 3 * 2 * 40 * 20 and "default_rng(0)" in m["word_rule"]
    # The seed itself is never written: only that the run was seeded.
    assert m["seeded"] is True and not [k for k in m if "seed" in k and k != "seeded"]
    md = (out / "summary.md").read_text()
    assert "| setting \\ ε | 2 | 10 | 40 |" in md and "| mahalanobis λ=1 |" in md and "| laplace |" in md


def test_privacy_stats_mixes_mechanisms_with_exact_figures(spark, tmp_path):
    """--mechanisms over the whole family: one table and plot with a row per setting, the exact E[Nw]
    and E[Sw] where a closed form exists, and the Monte Carlo agreeing with them."""
    out = tmp_path / "s"
    grid = ["--grid", "lambda=1", "t=0.5"]
    assert stats_cli(out, "--mechanisms", "laplace,mahalanobis,vickrey,tem,santext", "--epsilons", "3,10", *grid) == 0
    t = pq.read_table(out / "per_word.parquet").to_pylist()
    assert {r["mechanism"] for r in t} == {"laplace", "mahalanobis", "vickrey", "tem", "santext"}
    for r in t:
        has_closed_form = r["mechanism"] in ("tem", "santext")
        assert (r["exact_nw"] is not None) == has_closed_form and (r["lambda"] is not None) == (not has_closed_form)
    for name in ("tem", "santext"):
        for e in (3.0, 10.0):
            rows = [r for r in t if r["mechanism"] == name and r["epsilon"] == e]
            nw = np.array([r["nw"] for r in rows], float)
            exact = np.array([r["exact_nw"] for r in rows])
            # Per word Nw ~ Binomial(K, p): the mean over words within 4 standard errors of the exact mean.
            se = np.sqrt((exact * (1 - exact / 20)).sum()) / len(rows)
            assert abs(nw.mean() - exact.mean()) <= 4 * se + 1e-9, (name, e)
    m = json.loads((out / "_dpspark_manifest.json").read_text())
    assert m["mechanisms"] == ["laplace", "mahalanobis", "vickrey", "tem", "santext"]
    assert m["exact_statistics"] == ["santext", "tem"] and len(m["settings"]) == 10
    assert all(s["guarantee_type"] == "metric" and s["paper"] for s in m["settings"])
    md = (out / "summary.md").read_text()
    assert "| tem β=0.001 |" in md and "| vickrey λ=1 t=0.5 |" in md and "Exact E[Nw]" in md


@pytest.mark.statistical
def test_calibrated_epsilon_holds_in_a_fresh_run(spark, tmp_path):
    out = tmp_path / "s"
    assert stats_cli(out, "--epsilons", "1,3,6,10,20,40", "--lambdas", "0,1") == 0
    # Median bound: robust to the resampling of a fresh run.
    assert main(["calibrate", "--stats", str(out), "--max-nw-fraction", "0.5", "--percentile", "50"]) == 0
    result = json.loads((out / "calibration.json").read_text())
    best = result["best"]
    assert best is not None and (out / "calibration.md").is_file()
    fresh = tmp_path / "fresh"
    with pytest.warns(SeededRunWarning):
        assert (
            main(
                [
                    "privacy-stats",
                    "--output",
                    str(fresh),
                    "--seed",
                    "999",
                    "--vocab-size",
                    "2000",
                    "--words",
                    "40",
                    "--runs",
                    "20",
                    "--epsilons",
                    str(best["epsilon"]),
                    "--lambdas",
                    str(best["lambda"]),
                ]
            )
            == 0
        )
    nw = np.asarray(pq.read_table(fresh / "per_word.parquet").column("nw"))
    assert np.percentile(nw, 50) <= 0.5 * 20


def test_calibrate_says_when_no_epsilon_meets_the_bounds(spark, tmp_path, capsys):
    out = tmp_path / "s"
    assert stats_cli(out, "--epsilons", "40", "--lambdas", "0") == 0
    assert main(["calibrate", "--stats", str(out), "--max-nw-fraction", "0.01"]) == 6
    assert "no ε in range meets these bounds" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args,code,message",
    [
        (["--epsilons", ""], 2, "grid is empty"),
        (["--lambdas", ""], 2, "grid is empty"),
        (["--runs", "1"], 2, "at least 2"),
        (["--epsilons", "0,5"], 2, "positive"),
        (["--lambdas", "0,1.5"], 2, "[0, 1]"),
    ],
)
def test_bad_input(spark, tmp_path, capsys, args, code, message):
    out = tmp_path / "s"
    assert main(["privacy-stats", "--output", str(out), "--vocab-size", "2000", "--words", "10", *args]) == code
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_unknown_words_and_existing_output(spark, tmp_path, capsys):
    words = tmp_path / "w.txt"
    words.write_text("the\nzqxwvkj\n")
    out = tmp_path / "s"
    assert main(["privacy-stats", "--output", str(out), "--word-list", str(words), "--vocab-size", "2000"]) == 4
    assert "zqxwvkj" in capsys.readouterr().err and not out.exists()
    out.mkdir()
    (out / "keep").write_text("x")
    assert main(["privacy-stats", "--output", str(out), "--vocab-size", "2000"]) == 5
    assert "already exists" in capsys.readouterr().err and [p.name for p in out.iterdir()] == ["keep"]
