"""compare on 500 SMS spam rows, where the classifier trained or tested on heavily perturbed text predicts
"ham" for every row (issue 39, defect 12): the report shows the test split's majority-class rate and macro
F1 beside accuracy, marks every setting as not beating the majority class, and recommends nothing."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from dpspark import local
from dpspark.config import CompareConfig
from dpspark.evaluation.datasets import sms_spam_table
from dpspark.rng import SeededRunWarning

pytestmark = [pytest.mark.slow, pytest.mark.heavy]  # on the local engine: the same tables as Spark's


def test_compare_recommends_nothing_when_no_setting_beats_the_majority_class(tmp_path):
    data = tmp_path / "sms500.parquet"
    pq.write_table(sms_spam_table(500), data)
    values = {"input": str(data), "text_column": "text", "label_column": "label", "output": str(tmp_path / "out")}
    # one setting at ε = 1 (word salad), every re-identification bound met: the old report recommended it
    values.update(mechanisms="laplace", epsilons="1", vocab_size=2000, repeats=1, runs=4, refine=0)
    values.update(mldp_words=5, mldp_trials=10, examples=1, max_reidentification=1.0, seed=5, engine="local")
    with pytest.warns(SeededRunWarning):
        m = local.compare(CompareConfig.parse(values))
    out = tmp_path / "out"
    base = m["baseline"]
    assert base["majority_label"] == "ham" and 0.5 < base["majority_rate"] < 1
    (row,) = pq.read_table(out / "compare.parquet").to_pylist()
    assert row["majority_rate"] == base["majority_rate"] and row["beats_majority"] is False
    assert 0 <= row["train-time_macro_f1"] <= 1 and 0 <= row["test-time_macro_f1"] <= 1
    assert m["recommended"] is None
    assert json.loads((out / "_dpspark_manifest.json").read_text())["recommended"] is None
    report = (out / "report.md").read_text(encoding="utf-8")
    rate = f"{100 * base['majority_rate']:.1f}%"
    assert f"Majority class of the test split ('ham'): {rate} of its {base['test_rows']} rows" in report
    assert "| setting | ε | accuracy train-time | accuracy test-time | macro F1 train-time | macro F1 test-time |" in (
        report
    )
    assert f"| majority class, always predicted ('ham') | – | {rate[:-1]} | {rate[:-1]} |" in report
    assert f"no setting beats the majority class ({rate} of the test split is 'ham'" in report
    assert "Recommended:" not in report and "**no** (" in report
