"""privacy-risk over a grid of mechanisms on a real local[2] session: a row per setting, exact
likelihoods where the mechanism has a closed form, the Monte Carlo attacker beside them."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest

from dpspark import risk
from dpspark.config import RiskConfig
from dpspark.evaluation.datasets import sms_spam
from dpspark.prepare import prepare_grid
from dpspark.rng import SeededRunWarning
from dpspark.spark import resources
from dpspark.spark.risk import attack, pair_counts, run_privacy_risk
from dpspark.stats import compute_counts, plan

pytestmark = pytest.mark.spark


def test_attack_on_spark_equals_the_reference_for_every_setting(spark, glove, tmp_path):
    config = RiskConfig.parse(
        {"text_column": "t", "output": "o", "mechanisms": "laplace,vickrey,tem", "epsilons": "5,10", "vocab_size": 2000}
    )
    grid = prepare_grid(config, config.settings(), tmp_path / "w")
    words = "the a of to and going london money free call win prize uk nokia text".split()
    prior = {glove.word_index[w]: float(100 - 5 * i) for i, w in enumerate(words)}
    sensitive = {glove.word_index["london"], glove.word_index["nokia"]}
    ship = resources.ship(spark, grid.write_bundle)
    items = plan(grid.specs, np.array(sorted(prior)), 20, 5, 10)
    counts = pair_counts(spark, items, b"k" * 16, ship.name).cache()
    prior_df = spark.createDataFrame(
        [(w, f, w in sensitive) for w, f in prior.items()], "word long, f double, sensitive boolean"
    )
    on_spark = attack(counts, prior_df)
    counts.unpersist()
    ship.close()
    mechs = grid.mechanisms()
    fit = compute_counts([it for it in items if it.block == risk.FIT_HALF], b"k" * 16, mechs)
    score = compute_counts([it for it in items if it.block == risk.SCORE_HALF], b"k" * 16, mechs)
    reference = risk.reidentification(fit, score, prior, sensitive)
    assert on_spark.keys() == reference.keys() == set(range(len(grid.specs)))
    for key in reference:
        assert on_spark[key] == pytest.approx(reference[key], nan_ok=True), key


def test_privacy_risk_mixes_mechanisms_with_exact_likelihoods(spark, tmp_path):
    data = sms_spam(tmp_path / "sms", rows=300)
    values = {"input": data, "text_column": "text", "output": str(tmp_path / "r"), "vocab_size": 2000}
    grid = {"mechanisms": "laplace,tem,santext", "epsilons": "3,10", "runs": 20, "seed": 3, "max_words": 150}
    with pytest.warns(SeededRunWarning):
        m = run_privacy_risk(RiskConfig.parse({**values, **grid}), spark)
    rows = m["results"]
    assert [(r["mechanism"], r["epsilon"]) for r in rows] == [
        (name, e) for name in ("laplace", "tem", "santext") for e in (3.0, 10.0)
    ]
    for r in rows:
        exact = r["mechanism"] in ("tem", "santext")
        assert r["likelihood"].startswith("exact") == exact
        assert (r["estimated_top1"] is not None) == exact
        if exact:
            # The attacker fitted on K/2 = 10 runs is weaker than the one with exact likelihoods; both
            # see the same unchanged share up to sampling error.
            assert r["estimated_top1"] <= r["top1"] + 0.05
            assert r["estimated_unchanged"] == pytest.approx(r["unchanged"], abs=0.05)
    table = pq.read_table(tmp_path / "r" / "risk.parquet")
    assert {"mechanism", "setting", "epsilon", "lambda", "likelihood", "top1"} <= set(table.column_names)
    md = (tmp_path / "r" / "summary.md").read_text()
    assert "| tem β=0.001 |" in md and "| laplace |" in md and "| santext |" in md
    assert m["mechanisms"] == ["laplace", "tem", "santext"] and len(m["settings"]) == 6
