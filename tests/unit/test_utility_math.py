"""The pure parts of issue 10: utility metrics and intervals, the re-identification attack, joint calibration."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from dpspark import risk, utility
from dpspark.embeddings import load_default, select_vocabulary
from dpspark.engine import nw_sw
from dpspark.errors import ConfigError
from dpspark.mechanisms import Space, parse
from dpspark.neighbours import ExactIndex
from dpspark.stats import joint_calibrate, plan

# runtime: numpy, pyarrow and Python differ across the Databricks runtimes (CONTRIBUTING.md)
pytestmark = pytest.mark.runtime


def test_t_interval_matches_scipy():
    for r in (2, 3, 5, 12, 40):
        assert utility.t_quantile(r - 1) == pytest.approx(sps.t.ppf(0.975, r - 1), rel=2e-3)
    x = [0.91, 0.93, 0.96]
    mean, low, high = utility.mean_ci(x)
    lo, hi = sps.t.interval(0.95, 2, loc=np.mean(x), scale=sps.sem(x))
    assert (mean, low, high) == pytest.approx((np.mean(x), lo, hi), rel=1e-4)
    assert utility.mean_ci([0.5]) == (0.5, 0.5, 0.5)


def test_metrics_against_counted_pairs():
    rng = np.random.default_rng(3)
    y = rng.integers(0, 2, 300)
    score = np.where(y == 1, rng.normal(1, 1, 300), rng.normal(0, 1, 300)).round(1)  # ties on purpose
    pos, neg = score[y == 1], score[y == 0]
    pairs = (pos[:, None] > neg[None, :]).mean() + 0.5 * (pos[:, None] == neg[None, :]).mean()
    assert utility.auc(y, score) == pytest.approx(pairs)
    pred = (score > 0.5).astype(int)
    m = utility.classification_metrics(y, pred, score, 2)
    tp, fp, fn = ((pred == 1) & (y == 1)).sum(), ((pred == 1) & (y == 0)).sum(), ((pred == 0) & (y == 1)).sum()
    assert m["precision"] == pytest.approx(tp / (tp + fp)) and m["recall"] == pytest.approx(tp / (tp + fn))
    assert m["f1"] == pytest.approx(2 * tp / (2 * tp + fp + fn))
    assert m["accuracy"] == pytest.approx((pred == y).mean())
    y3 = np.array([0, 1, 2, 2, 1, 0])
    m3 = utility.classification_metrics(y3, np.array([0, 2, 2, 2, 1, 1]), None, 3)
    assert set(m3) == {"accuracy", "macro_f1"}
    assert m3["macro_f1"] == pytest.approx(np.mean([2 / 3, 1 / 2, 0.8]))


def test_summary_of_rows_without_a_setting_reads_them_as_the_noise_family():
    # Results written before the mechanism and setting columns: λ = 0 is laplace, λ > 0 mahalanobis.
    rows = [{"mode": "baseline", "epsilon": None, "lambda": None, "repeat": 0, "accuracy": 0.98}]
    for e in (1.0, 10.0):
        for lam in (0.0, 1.0):
            for r, v in enumerate((0.80, 0.82, 0.84)):
                rows.append({"mode": "train-time", "epsilon": e, "lambda": lam, "repeat": r, "accuracy": v + e / 100})
    summary = utility.summarise(rows, ["accuracy"])
    assert [(s["setting"], s["epsilon"]) for s in summary if s["mode"] == "train-time"] == [
        ("laplace", 1.0),
        ("laplace", 10.0),
        ("mahalanobis λ=1", 1.0),
        ("mahalanobis λ=1", 10.0),
    ]
    md = utility.summary_md(summary, ["accuracy"], "t")
    assert "| setting \\ ε | 1 | 10 |" in md and "| mahalanobis λ=1 | 0.8300 (" in md and "baseline 0.9800" in md
    assert "same guarantee type (metric" in md
    # Rows without a setting column are the noise family's: λ = 0 is laplace.
    loss = utility.utility_loss_by_setting(summary, "accuracy")
    assert loss[(10.0, "laplace")] == pytest.approx(0.98 - 0.92)
    assert set(loss) == {(e, s) for e in (1.0, 10.0) for s in ("laplace", "mahalanobis λ=1")}
    # λ = 1 equals λ = 0 here: every interval overlaps.
    assert "- train-time, mahalanobis λ=1: none: every interval overlaps" in md


def _row(mode, mechanism, setting, e, r, accuracy, **axes):  # noqa: ANN001, ANN003, ANN202
    blank = dict.fromkeys(("lambda", "beta", "gamma", "t"))
    return {"mode": mode, "mechanism": mechanism, "setting": setting, "epsilon": e, **blank, **axes} | {
        "repeat": r,
        "accuracy": accuracy,
    }


def test_summary_has_a_row_per_setting_and_the_noise_family_keeps_its_lambda_key():
    rows = [_row("baseline", None, None, None, 0, 0.98)]
    for e in (1.0, 5.0):
        for r, v in enumerate((0.70, 0.72)):
            rows.append(_row("test-time", "laplace", "laplace", e, r, v + e / 100, **{"lambda": 0.0}))
            rows.append(_row("test-time", "vickrey", "vickrey λ=0 t=0.5", e, r, v + e / 100, t=0.5, **{"lambda": 0.0}))
            rows.append(_row("test-time", "tem", "tem β=0.001", e, r, v - 0.3, beta=0.001))
            rows.append(_row("test-time", "santext", "santext", e, r, v + 0.01 * r))
    summary = utility.summarise(rows, ["accuracy"])
    assert [s["setting"] for s in summary if s["mode"] == "test-time"] == [
        x for x in ("laplace", "vickrey λ=0 t=0.5", "tem β=0.001", "santext") for _ in (1.0, 5.0)
    ]
    tem = [s for s in summary if s["setting"] == "tem β=0.001"]
    assert {s["mechanism"] for s in tem} == {"tem"} and {s["beta"] for s in tem} == {0.001}
    assert {s["lambda"] for s in tem} == {None}
    md = utility.summary_md(summary, ["accuracy"], "t")
    table = md.split("| setting \\ ε | 1 | 5 |", 1)[1].split("\n\n", 1)[0]
    assert [line.split(" | ")[0] for line in table.strip().splitlines()[1:]] == [
        "| laplace",
        "| vickrey λ=0 t=0.5",
        "| tem β=0.001",
        "| santext",
    ]
    assert "guarantee type" in md
    # Each setting against laplace at the same ε: tem is far below it, vickrey equal to it.
    assert "- test-time, tem β=0.001: accuracy at ε = 1 (0.4100 vs 0.7200)" in md
    assert "- test-time, vickrey λ=0 t=0.5: none: every interval overlaps" in md
    # One loss per (ε, setting): vickrey's λ = 0 is its own setting, not laplace's point.
    by_setting = utility.utility_loss_by_setting(summary, "accuracy")
    assert len(by_setting) == 8 and by_setting[(5.0, "tem β=0.001")] == pytest.approx(0.98 - 0.41)
    assert by_setting[(1.0, "laplace")] == pytest.approx(0.98 - 0.72)
    assert by_setting[(1.0, "vickrey λ=0 t=0.5")] == pytest.approx(0.98 - 0.72)


def test_one_perturbation_per_setting_shows_means_and_compares_no_interval():
    rows = [_row("baseline", None, None, None, 0, 0.98)]
    rows.append(_row("train-time", "laplace", "laplace", 3.0, 0, 0.86, **{"lambda": 0.0}))
    rows.append(_row("train-time", "santext", "santext", 3.0, 0, 0.97))
    md = utility.summary_md(utility.summarise(rows, ["accuracy"]), ["accuracy"], "t")
    assert "R = 1 perturbation (no interval)" in md and "| santext | 0.9700 |" in md
    assert "- no interval to compare with R = 1 perturbation per setting" in md and "santext: " not in md


def test_against_laplace_names_the_separated_intervals_and_clips_them():
    rows = [{"mode": "baseline", "epsilon": None, "lambda": None, "repeat": 0, "accuracy": 0.98}]
    for lam, values in ((0.0, (0.90, 0.91, 0.92)), (1.0, (0.80, 0.81, 0.82))):
        rows += [
            {"mode": "test-time", "epsilon": 5.0, "lambda": lam, "repeat": r, "accuracy": v}
            for r, v in enumerate(values)
        ]
    rows += [
        {"mode": "test-time", "epsilon": 9.0, "lambda": 1.0, "repeat": r, "accuracy": v}
        for r, v in enumerate((0.5, 1, 1))
    ]
    summary = utility.summarise(rows, ["accuracy"])
    assert max(s["accuracy_high"] for s in summary) == 1.0 and min(s["accuracy_low"] for s in summary) >= 0.0
    md = utility.summary_md(summary, ["accuracy"], "t")
    assert "- test-time, mahalanobis λ=1: accuracy at ε = 5 (0.8100 vs 0.9100)" in md
    # Without laplace in the grid there is nothing to compare with.
    only = [s for s in summary if s["lambda"] != 0.0]
    assert "against Laplace" not in utility.summary_md(only, ["accuracy"], "t")


def test_reidentification_by_hand():
    # Two words; "b" (prior 3) also turns into "a" half the time. Fitted: u=a → b (3·2 > 1·4? no: 1·4 vs 3·2).
    a, b = 0, 1
    fit = {(0, a, a): 4, (0, b, a): 2, (0, b, b): 2}
    score = {(0, a, a): 3, (0, a, b): 1, (0, b, a): 2, (0, b, b): 2}
    prior = {a: 1.0, b: 3.0}
    assert risk.guesses(fit, prior) == {(0, a): [b, a], (0, b): [b]}
    r = risk.reidentification(fit, score, prior, {a})[0]
    # a's tokens (weight 1): outputs a (3/4) guessed b, b (1/4) guessed b → top1 0; b's (weight 3): a→b ✓, b→b ✓.
    assert r["top1"] == pytest.approx(3 / 4)
    assert r["top5"] == pytest.approx((1 * 3 / 4 + 3) / 4)
    assert r["unchanged"] == pytest.approx((3 / 4 + 3 * 1 / 2) / 4)
    # The Bayes guess never names a (sensitive): the identity guess does better there, and is reported.
    assert r["sensitive_bayes_top1"] == 0.0 and r["sensitive_unchanged"] == pytest.approx(3 / 4)
    assert r["sensitive_top1"] == pytest.approx(3 / 4) and r["sensitive_attacker"] == "identity"
    assert r["attacker"] == "bayes"
    assert r["nw_mean"] == pytest.approx(((4 + 3) + (2 + 2)) / 2)


@pytest.fixture(scope="module")
def small_world():
    emb = load_default()
    vocab = select_vocabulary(emb, 2000)
    words = np.array(sorted(emb.word_index[w] for w in "the of and to in a for is on that by with".split()))
    prior = {int(w): float(50 - 3 * i) for i, w in enumerate(words)}
    return emb, vocab, words, prior, ExactIndex(emb.vectors[vocab])


def _mechs(emb, vocab, index):
    return [parse({"name": "mahalanobis", "epsilon": 3.0, "lambda": 1.0}).build(Space(emb.vectors, vocab, index))]


def _halves(items, key, mechs):
    fit = nw_sw.counts([it for it in items if it.block == risk.FIT_HALF], key, mechs)
    score = nw_sw.counts([it for it in items if it.block == risk.SCORE_HALF], key, mechs)
    return fit, score


def test_held_out_half_is_not_optimistic_and_a_leak_is(small_world):
    """The held-out estimate agrees with scoring the same fitted attack on many fresh runs; scoring
    on the fitted half (the leak) overstates the attacker by far at this ε."""
    emb, vocab, words, prior, index = small_world
    mechs = _mechs(emb, vocab, index)
    items = plan([m.spec for m in mechs], words, 8, 50, 4)  # K = 8: 4 runs fit, 4 score
    assert {it.block for it in items} == {0, 1}
    fit, score = _halves(items, b"\x01" * 16, mechs)
    held_out = risk.reidentification(fit, score, prior)[0]["top1"]
    leaked = risk.reidentification(fit, fit, prior)[0]["top1"]
    fresh_items = plan([m.spec for m in mechs], words, 400, 50, 400)
    fresh = nw_sw.counts(fresh_items, b"\x02" * 16, mechs)
    reference = risk.reidentification(fit, fresh, prior)[0]["top1"]
    assert abs(held_out - reference) < 0.1
    assert leaked > reference + 0.15


def test_joint_calibration_picks_the_most_private_point_meeting_the_bounds():
    points = {
        (1.0, 0.0): {"utility_loss": 0.20, "reidentification": 0.05},
        (5.0, 0.0): {"utility_loss": 0.019, "reidentification": 0.30},
        (5.0, 1.0): {"utility_loss": 0.018, "reidentification": 0.22},
        (10.0, 1.0): {"utility_loss": 0.005, "reidentification": 0.6},
    }
    result = joint_calibrate(points, 0.02, None)
    best = {"epsilon": 5.0, "lambda": 1.0, "setting": "mahalanobis λ=1", "mechanism": "mahalanobis"}
    assert result["best"] == best  # equal ε: the lower re-identification
    assert joint_calibrate(points, 0.02, 0.25)["best"] == {
        "epsilon": 5.0,
        "lambda": 1.0,
        "setting": "mahalanobis λ=1",
        "mechanism": "mahalanobis",
    }
    assert joint_calibrate(points, 0.02, 0.1)["best"] is None
    front = {(r["epsilon"], r["lambda"]) for r in result["rows"] if r["frontier"]}
    assert front == {(1.0, 0.0), (5.0, 1.0), (10.0, 1.0)}  # (5, 0) is beaten by (5, 1) on both axes
    with pytest.raises(ConfigError, match="at least one joint bound"):
        joint_calibrate(points, None, None)
    assert not math.isnan(result["rows"][0]["utility_loss"])
