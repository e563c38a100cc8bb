"""``dpspark compare``'s analysis: pure functions of the measured points (no Spark, no I/O).

From the rows of ``compare.parquet`` (one per setting measured, with its ``spec``), the settings
and the baseline: the equal-privacy crossings, where the refinement rounds aim, and the
recommendation under the user's bounds. ``dpspark.spark.compare`` measures the points and calls
these; the unit tests call them on points of their own.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

from dpspark import mechanisms, utility
from dpspark.evaluation import field_metrics as fm
from dpspark.mechanisms import MechanismSpec
from dpspark.stats import feasible_region


def with_epsilon(spec: MechanismSpec, epsilon: float) -> MechanismSpec:
    """The same setting at another ε (a refinement point)."""
    return mechanisms.parse({**spec.parameters(), "epsilon": float(epsilon)})


def round_robin(items: list[Any], series: Any, kind: Any = None) -> list[Any]:
    """``items`` with their series (``series(item)``) taken in turn, so that compare measures every kind of
    cost early and its estimate of the time left holds:

    - each series' first, then each one's second, ...;
    - the series ordered so that their kinds (``kind(item)``: how the attacker gets its likelihoods, the
      main cost) alternate, in their first order within a kind;
    - the i-th series starting at its (i mod n)-th item and wrapping round: its ε differ from its
      neighbours', so that the first chunks hold small and large ε of different mechanisms."""
    by: dict[Any, list[Any]] = {}
    for item in items:
        by.setdefault(series(item), []).append(item)
    queues = list(by.values())
    if kind is not None:
        kinds: dict[Any, list[list[Any]]] = {}
        for q in queues:
            kinds.setdefault(kind(q[0]), []).append(q)
        queues = [q for turn in itertools.zip_longest(*kinds.values()) for q in turn if q is not None]
    queues = [q[i % len(q) :] + q[: i % len(q)] for i, q in enumerate(queues)]
    return [q[i] for i in range(max(map(len, queues), default=0)) for q in queues if i < len(q)]


@dataclass(frozen=True)
class Analysis:
    """The measured points (``compare.parquet``'s rows with their ``spec``), the comparison's settings
    (``CompareConfig``) and the non-private baseline's figures."""

    points: list[dict[str, Any]]
    config: Any
    baseline: dict[str, float]

    # --- equal empirical privacy ---------------------------------------------------------------

    def targets(self) -> list[tuple[str, str, float]]:
        """(label, the point's figure, target): top-1 re-identification and the mean Nw as a share of K."""
        c = self.config
        return [
            (f"top-1 ≤ {100 * c.target_reidentification:g}%", "top1", c.target_reidentification),
            (f"Nw ≤ {100 * c.target_nw_fraction:g}% of K", "nw_fraction", c.target_nw_fraction),
        ]

    def curves(self, figure: str) -> dict[str, list[fm.GridPoint]]:
        m = self.config.utility_metric
        out: dict[str, list[fm.GridPoint]] = {}
        for p in self.points:
            lo, hi = p.get(f"{figure}_lo"), p.get(f"{figure}_hi")
            out.setdefault(p["setting"], []).append(
                fm.GridPoint(
                    p["epsilon"],
                    p[figure],
                    lo,
                    hi,
                    p[f"train-time_{m}"],
                    p[f"train-time_{m}_lo"],
                    p[f"train-time_{m}_hi"],
                )
            )
        return out

    def equal_privacy(self) -> list[dict[str, Any]]:
        """One row per (setting series, target): the ε that meets it and the utility there, both modes."""
        m, rows = self.config.utility_metric, []
        for label, figure, target in self.targets():
            found = fm.equal_privacy(self.curves(figure), target)
            for name, eq in found.items():
                pts = {p["epsilon"]: p for p in self.points if p["setting"] == name}
                test_time = None
                if eq.epsilon is not None:  # the test-time utility, interpolated as the train-time one
                    lo, hi = eq.bracket
                    a, b = pts[lo], pts[hi]
                    test_time = fm.log_interpolate(eq.epsilon, lo, hi, a[f"test-time_{m}"], b[f"test-time_{m}"])
                rows.append(
                    {
                        "setting": name,
                        "mechanism": next(p["mechanism"] for p in self.points if p["setting"] == name),
                        "target": label,
                        "figure": figure,
                        "target_value": target,
                        "epsilon": eq.epsilon,
                        "epsilon_conservative": eq.epsilon_conservative,
                        "status": eq.status,
                        "bracket_lo": eq.bracket[0],
                        "bracket_hi": eq.bracket[1],
                        "train_time": eq.utility,
                        "train_time_lo": eq.utility_low,
                        "train_time_hi": eq.utility_high,
                        "test_time": test_time,
                        "refine": list(eq.refine),
                    }
                )
        return rows

    def aims(self) -> list[tuple[str, dict[str, list[fm.GridPoint]], float]]:
        """What the refinement rounds aim at, as (figure, curves, target), each curve's crossing of its
        target: the user's bounds where given (top-1 re-identification at ``--max-reidentification``;
        the utility loss at ``--max-utility-loss``, as utility − baseline of the worse mode reaching
        −bound), else the re-identification target of equal privacy."""
        c = self.config
        if c.max_reidentification is None and c.max_utility_loss is None:
            return [("top1", self.curves("top1"), c.target_reidentification)]
        out = []
        if c.max_reidentification is not None:
            out.append(("top1", self.curves("top1"), c.max_reidentification))
        if c.max_utility_loss is not None:
            gains: dict[str, list[fm.GridPoint]] = {}
            for p in self.points:
                gains.setdefault(p["setting"], []).append(fm.GridPoint(p["epsilon"], -self.loss(p)))
            out.append(("utility", gains, -c.max_utility_loss))
        return out

    def refinements(self) -> list[MechanismSpec]:
        """The extra ε points where an aim (``aims``) falls between two measured points: the interpolated
        crossing (3 significant digits), measured in the next round unless a measured point lies within
        2% of it. Outside the grid the report says which way to extend it."""
        measured = {(p["setting"], p["epsilon"]) for p in self.points}
        first = {p["setting"]: p["spec"] for p in self.points}
        extra: list[MechanismSpec] = []
        for _, curves, target in self.aims():
            for name, eq in fm.equal_privacy(curves, target).items():
                if eq.epsilon is None:
                    continue
                e = float(f"{eq.epsilon:.3g}")
                if not any(abs(math.log(e / m)) <= 0.02 for n, m in measured if n == name):
                    measured.add((name, e))
                    extra.append(with_epsilon(first[name], e))
        return extra

    # --- the choice ------------------------------------------------------------------------------

    def loss(self, p: dict[str, Any]) -> float:
        """Baseline minus the mean utility metric, the larger of the two modes (calibrate's quantity)."""
        m = self.config.utility_metric
        return max(self.baseline[m] - p[f"{mode}_{m}"] for mode in utility.MODES)

    @staticmethod
    def learns(p: dict[str, Any]) -> bool:
        """Whether a point's classifier beats the majority class in both modes (``utility.beats_majority``);
        a point measured without the test split's majority rate is not judged (True)."""
        return p.get("beats_majority") is not False

    def no_signal(self) -> str | None:
        """Why utility cannot tell the settings apart, one sentence; None when it can: the non-private
        baseline, or every setting, does not beat the majority class (its accuracy's 95% interval does not
        lie above the test split's majority rate). The classifier then predicts the prior, whatever ε."""
        b = self.baseline
        if b.get("majority_rate") is None:
            return None
        label = b.get("majority_label")
        share = f"{100 * b['majority_rate']:.1f}% of the test split" + (f" is {label!r}" if label is not None else "")
        rule = "the lower end of the accuracy's 95% interval lies at or below that rate"
        if b.get("beats_majority") is False:
            return (
                f"No recommendation: the non-private baseline does not beat the majority class ({share}; "
                f"baseline accuracy {100 * b['accuracy']:.1f}%, {rule}): the classifier learned nothing on this "
                "data, so utility cannot tell the settings apart; use more rows, or labels and a model it can learn."
            )
        if self.points and not any(self.learns(p) for p in self.points):
            return (
                f"No recommendation: no setting beats the majority class ({share}; at every setting {rule}, "
                "trained or tested on perturbed text): the classifier learned nothing on this data, so utility "
                "cannot tell the settings apart; use more rows, a larger --vocab-size or larger ε."
            )
        return None

    def recommend(self) -> tuple[dict[str, Any] | None, str]:
        """The recommended setting and why; or None and where the feasible region would lie.

        With bounds (``--max-utility-loss``, ``--max-reidentification``): the most private measured
        setting meeting both, the re-identification judged by the upper end of its 95% interval
        (the figure never understates the attacker). Without: the best utility among the settings
        whose top-1 interval lies below ``--target-reidentification``. Either way only a setting whose
        classifier beats the majority class (``learns``); none at all where utility cannot tell the
        settings apart (``no_signal``), said alone where settings meet the bounds, else after where the
        feasible region would lie."""
        c = self.config
        max_reid = c.max_reidentification if c.max_reidentification is not None else c.target_reidentification
        max_loss = c.max_utility_loss
        private = lambda p: p["top1_hi"] <= max_reid  # noqa: E731
        useful = lambda p: max_loss is None or self.loss(p) <= max_loss  # noqa: E731
        meeting = [p for p in self.points if private(p) and useful(p)]
        ok = [p for p in meeting if self.learns(p)]
        bounds = f"top-1 re-identification ≤ {100 * max_reid:g}% (upper end of its 95% interval)"
        if max_loss is not None:
            bounds += f", {c.utility_metric} loss ≤ {max_loss:g} (baseline minus the mean, the worse mode)"
        silent = self.no_signal()  # where settings meet the bounds, utility still cannot choose among them
        if silent is not None and meeting:
            return None, f"Bounds: {bounds}. **{silent}**"
        if ok:
            if c.max_utility_loss is not None:
                best = min(ok, key=lambda p: (p["top1"], self.loss(p), p["epsilon"]))
                how = "the lowest re-identification among the settings meeting every bound"
            else:
                best = min(ok, key=lambda p: (self.loss(p), p["top1"], p["epsilon"]))
                how = "the best utility among the settings meeting the re-identification bound"
            return best, f"Bounds: {bounds}. **Recommended: {best['setting']}, ε = {best['epsilon']:g}**: {how}."
        judged = [
            {
                "setting": p["setting"],
                "epsilon": p["epsilon"],
                "utility_loss": self.loss(p),
                "reidentification": p["top1_hi"],
            }
            for p in self.points
        ]
        hint = feasible_region(judged, max_loss, max_reid)
        left = len(meeting) - len(ok)
        left_out = (
            f" {left} setting{'s' if left > 1 else ''} meeting them do{'' if left > 1 else 'es'} not beat the majority "
            "class and cannot be recommended."
            if left
            else ""
        )
        also = f" {silent}" if silent is not None else ""
        return None, f"Bounds: {bounds}. **No setting of the grid meets them.**{left_out} {hint}{also}"

    def nearest_feasible(self) -> dict[str, Any]:
        """Without a recommendation, the measured setting nearest to meeting the bounds (the
        re-identification bound, or the target without one, judged by the upper end of the interval;
        and the utility bound where given): the smallest sum of each bound's shortfall relative to the
        bound; ties to the better utility."""
        c = self.config
        max_reid = c.max_reidentification if c.max_reidentification is not None else c.target_reidentification

        def shortfall(p: dict[str, Any]) -> tuple[float, float]:
            miss = max(0.0, p["top1_hi"] - max_reid) / max(max_reid, 1e-9)
            if c.max_utility_loss is not None:
                miss += max(0.0, self.loss(p) - c.max_utility_loss) / max(c.max_utility_loss, 1e-9)
            return miss, self.loss(p)

        return min(self.points, key=shortfall)

    # --- --solve: the ε that meets each bound, to a tolerance -------------------------------------

    def bounds(self) -> list[tuple[str, float, Any]]:
        """(name, bound, g) per bound the user gave: g(point) non-decreasing in ε, and the bound met
        on one side of it: top-1's upper 95% end at most the bound (ε up to the crossing), the utility
        loss at most the bound (−loss at least −bound: ε from the crossing on)."""
        c, out = self.config, []
        if c.max_reidentification is not None:
            out.append(("top-1 re-identification (upper 95% end)", c.max_reidentification, lambda p: p["top1_hi"]))
        if c.max_utility_loss is not None:
            out.append((f"{c.utility_metric} loss", c.max_utility_loss, lambda p: -self.loss(p)))
        return out

    def solutions(self) -> list[dict[str, Any]]:
        """Per setting series and bound: the solved ε (the measured point meeting the bound nearest to
        where it stops being met), its figure, whether it is within ``--solve-tolerance`` of the bound,
        and every point measured."""
        tol, rows = self.config.solve_tolerance, []
        for name, bound, g in self.bounds():
            utility = name.endswith("loss")
            for series, pts in self._series().items():
                value = (lambda p, g=g: -g(p)) if utility else g  # the figure as the user reads it
                meeting = [p for p in pts if value(p) <= bound + 1e-12]
                best = (min if utility else max)(meeting, key=lambda p: p["epsilon"]) if meeting else None
                # the figure's own noise at the point: a tolerance below it cannot be told apart, so it widens
                reach = tol if best is None else max(tol, self._noise(best, utility))
                solved = best is not None and bound - value(best) <= reach
                rows.append(
                    {
                        "setting": series,
                        "bound": name,
                        "bound_value": bound,
                        "epsilon": None if best is None else best["epsilon"],
                        "value": None if best is None else value(best),
                        "tolerance": reach,
                        "status": "solved" if solved else self._unsolved(pts, g, bound, utility, best),
                        "points": [{"epsilon": p["epsilon"], "value": value(p)} for p in pts],
                    }
                )
        return rows

    def _noise(self, p: dict[str, Any], of_utility: bool) -> float:
        """The half-width of the point's 95% interval of the figure (top-1; the utility metric in either
        mode): how far two measurements of one setting may fall apart (0 with one run)."""
        if of_utility:
            m = self.config.utility_metric
            widths = [p[f"{mode}_{m}"] - p.get(f"{mode}_{m}_lo", p[f"{mode}_{m}"]) for mode in utility.MODES]
        else:
            widths = [p["top1_hi"] - p["top1"]]
        return max((w for w in widths if w is not None and math.isfinite(w)), default=0.0)

    def solve_points(self) -> list[MechanismSpec]:
        """The next round's points: for each series and bound not yet solved, the interpolated crossing
        (4 significant digits); where a measured point already lies within 0.5% of it, the bracket's
        geometric midpoint (bisection); outside the measured range, the next step out (ε/2 or 2ε)."""
        extra: list[MechanismSpec] = []
        measured = {(p["setting"], p["epsilon"]) for p in self.points}
        specs = {p["setting"]: p["spec"] for p in self.points}
        pending = {(r["setting"], r["bound"]) for r in self.solutions() if r["status"] != "solved"}
        for name, bound, g in self.bounds():
            target = -bound if name.endswith("loss") else bound
            for series, pts in self._series().items():
                if (series, name) not in pending:
                    continue
                e = self._next(fm.crossing([fm.GridPoint(p["epsilon"], g(p)) for p in pts], target), series, measured)
                if e is not None:
                    measured.add((series, e))
                    extra.append(with_epsilon(specs[series], e))
        return extra

    def _series(self) -> dict[str, list[dict[str, Any]]]:
        out: dict[str, list[dict[str, Any]]] = {}
        for p in sorted(self.points, key=lambda p: p["epsilon"]):
            out.setdefault(p["setting"], []).append(p)
        return out

    @staticmethod
    def _next(eq: fm.EqualPrivacy, series: str, measured: set) -> float | None:
        near = lambda e: any(n == series and abs(math.log(e / m)) <= 0.005 for n, m in measured)  # noqa: E731
        lo, hi = eq.bracket
        if eq.epsilon is None:  # outside the measured range: one step further out
            e = float(f"{(lo * 2 if hi is None else hi / 2):.4g}")
            return None if near(e) else e
        if hi / lo <= 1.01:  # the figure jumps inside a 1% bracket: nothing left to resolve
            return None
        e = float(f"{eq.epsilon:.4g}")
        if near(e) or not lo < e < hi:
            e = float(f"{math.sqrt(lo * hi):.4g}")
        return None if near(e) else e

    def _unsolved(self, pts: list[dict[str, Any]], g: Any, bound: float, utility: bool, best: Any) -> str:
        target = -bound if utility else bound
        eq = fm.crossing([fm.GridPoint(p["epsilon"], g(p)) for p in pts], target)
        if eq.epsilon is None:
            return "not met at any measured ε" if best is None else "met at every measured ε"
        return f"between {eq.bracket[0]:g} and {eq.bracket[1]:g}, not yet within the tolerance"

    def refinement_outlook(self, planned: dict[str, list[float]], rounds: int) -> float:
        """The refinement points still to come while the grid is measured (for the estimate of the time
        left): per aim and series, none where the series' smallest grid ε already misses the aim or its
        largest already meets it (the crossing lies outside the grid, where no point is added), one per
        round (at most two) where the measured points bracket it, and where it is not known yet, the
        share of the known series that bracket it, smoothed ((k + 1) / (n + 2): one half before any).

        Args:
            planned: each series' grid ε.
            rounds: the refinement rounds.
        """
        if rounds == 0:
            return 0.0
        expected = 0.0
        for _, curves, target in self.aims():
            known, bracketing, unknown = 0, 0, 0
            for series, grid in planned.items():
                pts = {p.epsilon: p.value for p in curves.get(series, [])}
                lo, hi = min(grid), max(grid)
                if (lo in pts and pts[lo] > target) or (hi in pts and pts[hi] <= target):
                    known += 1  # outside the grid: the report says which way to look, no point is added
                    continue
                measured = sorted(pts)
                if any(pts[a] <= target < pts[b] for a, b in zip(measured, measured[1:])):
                    known, bracketing = known + 1, bracketing + 1
                else:
                    unknown += 1
            expected += bracketing * min(rounds, 2) + unknown * (bracketing + 1) / (known + 2)
        return expected
