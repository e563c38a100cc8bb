"""Plausible-deniability statistics Nw and Sw, their summaries, and calibration of ε and λ.

Feyisetan et al. (2020) §3.2–4.1 and Xu et al. (2020) §5.1: run the mechanism K
times on a word w; Nw = #{runs with output w} (how often it survives), Sw = #{distinct
outputs} (how many words it hides among). Smaller Nw and larger Sw mean more plausible
deniability. Calibration picks, for each λ, the largest ε whose worst case (or a chosen
percentile) still meets the user's bounds, and the λ that admits the largest ε.

Work is cut into *items* (a setting: mechanism, ε and its own parameters; a chunk of words; a
block of runs). Item i draws its noise from ``batch_generator(job key, i, 0)``; the counts are the
combiner ``dpspark.engine.nw_sw``, so the distributed computation and the local fold
(``nw_sw.counts``) give identical numbers for the same key.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dpspark.errors import ConfigError, EmbeddingError
from dpspark.mechanisms import MechanismSpec, WordMechanism, lambda_of_series, series_of_lambda

PERCENTILES = (5, 50, 95)


@dataclass(frozen=True)
class WorkItem:
    """One unit of work: ``runs`` draws of each word in ``rows`` under setting number ``setting``
    (an index into the run's list of mechanism specs).

    ``block`` numbers the item's block of runs among a word's K runs (0 when all K are
    one block): the re-identification estimate fits its attack on block 0 and scores it
    on block 1 (``dpspark.risk``), independent draws since every item has its own noise.
    """

    item: int
    setting: int
    rows: tuple[int, ...]
    runs: int
    block: int = 0


def validate_runs(runs: int) -> None:
    if runs < 2:
        raise ConfigError(f"runs: K must be at least 2 to say anything about Nw and Sw, got {runs}")


def plan(
    settings: Sequence[MechanismSpec],
    rows: np.ndarray,
    runs: int,
    words_per_item: int = 50,
    runs_per_item: int | None = None,
) -> list[WorkItem]:
    """Cut the settings × words × runs into items (deterministic order: the item number keys the noise)."""
    if not settings:
        raise ConfigError("the grid is empty: give at least one mechanism and one ε")
    validate_runs(runs)
    block = runs if runs_per_item is None else max(1, min(runs, runs_per_item))
    items: list[WorkItem] = []
    for s in range(len(settings)):
        for start in range(0, len(rows), words_per_item):
            chunk = tuple(int(r) for r in rows[start : start + words_per_item])
            for r0 in range(0, runs, block):
                items.append(WorkItem(len(items), s, chunk, min(block, runs - r0), r0 // block))
    return items


def exact_nw_sw(mechanism: WordMechanism, rows: np.ndarray, runs: int) -> tuple[np.ndarray, np.ndarray] | None:
    """E[Nw] and E[Sw] of K = ``runs`` runs from the mechanism's closed form, or None without one.

    E[Nw] = K·p(w|w); E[Sw] = Σ_y [1 − (1 − p(y|w))^K], counting w itself among the distinct
    outputs (the MLDP benchmark's Sw leaves w out). Words outside W have p(w|w) = 0.
    """
    rows = np.asarray(rows, dtype=np.int64)
    nw, sw = np.zeros(len(rows)), np.zeros(len(rows))
    pos, found = mechanism.space.positions(rows)
    step = mechanism.space.block
    for start in range(0, len(rows), step):
        p = mechanism.distribution(rows[start : start + step])
        if p is None:
            return None
        part = slice(start, start + step)
        nw[part] = runs * np.where(found[part], p[np.arange(len(p)), np.maximum(pos[part], 0)], 0.0)
        # 1 − (1 − p)^K without cancellation: −expm1(K·log1p(−p)).
        with np.errstate(divide="ignore"):  # p = 1 (noise off, a group of one word): log1p(−1) = −inf, exact
            sw[part] = -np.expm1(runs * np.log1p(-np.minimum(p, 1.0))).sum(axis=1)
    return nw, sw


UNCHANGED_WORDS, UNCHANGED_RUNS = 200, 10  # perturb's check: public words × runs per word (noise family)
UNCHANGED_SEED = 0


def expected_unchanged(
    mechanism: WordMechanism, words: int = UNCHANGED_WORDS, runs: int = UNCHANGED_RUNS
) -> tuple[float, str]:
    """The expected share of tokens released as themselves, over the ``words`` most frequent words of
    the vocabulary (public: the embedding's own order, no corpus), each weighted alike.

    Exact where the mechanism has a closed form (the mean of p(w|w)); else the share of ``runs``
    draws per word that return the word (OS randomness; its standard error is at most
    0.5/sqrt(words·runs), 1.1 points by default; a fixed public seed: the same settings give the same
    figure). Returns (share, "exact" or "estimated")."""
    rows = np.asarray(mechanism.vocab_rows[:words], dtype=np.int64)
    exact = exact_nw_sw(mechanism, rows, 1)
    if exact is not None:
        return float(exact[0].mean()), "exact"
    # A diagnostic on public words, not a release's noise: a fixed generator makes the figure (and so the
    # manifest) reproducible for the same settings.
    out = mechanism.vocab_rows[mechanism.sample_copies(rows, runs, np.random.default_rng(UNCHANGED_SEED))]
    return float((out == rows[:, None]).mean()), "estimated"


def sample_words(vocab_rows: np.ndarray, n: int, seed: int = 0) -> np.ndarray:
    """The stated rule: n vocabulary words drawn uniformly without replacement with
    numpy.random.default_rng(seed), sorted by embedding row. Public data, public seed."""
    if n < 1:
        raise ConfigError(f"words: need at least one word, got {n}")
    if n >= len(vocab_rows):
        return np.sort(vocab_rows)
    return np.sort(np.random.default_rng(seed).choice(vocab_rows, n, replace=False))


def rows_of_words(words: list[str], index: dict[str, int], vocab_rows: np.ndarray) -> np.ndarray:
    """Embedding rows of ``words``; every word must be in the output vocabulary."""
    in_vocab = set(int(r) for r in vocab_rows)
    rows, unknown = [], []
    for w in words:
        r = index.get(w, -1)
        (rows if r in in_vocab else unknown).append(r if r in in_vocab else w)
    if unknown:
        raise EmbeddingError(
            f"{len(unknown)} words of the word list are not in the vocabulary (first: {unknown[:5]}); "
            "remove them or enlarge the vocabulary (--vocab-size / --vocab-file)"
        )
    return np.array(sorted(set(rows)), dtype=np.int64)


def summarise(nw: np.ndarray, sw: np.ndarray) -> dict[str, float]:
    """Mean ± std, the 5/50/95th percentiles, worst case, and the 95% CI of the mean, for Nw and Sw."""
    out: dict[str, float] = {"words": int(len(nw))}
    for name, x in (("nw", np.asarray(nw, float)), ("sw", np.asarray(sw, float))):
        mean, std = float(x.mean()), float(x.std(ddof=1)) if len(x) > 1 else 0.0
        half = 1.959964 * std / math.sqrt(len(x))  # normal approximation; n is hundreds of words
        out.update(
            {f"{name}_mean": mean, f"{name}_std": std, f"{name}_ci_low": mean - half, f"{name}_ci_high": mean + half}
        )
        for p in PERCENTILES:
            out[f"{name}_p{p}"] = float(np.percentile(x, p))
    out["nw_max"] = float(np.max(nw))
    out["sw_min"] = float(np.min(sw))
    return out


def finite(*figures: object) -> bool:
    """True when every figure is a finite number: a NaN, an infinity or a missing figure meets no bound."""
    return all(isinstance(f, int | float | np.number) and not isinstance(f, bool) and math.isfinite(f) for f in figures)


@dataclass(frozen=True)
class Bounds:
    """User bounds: Nw ≤ max_nw_fraction·K and Sw ≥ min_sw at the given percentile (100 = worst case)."""

    max_nw_fraction: float | None = 0.5
    min_sw: float | None = None
    percentile: float = 100.0

    def __post_init__(self) -> None:
        if self.max_nw_fraction is None and self.min_sw is None:
            raise ConfigError("give at least one bound: --max-nw-fraction and/or --min-sw")
        if self.max_nw_fraction is not None and not 0 <= self.max_nw_fraction <= 1:
            raise ConfigError(f"max-nw-fraction must be in [0, 1], got {self.max_nw_fraction}")
        if not 0 < self.percentile <= 100:
            raise ConfigError(f"percentile must be in (0, 100], got {self.percentile}")

    def statistic(self, nw: np.ndarray, sw: np.ndarray) -> tuple[float, float]:
        """(Nw at the percentile, Sw at the mirrored percentile): the worst case when percentile = 100."""
        return float(np.percentile(nw, self.percentile)), float(np.percentile(sw, 100 - self.percentile))

    def met(self, nw: np.ndarray, sw: np.ndarray, runs: int) -> bool:
        n, s = self.statistic(nw, sw)
        ok_nw = self.max_nw_fraction is None or (finite(n) and n <= self.max_nw_fraction * runs)
        ok_sw = self.min_sw is None or (finite(s) and s >= self.min_sw)
        return ok_nw and ok_sw


def calibrate(table: dict[tuple[float, object], tuple[np.ndarray, np.ndarray, int]], bounds: Bounds) -> dict:
    """For each setting the largest ε of the grid meeting ``bounds``; the setting admitting the largest ε.

    Args:
        table: (ε, setting) → (Nw per word, Sw per word, K); a setting is its series label
            (``report.series_label``: ``laplace``, ``mahalanobis λ=0.5``, ``tem β=0.001``) or a
            bare λ (the noise family's grid, as older outputs have it).

    Returns a dict with ``per_setting`` rows (setting, its mechanism and λ where it has one, ε or
    None, the statistics behind it) and ``best`` (None when no setting of the grid meets the bounds).
    """
    rows = []
    for setting in sorted({k for _, k in table}, key=str):
        checked = []
        for e in sorted(e for e, k in table if k == setting):
            nw, sw, runs = table[(e, setting)]
            n, s = bounds.statistic(nw, sw)
            met = finite(e) and bounds.met(nw, sw, runs)
            checked.append({"epsilon": e, "nw_stat": n, "sw_stat": s, "runs": runs, "met": met})
        ok = [c for c in checked if c["met"]]
        rows.append({**_setting_fields(setting), "epsilon": ok[-1]["epsilon"] if ok else None, "checked": checked})
    feasible = [r for r in rows if r["epsilon"] is not None]
    best = (
        max(feasible, key=lambda r: (r["epsilon"], -1.0 if r["lambda"] is None else r["lambda"])) if feasible else None
    )
    return {
        "per_setting": rows,
        "best": None if best is None else {k: best[k] for k in ("setting", "mechanism", "lambda", "epsilon")},
    }


def _setting_fields(setting: object) -> dict:
    """setting, mechanism and λ (None where the mechanism has none) of a calibration row."""
    series = series_of_lambda(setting) if isinstance(setting, int | float) else str(setting)  # a bare λ: older outputs
    return {"setting": series, "mechanism": series.split()[0], "lambda": lambda_of_series(series)}


def feasible_region(rows: Sequence[dict], max_utility_loss: float | None, max_reidentification: float | None) -> str:
    """Where the settings meeting both bounds would lie, when no measured point does: per setting
    (rows with ``setting``, ``epsilon``, ``utility_loss``, ``reidentification``), the largest ε whose
    re-identification meets its bound and the smallest whose utility loss meets its own. Larger ε
    only raises re-identification, so the hint never says "add larger ε" to meet a privacy bound."""
    hints = []
    for name in dict.fromkeys(r["setting"] for r in rows):
        pts = sorted((r for r in rows if r["setting"] == name), key=lambda r: r["epsilon"])
        safe = [
            r["epsilon"]
            for r in pts
            if max_reidentification is None
            or (finite(r["reidentification"]) and r["reidentification"] <= max_reidentification)
        ]
        good = [
            r["epsilon"]
            for r in pts
            if max_utility_loss is None or (finite(r["utility_loss"]) and r["utility_loss"] <= max_utility_loss)
        ]
        if not safe:
            hints.append(
                f"{name}: every ε of the grid exceeds the re-identification bound; a feasible ε, if any, lies below "
                f"{pts[0]['epsilon']:g}: add smaller ε values"
            )
        elif not good:
            hints.append(
                f"{name}: no ε of the grid keeps the utility loss within the bound, up to ε = {pts[-1]['epsilon']:g}; "
                "larger ε raise re-identification: loosen the utility bound or try another mechanism"
            )
        else:
            hi, lo = max(safe), min(good)
            hint = f"{name}: re-identification meets its bound up to ε = {hi:g}, utility needs ε ≥ {lo:g}"
            if hi < lo:
                hint += f": a feasible ε, if any, lies between {hi:g} and {lo:g}: add ε values there"
            hints.append(hint)
    return "; ".join(hints) + "."


def joint_calibrate(
    points: dict[tuple[float, object], dict[str, float | bool | None]],
    max_utility_loss: float | None,
    max_reidentification: float | None,
) -> dict:
    """The most private setting meeting every bound: Xu et al. (2020) §6, privacy maximised
    under a utility constraint, here with the re-identification and Nw/Sw bounds beside it.

    Args:
        points: (ε, setting) → ``utility_loss`` (baseline minus mean utility, None: not measured),
            ``reidentification`` (top-1 share of corpus tokens recovered, None: not measured),
            ``nw_sw_met`` (the Nw/Sw bounds, None: no such bounds). A setting is its series label
            (``report.series_label``: ``laplace``, ``mahalanobis λ=1``, ``tem β=0.001``) or a bare λ
            of the noise family.
        max_utility_loss, max_reidentification: the bounds (None: not bounded).

    "Most private" is the smallest ε within one mechanism or the λ grid of the noise family (then
    the lower re-identification, then the larger λ: elliptical noise gives lower Nw at equal ε, Xu
    et al. Tables 1–4). Across other mechanisms ε is not one scale, and the lowest measured
    re-identification decides (then the smaller ε). The frontier marks the points that no other
    point beats on both utility loss and re-identification (on utility loss and ε when risk is absent).

    Returns {"rows": one per point with ``met`` and ``frontier``, "best": the chosen point's
    epsilon, lambda, setting and mechanism, or None}.
    """
    if max_utility_loss is None and max_reidentification is None:
        raise ConfigError("give at least one joint bound: --max-utility-loss and/or --max-reidentification")
    rows = []
    for (e, setting), p in sorted(points.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
        loss, reid, nw_ok = p.get("utility_loss"), p.get("reidentification"), p.get("nw_sw_met")
        fields = _setting_fields(setting)
        met = nw_ok is not False and finite(e) and (fields["lambda"] is None or finite(fields["lambda"]))
        if max_utility_loss is not None:
            met = met and finite(loss) and loss <= max_utility_loss
        if max_reidentification is not None:
            met = met and finite(reid) and reid <= max_reidentification
        rows.append(
            {
                "epsilon": e,
                "lambda": fields["lambda"],
                "setting": fields["setting"],
                "mechanism": fields["mechanism"],
                "utility_loss": loss,
                "reidentification": reid,
                "nw_sw_met": nw_ok,
                "met": met,
            }
        )

    def privacy_cost(r: dict) -> float:
        return r["reidentification"] if r["reidentification"] is not None else r["epsilon"]

    def utility_cost(r: dict) -> float:
        return r["utility_loss"] if r["utility_loss"] is not None else 0.0

    # A point with a NaN figure is on no frontier and beats no other point.
    judged = [
        r
        for r in rows
        if finite(r["epsilon"], utility_cost(r), privacy_cost(r)) and (r["lambda"] is None or finite(r["lambda"]))
    ]
    for r in rows:
        r["frontier"] = any(r is j for j in judged) and not any(
            utility_cost(o) <= utility_cost(r)
            and privacy_cost(o) <= privacy_cost(r)
            and (utility_cost(o) < utility_cost(r) or privacy_cost(o) < privacy_cost(r))
            for o in judged
        )
    ok = [r for r in rows if r["met"]]
    # ε is one scale across the λ grid of the noise family (as Xu et al. compare it); across other
    # mechanisms the measured re-identification ranks them, where it was measured.
    names = {r["mechanism"] for r in rows}
    one_type = (
        len(names) == 1 or names <= {"laplace", "mahalanobis"} or all(r["reidentification"] is None for r in rows)
    )
    best = min(
        ok,
        key=lambda r: (
            r["epsilon"] if one_type else privacy_cost(r),
            r["reidentification"] if r["reidentification"] is not None else 0.0,
            r["epsilon"],
            -(r["lambda"] if r["lambda"] is not None else -1.0),
        ),
        default=None,
    )
    keys = ("epsilon", "lambda", "setting", "mechanism")
    return {
        "rows": rows,
        "best": None if best is None else {k: best[k] for k in keys},
        "max_utility_loss": max_utility_loss,
        "max_reidentification": max_reidentification,
    }
