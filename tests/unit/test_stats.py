from __future__ import annotations

import numpy as np
import pytest

from dpspark import mechanisms
from dpspark.config import StatsConfig
from dpspark.engine import nw_sw
from dpspark.errors import ConfigError, EmbeddingError
from dpspark.neighbours import ExactIndex
from dpspark.stats import Bounds, calibrate, plan, rows_of_words, sample_words, summarise

# runtime: numpy, pyarrow and Python differ across the Databricks runtimes (CONTRIBUTING.md)
pytestmark = pytest.mark.runtime


def specs(epsilons, lambdas):
    return StatsConfig.parse({"epsilons": epsilons, "lambdas": lambdas}).settings()


def test_per_word_counts_nw_and_sw():
    counts = {(0, 7, 7): 5, (0, 7, 3): 2, (0, 7, 9): 3, (0, 3, 9): 10}
    assert nw_sw.finish(counts) == {(0, 7): (5, 3, 10), (0, 3): (0, 1, 10)}


def test_summary_statistics():
    nw, sw = np.array([0, 10, 20, 30]), np.array([40, 30, 20, 10])
    s = summarise(nw, sw)
    assert s["nw_mean"] == 15 and s["nw_max"] == 30 and s["sw_min"] == 10
    assert s["nw_std"] == pytest.approx(np.std(nw, ddof=1))
    half = 1.959964 * np.std(nw, ddof=1) / 2
    assert s["nw_ci_low"] == pytest.approx(15 - half) and s["nw_ci_high"] == pytest.approx(15 + half)
    assert s["sw_p50"] == 25


def test_plan_covers_every_draw_once():
    items = plan(specs([1.0, 5.0], [0.0, 1.0]), np.arange(7), runs=10, words_per_item=3, runs_per_item=4)
    assert [it.item for it in items] == list(range(len(items)))
    total = {}
    for it in items:
        for w in it.rows:
            total[(it.setting, w)] = total.get((it.setting, w), 0) + it.runs
    assert set(total.values()) == {10} and len(total) == 2 * 2 * 7


@pytest.mark.parametrize(
    "kwargs", [{"epsilons": []}, {"lambdas": []}, {"epsilons": [0.0]}, {"lambdas": [1.5]}, {"mechanisms": ["x"]}]
)
def test_grids_refuse_bad_values(kwargs):
    with pytest.raises(ConfigError):
        StatsConfig.parse({"epsilons": [1.0], "lambdas": [0.0], **kwargs})


def test_plan_refuses_one_run_and_an_empty_grid():
    with pytest.raises(ConfigError):
        plan(specs([1.0], [0.0]), np.arange(3), runs=1)
    with pytest.raises(ConfigError):
        plan([], np.arange(3), runs=5)


def test_a_grid_mixes_mechanisms_with_their_own_axes():
    c = (
        StatsConfig.parse(
            {"mechanisms": "laplace,mahalanobis,tem", "epsilons": "1,5", "grid": "lambda=0.5,1 beta=0.01"}
        )
        if "tem" in mechanisms.REGISTRY
        else StatsConfig.parse({"mechanisms": "laplace,mahalanobis", "epsilons": "1,5", "grid": "lambda=0.5,1"})
    )
    labels = [s.label() for s in c.settings()]
    assert labels[:6] == [
        "laplace ε=1 lambda=0",
        "laplace ε=5 lambda=0",
        "mahalanobis ε=1 lambda=0.5",
        "mahalanobis ε=5 lambda=0.5",
        "mahalanobis ε=1 lambda=1",
        "mahalanobis ε=5 lambda=1",
    ]
    with pytest.raises(ConfigError, match="parameters of none"):
        StatsConfig.parse({"mechanisms": "laplace", "grid": "t=0.5"})
    # Without --mechanisms the grid is today's λ grid: λ = 0 is the Laplace mechanism.
    assert [s.name for s in specs([1.0], [0.0, 1.0])] == ["laplace", "mahalanobis"]


def test_sample_rule_is_public_and_stable():
    rows = np.arange(1000)
    a, b = sample_words(rows, 50, 0), sample_words(rows, 50, 0)
    np.testing.assert_array_equal(a, b)
    assert len(np.unique(a)) == 50 and (np.diff(a) > 0).all()


def test_word_list_with_unknown_words(glove):
    with pytest.raises(EmbeddingError, match="zqxwvkj"):
        rows_of_words(["the", "zqxwvkj"], glove.word_index, np.arange(1000))
    np.testing.assert_array_equal(rows_of_words(["of", "the"], glove.word_index, np.arange(1000)), [0, 3])


def test_nw_falls_as_noise_grows(glove):
    vocab = np.arange(2000)
    space = mechanisms.Space(glove.vectors, vocab, ExactIndex(glove.vectors[vocab]))
    settings = specs([2.0, 50.0], [1.0])
    items = plan(settings, np.arange(0, 2000, 100), runs=30)
    stats = nw_sw.finish(nw_sw.counts(items, bytes(16), [s.build(space) for s in settings]))
    small = np.mean([v[0] for k, v in stats.items() if settings[k[0]].epsilon == 2.0])
    large = np.mean([v[0] for k, v in stats.items() if settings[k[0]].epsilon == 50.0])
    assert small < 3 < 25 < large


def table_for(nw_by_eps):
    return {(e, lam): (np.array(nw), np.array([30 - x for x in nw]), 100) for (e, lam), nw in nw_by_eps.items()}


def test_calibrate_picks_largest_epsilon_per_lambda_and_best_lambda():
    t = table_for(
        {
            (1.0, 0.0): [10, 20],
            (5.0, 0.0): [40, 60],
            (10.0, 0.0): [70, 90],
            (1.0, 1.0): [5, 10],
            (5.0, 1.0): [20, 45],
            (10.0, 1.0): [50, 80],
        }
    )
    r = calibrate(t, Bounds(max_nw_fraction=0.5))
    assert [x["epsilon"] for x in r["per_setting"]] == [1.0, 5.0]
    assert r["best"] == {"setting": "mahalanobis λ=1", "mechanism": "mahalanobis", "lambda": 1.0, "epsilon": 5.0}
    # A percentile bound is looser than the worst case.
    assert calibrate(t, Bounds(max_nw_fraction=0.5, percentile=50))["best"]["epsilon"] == 5.0


def test_calibrate_reports_when_nothing_meets_the_bounds():
    r = calibrate(table_for({(1.0, 0.0): [90, 95]}), Bounds(max_nw_fraction=0.1))
    assert r["best"] is None and r["per_setting"][0]["epsilon"] is None


def test_bounds_validation():
    with pytest.raises(ConfigError):
        Bounds(max_nw_fraction=None, min_sw=None)
    with pytest.raises(ConfigError):
        Bounds(max_nw_fraction=1.5)


def test_joint_calibration_across_mechanisms_ranks_by_measured_risk():
    """Across mechanisms ε is not one scale: the lowest measured re-identification that meets the
    bounds wins; within the λ grid of the noise family the smallest ε still decides."""
    from dpspark.stats import joint_calibrate

    points = {
        (5.0, "laplace"): {"utility_loss": 0.01, "reidentification": 0.50},
        (8.0, "laplace"): {"utility_loss": 0.005, "reidentification": 0.70},
        (3.0, "tem β=0.001"): {"utility_loss": 0.02, "reidentification": 0.30},
        (1.0, "santext"): {"utility_loss": 0.20, "reidentification": 0.01},
    }
    result = joint_calibrate(points, max_utility_loss=0.05, max_reidentification=0.9)
    assert result["best"] == {"epsilon": 3.0, "lambda": None, "setting": "tem β=0.001", "mechanism": "tem"}
    assert {r["setting"] for r in result["rows"]} == {"laplace", "tem β=0.001", "santext"}
    noise = {k: v for k, v in points.items() if k[1] == "laplace"}
    noise[(5.0, "mahalanobis λ=1")] = {"utility_loss": 0.01, "reidentification": 0.60}
    assert joint_calibrate(noise, 0.05, 0.9)["best"]["setting"] == "laplace"  # smaller ε first, then lower risk


def test_when_nothing_meets_the_bounds_the_hint_points_where_a_feasible_epsilon_would_lie():
    """Larger ε only raises re-identification: the hint names the gap between the largest ε that is
    private enough and the smallest that is useful enough, or says to go lower, never "larger"."""
    from dpspark import report
    from dpspark.stats import joint_calibrate

    points = {
        (2.0, "laplace"): {"utility_loss": 0.20, "reidentification": 0.05},
        (5.0, "laplace"): {"utility_loss": 0.08, "reidentification": 0.15},
        (10.0, "laplace"): {"utility_loss": 0.01, "reidentification": 0.55},
        (1.0, "tem β=0.001"): {"utility_loss": 0.01, "reidentification": 0.40},
        (4.0, "tem β=0.001"): {"utility_loss": 0.00, "reidentification": 0.90},
        (1.0, "santext"): {"utility_loss": 0.30, "reidentification": 0.01},
        (3.0, "santext"): {"utility_loss": 0.25, "reidentification": 0.10},
    }
    result = joint_calibrate(points, max_utility_loss=0.02, max_reidentification=0.2)
    assert result["best"] is None
    text = report.frontier_md(result, "bounds")
    assert "laplace: re-identification meets its bound up to ε = 5, utility needs ε ≥ 10" in text
    assert "lies between 5 and 10" in text
    assert "tem β=0.001: every ε of the grid exceeds the re-identification bound" in text and "below 1" in text
    assert "santext: no ε of the grid keeps the utility loss within the bound, up to ε = 3" in text
    assert "add larger ε" not in text


def test_outputs_written_before_the_setting_column_name_their_settings_by_lambda():
    """One place reads the noise family's λ out of and into setting labels (``mechanisms.noise``): calibrate,
    the reports and the utility and risk tables of older outputs all go through it."""
    from dpspark.mechanisms import noise

    assert noise.series_of_lambda(0) == "laplace" and noise.series_of_lambda(0.5) == "mahalanobis λ=0.5"
    vickrey = mechanisms.parse({"name": "vickrey", "epsilon": 3, "lambda": 1, "t": 0.25}).series_label()
    assert noise.lambda_of_series(vickrey) == 1.0 and noise.lambda_of_series("laplace") == 0.0
    assert noise.lambda_of_series("mahalanobis λ=0.25") == 0.25 and noise.lambda_of_series("tem β=0.001") is None
    assert noise.series_of_row({"lambda": 1.0}) == "mahalanobis λ=1"
    assert noise.series_of_row({"setting": "tem β=0.001", "lambda": None}) == "tem β=0.001"


def test_a_settings_label_orders_its_axes_as_the_tables_columns():
    """A spec's label (``MechanismSpec.series_label``) orders its own axes by ``labels.axis_order``, with no
    registry at hand (the mechanisms import no report); a table row's label (``report.series_of``) orders them
    by the tables' columns, every registered mechanism's axes together (``report.axis_names``). For each
    registered mechanism the two orders agree, so a setting reads the same from its spec and from its row."""
    from dpspark import report
    from dpspark.mechanisms import labels

    for name, spec in mechanisms.REGISTRY.items():
        own = spec.axis_names()
        assert labels.axis_order(own) == [a for a in report.axis_names() if a in own], name
    vickrey = mechanisms.parse({"name": "vickrey", "epsilon": 3, "lambda": 1, "t": 0.25})
    assert vickrey.series_label() == "vickrey λ=1 t=0.25" == report.series_label("vickrey", {"lambda": 1, "t": 0.25})
    assert mechanisms.parse({"name": "laplace", "epsilon": 3}).series_label() == "laplace"
    assert report.series_label("laplace", {"lambda": 0.0}) == "laplace"  # the Laplace mechanism's own label_of
