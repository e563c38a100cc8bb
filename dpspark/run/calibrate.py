"""``calibrate``'s reading and judging, no pyspark here: the tables of earlier outputs read through the
session's file system (a ``dpspark.run.backend.Files``) and checked, the Nw/Sw calibration (Xu et al. 2020,
§5.1) and the joint one (§6). ``dpspark.spark.calibrate`` runs them with the session's file system and
writes the calibration."""

from __future__ import annotations

import json
import math

import pyarrow as pa
import pyarrow.parquet as pq

from dpspark import report
from dpspark.config import CalibrateConfig
from dpspark.errors import ConfigError, InputDataError
from dpspark.mechanisms import LEGACY_COLUMN, SETTING_COLUMNS, series_of_row
from dpspark.reserved import MANIFEST
from dpspark.run.backend import Files
from dpspark.stats import Bounds, joint_calibrate
from dpspark.stats import calibrate as calibrate_table


def nw_sw_bounds(config: CalibrateConfig) -> Bounds | None:
    """The Nw/Sw bounds, or None for a joint calibration without them. Alone, Nw/Sw keeps its
    default bound (max Nw ≤ 0.5·K)."""
    if not (config.nw_sw_bounds or not config.joint):
        return None
    return Bounds(
        max_nw_fraction=config.max_nw_fraction
        if config.max_nw_fraction is not None or config.min_sw is not None
        else 0.5,
        min_sw=config.min_sw,
        percentile=config.percentile,
    )


def check_min_sw(min_sw: float | None, runs: list[int], source: str) -> None:
    """Refuse a --min-sw no statistic can meet: Sw counts the distinct outputs among a word's K runs,
    so it is at most K (the flag keeps its meaning, an absolute count; --max-nw-fraction is a share)."""
    if min_sw is None or not runs or min_sw <= max(runs):
        return
    k = max(runs)
    raise ConfigError(
        f"min_sw {min_sw:g} can never be met: Sw counts the distinct words among the K = {k} runs of a word "
        f"({source}), so it is at most {k}; give --min-sw {k} or less (Sw = K: every run a different word), "
        f"or statistics with --runs {math.ceil(min_sw)} or more"
    )


def read_table(
    fs: Files,
    directory: str,
    name: str,
    flag: str,
    producer: str,
    columns: tuple[str, ...],
    finite: tuple[str, ...],
    naming: tuple[str, ...] = SETTING_COLUMNS,
) -> pa.Table:
    """The table ``name`` of a ``producer`` output (given as ``flag``), read through the session's
    file system and checked: a readable Parquet file with ``columns`` and one of the ``naming``
    columns that each row's setting is read from, at least one row, and finite ``finite`` columns on every row
    measured at a grid point (evaluate-utility's baseline row has no setting or ε)."""
    from dpspark.utility import BASELINE

    path = f"{directory.rstrip('/')}/{name}"
    fix = f"{flag} must be a {producer} output directory"
    if not fs.exists(path) or fs.is_dir(path):
        raise InputDataError(f"{path} not found: {fix}")
    try:
        table = pq.read_table(pa.BufferReader(fs.read_bytes(path)))
    except pa.ArrowException as exc:
        raise InputDataError(f"{path} cannot be read as Parquet ({exc}): {fix}") from None
    missing = [col for col in columns if col not in table.column_names]
    if not any(col in table.column_names for col in naming):
        missing.append(" or ".join(naming))
    if missing:
        raise InputDataError(f"{path} lacks the column(s) {', '.join(missing)}: {fix}, as {producer} writes it")
    if table.num_rows == 0:
        raise InputDataError(f"{path} has no rows: rerun {producer} and give its output directory as {flag}")
    keyed = table.select([col for col in ("mode", *finite) if col in table.column_names]).to_pylist()
    bad = sum(
        r.get("mode") != BASELINE and not all(isinstance(r[k], int | float) and math.isfinite(r[k]) for k in finite)
        for r in keyed
    )
    if bad:
        raise InputDataError(f"{path} has {bad} row(s) without a finite {'/'.join(finite)}: {fix}")
    return table


def unit_of(fs: Files, directory: str) -> str:
    """The privacy unit an output's grid is stated in, from its manifest: its kind and allocation (``document,
    scale``), or ``token`` (a manifest without the field was written before units, per token)."""
    path = f"{directory.rstrip('/')}/{MANIFEST}"
    try:
        manifest = json.loads(fs.read_bytes(path)) if fs.exists(path) else {}
    except ValueError:
        manifest = {}
    kind = (manifest.get("privacy_unit") or {}).get("kind", "token")
    alloc = manifest.get("allocation") or {}
    return kind if kind == "token" else f"{kind}, " + (f"cap:{alloc['cap']}" if alloc.get("cap") else "scale")


def check_same_unit(fs: Files, c: CalibrateConfig, sources: list[str]) -> None:
    """Refuse a joint calibration over outputs whose ε are not one scale: a grid of budgets E per document
    beside one of ε per token, or two allocations of E."""
    dirs = {"utility": c.utility, "risk": c.risk, "stats": c.stats or c.output}
    seen = {s: unit_of(fs, str(dirs[s])) for s in sources}
    if len(set(seen.values())) > 1:
        listed = ", ".join(f"--{s} per {u}" for s, u in seen.items())
        raise InputDataError(
            f"the outputs state their ε in different privacy units ({listed}): their ε are not one scale; rerun "
            "them with the same --privacy-unit and --allocation"
        )


def _nw_sw(fs: Files, stats_dir: str, bounds: Bounds, min_sw: float | None) -> tuple[dict, str]:
    """The Nw/Sw calibration of the statistics in ``stats_dir`` and its bounds in words."""
    columns, finite = ("epsilon", "nw", "sw", "runs"), ("epsilon", "runs")
    naming = ("mechanism", LEGACY_COLUMN)  # report.series_of: the mechanism and its axes
    per_word = read_table(fs, stats_dir, "per_word.parquet", "--stats", "privacy-stats", columns, finite, naming)
    table = report.grid(per_word)
    check_min_sw(min_sw, [k for _, _, k in table.values()], f"read from {stats_dir.rstrip('/')}/per_word.parquet")
    shown = "worst case" if bounds.percentile == 100 else f"{bounds.percentile:g}th percentile"
    text = f"{shown}: " + ", ".join(
        t
        for t in (
            None if bounds.max_nw_fraction is None else f"Nw <= {bounds.max_nw_fraction:g}·K",
            None if bounds.min_sw is None else f"Sw >= {bounds.min_sw:g}",
        )
        if t
    )
    unit = unit_of(fs, stats_dir)
    if unit != "token":  # the tables' ε are budgets: say so where the bounds are stated
        text += f"; ε is each {unit.split(',')[0]}'s budget E ({unit}), measured at the median one's per-token share"
    return calibrate_table(table, bounds), text


def _joint(fs: Files, c: CalibrateConfig, nw_result: dict | None, nw_text: str) -> tuple[dict, str]:
    """Utility / re-identification bounds (with the Nw/Sw ones when given): Xu et al. §6, over every
    setting (mechanism and its own parameters) and ε that each source measured."""
    from dpspark import utility

    points: dict[tuple[float, str], dict] = {}
    sources = []
    if c.utility:
        columns = ("mode", "epsilon")
        table = read_table(fs, c.utility, "summary.parquet", "--utility", "evaluate-utility", columns, ("epsilon",))
        summary = table.to_pylist()
        if sum(s["mode"] == utility.BASELINE for s in summary) != 1:
            raise InputDataError(
                f"{c.utility.rstrip('/')}/summary.parquet needs exactly one {utility.BASELINE} row: --utility must "
                "be an evaluate-utility output directory"
            )
        if f"{c.utility_metric}_mean" not in summary[0]:
            names = sorted(k.removesuffix("_mean") for k in summary[0] if k.endswith("_mean"))
            raise ConfigError(f"utility_metric {c.utility_metric!r} is not in {c.utility}; one of {', '.join(names)}")
        for key, loss in utility.utility_loss_by_setting(summary, c.utility_metric).items():
            points.setdefault(key, {})["utility_loss"] = loss
        sources.append("utility")
    if c.risk:
        columns = ("epsilon", "top1")
        risk = read_table(fs, c.risk, "risk.parquet", "--risk", "privacy-risk", columns, ("epsilon",))
        for r in risk.to_pylist():
            points.setdefault((r["epsilon"], series_of_row(r)), {})["reidentification"] = r["top1"]
        sources.append("risk")
    if nw_result is not None:
        for row in nw_result["per_setting"]:
            for chk in row["checked"]:
                points.setdefault((chk["epsilon"], row["setting"]), {})["nw_sw_met"] = chk["met"]
        sources.append("stats")
    check_same_unit(fs, c, sources)
    # Only the settings and ε that every source measured can be judged.
    need = {"utility": "utility_loss", "risk": "reidentification", "stats": "nw_sw_met"}
    points = {k: p for k, p in points.items() if all(need[s] in p for s in sources)}
    if not points:
        raise InputDataError(
            f"the {', '.join(sources)} outputs share no setting and ε: run them over the same grid (--mechanisms, "
            "--epsilons, --grid)"
        )
    result = joint_calibrate(points, c.max_utility_loss, c.max_reidentification)
    parts = [nw_text] if nw_text else []
    if c.max_utility_loss is not None:
        parts.append(f"{c.utility_metric} loss <= {c.max_utility_loss:g} (worse of train-time and test-time)")
    if c.max_reidentification is not None:
        parts.append(f"top-1 re-identification <= {c.max_reidentification:g}")
    return result, "; ".join(parts)
