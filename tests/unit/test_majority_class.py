"""Utility a reader can trust (issue 39, defect 12): every utility table states the test split's
majority-class rate, marks an accuracy that does not beat it, and compare recommends nothing when
no setting (or not even the baseline) beats it."""

from __future__ import annotations

import pytest
from scipy.stats import binomtest

from dpspark import utility
from dpspark.evaluation.compare_analysis import Analysis
from dpspark.mechanisms import parse

HAM = 133 / 151  # SMS spam's shape: 88.1% of a 151-row test split is "ham"


@pytest.mark.parametrize("k, n", [(132, 150), (5, 9), (0, 20), (20, 20)])
def test_the_wilson_lower_end_is_scipys(k, n):
    want = binomtest(k, n).proportion_ci(method="wilson").low
    assert utility.wilson_low(k / n, n) == pytest.approx(want, abs=1e-8)


def result(mode, e, acc, repeat=0):
    setting = None if mode == utility.BASELINE else "laplace"
    return {
        "mode": mode, "mechanism": setting, "setting": setting, "epsilon": e, "repeat": repeat,
        "accuracy": acc, "macro_f1": 0.47, "majority_rate": HAM, "majority_class": 0, "test_rows": 151,
    }  # fmt: skip


def test_an_accuracy_at_the_majority_rate_is_marked_and_said_to_tell_nothing():
    rows = [result(utility.BASELINE, None, 0.97)]
    rows += [result("train-time", e, HAM, r) for e in (2.0, 8.0) for r in range(2)]
    summary = utility.summarise(rows, ("accuracy", "macro_f1"))
    assert utility.baseline_of(summary)["beats_majority"] is True
    assert [s["beats_majority"] for s in summary if s["mode"] != utility.BASELINE] == [False, False]
    md = utility.summary_md(summary, ("accuracy", "macro_f1"), "Utility", n_classes=2, majority_label="ham")
    assert "Majority class of the test split ('ham'): 88.1% of its 151 rows" in md
    assert "**No setting beats the majority class**" in md
    assert f"| laplace | {HAM:.4f} (" in md and md.count(f" {utility.NOT_ABOVE} |") == 2  # both ε marked
    # a model 3 points above the rate on 151 rows is within the split's own noise: not beating it
    assert not utility.beats_majority(HAM + 0.03, HAM + 0.03, HAM, 151)
    assert utility.beats_majority(0.97, 0.97, HAM, 151)


def point(e, top1, acc, beats):
    spec = parse({"name": "laplace", "epsilon": e})
    p = {"spec": spec, "mechanism": "laplace", "setting": "laplace", "epsilon": e, "top1": top1, "top1_hi": top1}
    for mode in utility.MODES:
        p.update({f"{mode}_accuracy": acc, f"{mode}_accuracy_lo": acc, f"{mode}_beats_majority": beats})
    p["beats_majority"] = beats
    return p


def config(**bounds):
    from types import SimpleNamespace

    values = dict(target_reidentification=0.1, max_reidentification=None, max_utility_loss=None)
    return SimpleNamespace(utility_metric="accuracy", **{**values, **bounds})


BASELINE = {"accuracy": 0.97, "majority_rate": HAM, "majority_label": "ham", "test_rows": 151, "beats_majority": True}


def test_compare_recommends_nothing_when_no_setting_beats_the_majority_class():
    points = [point(2.0, 0.02, HAM, False), point(8.0, 0.3, HAM, False)]
    chosen, why = Analysis(points, config(), BASELINE).recommend()
    assert chosen is None
    assert "no setting beats the majority class (88.1% of the test split is 'ham'" in why
    assert "the classifier learned nothing on this data" in why and "Recommended" not in why
    # the baseline itself at the rate: nothing to recommend either, whatever the settings
    lost = {**BASELINE, "accuracy": HAM, "beats_majority": False}
    chosen, why = Analysis([point(2.0, 0.02, 0.95, True)], config(), lost).recommend()
    assert chosen is None and "the non-private baseline does not beat the majority class" in why


def test_a_private_setting_that_does_not_beat_the_majority_class_is_not_recommended():
    learner, prior = point(4.0, 0.05, 0.95, True), point(2.0, 0.02, HAM, False)
    chosen, why = Analysis([prior, learner], config(max_utility_loss=0.2), BASELINE).recommend()
    assert chosen is learner  # prior is more private and meets the loss bound, but learned nothing
    chosen, why = Analysis([prior, point(8.0, 0.5, 0.95, True)], config(), BASELINE).recommend()
    assert chosen is None and "1 setting meeting them does not beat the majority class" in why


def test_bounds_nothing_meets_say_where_to_look_and_that_utility_learned_nothing():
    # no setting meets the re-identification target, and none learned anything: both are said, the
    # feasible region first (more private settings would be needed whatever the classifier learns)
    points = [point(2.0, 0.3, HAM, False), point(8.0, 0.5, HAM, False)]
    chosen, why = Analysis(points, config(), BASELINE).recommend()
    assert chosen is None
    assert "**No setting of the grid meets them.**" in why
    assert why.index("No setting of the grid") < why.index("no setting beats the majority class")
