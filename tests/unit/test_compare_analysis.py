"""compare's analysis without a JVM (``dpspark.evaluation.compare_analysis``): where the refinement
rounds aim, and the recommendation, on points made here."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from dpspark.evaluation.compare_analysis import Analysis
from dpspark.mechanisms import parse

BASELINE = {"accuracy": 0.95}


def settings(**bounds):
    values = {
        "target_reidentification": 0.10,
        "target_nw_fraction": 0.20,
        "utility_metric": "accuracy",
        "max_reidentification": None,
        "max_utility_loss": None,
        "solve_tolerance": 0.01,
        "solve_rounds": 6,
    }
    return SimpleNamespace(**{**values, **bounds})


def point(name, epsilon, top1, accuracy):
    spec = parse({"name": name, "epsilon": epsilon})
    p = {"spec": spec, "mechanism": name, "setting": spec.series_label(), "epsilon": epsilon}
    p.update(top1=top1, top1_lo=top1, top1_hi=top1, nw_fraction=top1, nw_fraction_lo=top1, nw_fraction_hi=top1)
    for mode in ("train-time", "test-time"):
        p.update({f"{mode}_accuracy": accuracy, f"{mode}_accuracy_lo": accuracy, f"{mode}_accuracy_hi": accuracy})
    return p


# top-1 0.02 → 0.30 and accuracy 0.60 → 0.94 from ε = 1 to 10, one mechanism
POINTS = [point("santext", 1.0, 0.02, 0.60), point("santext", 10.0, 0.30, 0.94)]


def crossing(lo, hi, at):
    """log-linear interpolation between ε = 1 and 10 of a figure going lo → hi, where it equals ``at``."""
    return float(f"{math.exp(math.log(10) * (at - lo) / (hi - lo)):.3g}")


def test_without_bounds_the_refinement_aims_at_the_equal_privacy_target():
    (extra,) = Analysis(POINTS, settings(), BASELINE).refinements()
    assert extra.name == "santext" and extra.epsilon == crossing(0.02, 0.30, 0.10)


def test_the_refinement_aims_at_the_users_reidentification_bound():
    (extra,) = Analysis(POINTS, settings(max_reidentification=0.2), BASELINE).refinements()
    assert extra.epsilon == crossing(0.02, 0.30, 0.20) != crossing(0.02, 0.30, 0.10)


def test_the_refinement_aims_at_the_utility_bound_too():
    got = Analysis(POINTS, settings(max_reidentification=0.2, max_utility_loss=0.05), BASELINE).refinements()
    # utility − baseline goes −0.35 → −0.01 and reaches −0.05 at:
    assert [e.epsilon for e in got] == [crossing(0.02, 0.30, 0.20), crossing(-0.35, -0.01, -0.05)]


def test_a_crossing_already_measured_within_two_percent_is_not_measured_again():
    near = crossing(0.02, 0.30, 0.20) * 1.01
    points = [*POINTS, point("santext", near, 0.2, 0.9)]
    assert Analysis(points, settings(max_reidentification=0.2), BASELINE).refinements() == []


def test_the_recommendation_meets_both_bounds_or_says_where_they_could_be_met():
    chosen, why = Analysis(POINTS, settings(max_reidentification=0.35, max_utility_loss=0.05), BASELINE).recommend()
    assert chosen["epsilon"] == 10.0 and "Recommended: santext, ε = 10" in why
    chosen, why = Analysis(POINTS, settings(max_reidentification=0.2, max_utility_loss=0.05), BASELINE).recommend()
    assert chosen is None and "No setting of the grid meets them" in why


@pytest.mark.parametrize("target", [0.05, 0.25])
def test_equal_privacy_rows_carry_the_crossing_inside_the_grid(target):
    rows = Analysis(POINTS, settings(target_reidentification=target), BASELINE).equal_privacy()
    (row,) = [r for r in rows if r["figure"] == "top1"]
    assert row["epsilon"] == pytest.approx(crossing(0.02, 0.30, target), rel=5e-3)
    assert row["bracket_lo"] == 1.0 and row["bracket_hi"] == 10.0


def test_without_a_recommendation_before_and_after_shows_the_setting_nearest_to_the_bounds():
    points = [*POINTS, point("tem", 5.0, 0.22, 0.80)]
    a = Analysis(points, settings(max_reidentification=0.2, max_utility_loss=0.05), BASELINE)
    assert a.recommend()[0] is None
    # santext ε=1: 0 over the re-identification bound, 0.30 over the 0.05 loss; tem ε=5: 0.1 and 2; santext ε=10: 0.5, 0
    assert (a.nearest_feasible()["mechanism"], a.nearest_feasible()["epsilon"]) == ("santext", 10.0)


def top1_of(e):
    return 0.4 * (1 - math.exp(-e / 6))  # rises with ε, as re-identification does


def accuracy_of(e):
    return 0.95 - 0.4 * math.exp(-e / 3)


def solve(bounds, grid, rounds=6):
    """--solve's rounds with a measurement made here: the solutions and the points measured per round."""
    points = [point("santext", e, top1_of(e), accuracy_of(e)) for e in grid]
    added = []
    for _ in range(rounds):
        extra = Analysis(points, settings(**bounds), BASELINE).solve_points()
        if not extra:
            break
        added.append([s.epsilon for s in extra])
        points += [point("santext", s.epsilon, top1_of(s.epsilon), accuracy_of(s.epsilon)) for s in extra]
    return Analysis(points, settings(**bounds), BASELINE).solutions(), added


def test_solve_lands_within_the_tolerance_of_the_reidentification_bound():
    (row,), added = solve({"max_reidentification": 0.2}, [1.0, 5.0, 10.0])
    assert row["status"] == "solved" and 0.2 - 0.01 <= row["value"] <= 0.2  # top-1 is met, within 0.01 below
    assert row["epsilon"] < 6 * math.log(2) < row["epsilon"] * 1.1  # the true crossing is 6·ln 2 ≈ 4.16
    assert len(added) <= 3 and len(row["points"]) == 3 + sum(map(len, added))


def test_solve_lands_within_the_tolerance_of_the_utility_bound_from_outside_the_grid():
    """The utility bound is met at every grid ε: the search steps down (ε/2) until it brackets it."""
    (row,), added = solve({"max_utility_loss": 0.05}, [10.0, 20.0])
    assert added[0] == [5.0]
    assert row["status"] == "solved" and 0.04 <= row["value"] <= 0.05  # the loss, within 0.01 below the bound
    assert row["epsilon"] > 3 * math.log(0.4 / 0.05)  # the smallest ε meeting it: 3 ln 8 ≈ 6.24


def test_solve_finds_both_bounds_or_says_where_it_stopped():
    rows, _ = solve({"max_reidentification": 0.2, "max_utility_loss": 0.05}, [1.0, 5.0, 10.0], rounds=1)
    assert [r["bound"] for r in rows] == ["top-1 re-identification (upper 95% end)", "accuracy loss"]
    assert all(r["status"] == "solved" or r["status"].startswith("between") for r in rows)
    rows, _ = solve({"max_reidentification": 0.2, "max_utility_loss": 0.05}, [1.0, 5.0, 10.0])
    assert [r["status"] for r in rows] == ["solved", "solved"]


def test_solve_without_a_bound_is_refused_before_anything_runs():
    from dpspark.config import CompareConfig
    from dpspark.errors import ConfigError

    values = {"input": "in", "output": "out", "text_column": "t", "label_column": "y", "solve": True}
    with pytest.raises(ConfigError, match="--solve searches the ε that meets a bound: give --max-reidentification"):
        CompareConfig.parse(values)
    assert CompareConfig.parse({**values, "max_reidentification": 0.2}).solve


def test_round_robin_takes_the_series_in_turn():
    from dpspark.evaluation.compare_analysis import round_robin

    items = [("laplace", 1), ("laplace", 5), ("laplace", 10), ("tem", 1), ("santext", 1), ("santext", 5)]
    got = round_robin(items, lambda item: item[0])
    # each series once before any twice; the i-th series starts at its (i mod n)-th item (santext: 2 mod 2)
    assert got == [("laplace", 1), ("tem", 1), ("santext", 1), ("laplace", 5), ("santext", 5), ("laplace", 10)]
    assert sorted(got) == sorted(items)
    assert round_robin([], lambda item: item) == []


def test_round_robin_alternates_the_kinds_and_spreads_epsilon():
    """The series of two kinds (fitted or exact likelihoods) alternate, and the first round holds every ε:
    the first chunks measure both kinds of cost, at small and large ε."""
    from dpspark.evaluation.compare_analysis import round_robin

    fitted = {"mahalanobis", "laplace", "vickrey"}
    names = ["mahalanobis", "laplace", "vickrey", "tem", "santext", "custext"]
    items = [(m, e) for m in names for e in (1, 5, 10)]
    got = round_robin(items, lambda item: item[0], lambda item: item[0] in fitted)
    first = got[: len(names)]
    assert [m for m, _ in first] == ["mahalanobis", "tem", "laplace", "santext", "vickrey", "custext"]
    assert [e for _, e in first] == [1, 5, 10, 1, 5, 10]
    assert sorted(got) == sorted(items) and len(got) == len(items)
    for k in range(0, len(got), 2):  # every chunk of two holds one of each kind
        assert {got[k][0] in fitted, got[k + 1][0] in fitted} == {True, False}


def test_the_refinement_outlook_counts_only_crossings_the_grid_can_hold():
    """While the grid is measured: a series whose smallest ε already exceeds the target gets no refinement
    point (the crossing lies below the grid), one whose points bracket it one per round (at most two), one
    not measured yet the smoothed share of the known series that bracket it: (1 + 1) / (2 + 2)."""
    plan = {"santext": [1.0, 5.0, 10.0], "tem β=0.001": [1.0, 5.0, 10.0], "laplace": [1.0, 5.0, 10.0]}
    points = [
        point("santext", 1.0, 0.02, 0.6),  # meets the 0.10 target at ε = 1 ...
        point("santext", 5.0, 0.30, 0.9),  # ... not at 5: the crossing is inside the grid
        point("tem", 1.0, 0.25, 0.7),  # misses it at the smallest ε: below the grid, never refined
    ]
    assert Analysis(points, settings(), BASELINE).refinement_outlook(plan, rounds=2) == 2 + 0 + 0.5
    # nothing measured: one half per series; every series known and outside the grid: none
    assert Analysis([], settings(), BASELINE).refinement_outlook(plan, rounds=2) == 1.5
    below = [point(name, 1.0, 0.5, 0.6) for name in ("santext", "tem", "laplace")]
    assert Analysis(below, settings(), BASELINE).refinement_outlook(plan, rounds=2) == 0
    assert Analysis(points, settings(), BASELINE).refinement_outlook(plan, rounds=0) == 0


def test_a_tolerance_below_the_figures_own_noise_widens_to_it():
    """Two points 0.006 apart with intervals of ±0.02 cannot be ordered: a tolerance of 0.01 below the bound
    would send the search on forever (SMS spam, laplace: 0.286 against 0.3). The row's tolerance is the
    noise there, and the report says so; a narrow interval keeps the tolerance asked for."""

    def noisy(e, top1, width):
        p = point("santext", e, top1, accuracy_of(e))
        p.update(top1_lo=top1 - width, top1_hi=top1)  # the figure is the upper end: top1 itself lies below
        p["top1"] = top1 - width
        return p

    config = settings(max_reidentification=0.3)
    wide = [noisy(1.0, 0.1, 0.02), noisy(6.4, 0.286, 0.02), noisy(6.46, 0.303, 0.02), noisy(10.0, 0.5, 0.02)]
    (row,) = Analysis(wide, config, BASELINE).solutions()
    assert row["status"] == "solved" and row["epsilon"] == 6.4 and row["tolerance"] == pytest.approx(0.02)
    assert Analysis(wide, config, BASELINE).solve_points() == []  # nothing left to resolve
    narrow = [noisy(1.0, 0.1, 0.001), noisy(6.4, 0.286, 0.001), noisy(6.46, 0.303, 0.001), noisy(10.0, 0.5, 0.001)]
    (row,) = Analysis(narrow, config, BASELINE).solutions()
    assert row["status"].startswith("between 6.4 and 6.46") and row["tolerance"] == 0.01
