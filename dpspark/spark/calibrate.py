"""``calibrate``: the ε (and setting) that meet the user's bounds, read from earlier outputs.

One function for the ``dpspark calibrate`` command, the notebooks and the Python API
(``dpspark.calibrate``). Two calibrations, after Xu et al. (2020):

* **Nw/Sw bounds** (§5.1, Tables 1–4): for every setting of a privacy-stats output
  (``--stats``, or statistics this call computes into ``output``) the largest ε of the grid
  whose Nw (or Sw) statistic meets the bounds (``dpspark.stats.calibrate``), and the setting
  admitting the largest ε. ``calibration.md`` and ``calibration.json`` are written beside the
  statistics they describe.
* **joint bounds** (§6): a utility-loss bound (an evaluate-utility output) and/or a
  re-identification bound (a privacy-risk output), with the Nw/Sw bounds when given: the most
  private (ε, setting) that every source measured and that meets all of them
  (``dpspark.stats.joint_calibrate``). ``calibration.md``, ``calibration.json``,
  ``frontier.csv`` and ``frontier.png`` go to a new output directory with its manifest, or
  beside the statistics when this call computed them.

Every file is read and written through the session's file system (``reports.ReportOutput``):
a path means what it means to Spark (dbfs:/ on Databricks, HDFS on YARN), as for the commands
that wrote the outputs read here. Files beside the statistics are written under that output's
lock, each atomically, after checking that the statistics are still the ones read.
"""

from __future__ import annotations

import math
import time
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

import dpspark
from dpspark import report
from dpspark.config import CalibrateConfig, StatsConfig
from dpspark.errors import ConfigError, InputDataError
from dpspark.mechanisms import LEGACY_COLUMN, SETTING_COLUMNS, series_of_row
from dpspark.outputs import to_json
from dpspark.spark.fs import FileSystem
from dpspark.spark.reports import ReportOutput
from dpspark.spark.session import get_session
from dpspark.stats import Bounds, joint_calibrate
from dpspark.stats import calibrate as calibrate_table

# Every file a calibration writes, in the order it writes them: calibration.json, the result
# of record, last. Beside statistics, the ones a calibration does not write are removed (an
# earlier joint calibration's frontier), so the files there are always one calibration's.
FILES = ("frontier.csv", "frontier.png", "calibration.md", "calibration.json")
STATS_FIX = "--stats must be a privacy-stats output directory"


def calibrate(
    stats: str | None = None,
    *,
    output: str | None = None,
    max_nw_fraction: float | None = None,
    min_sw: float | None = None,
    percentile: float = 100.0,
    utility: str | None = None,
    risk: str | None = None,
    max_utility_loss: float | None = None,
    utility_metric: str = "accuracy",
    max_reidentification: float | None = None,
    mode: str = "error",
    spark: SparkSession | None = None,
    **settings: Any,
) -> dict[str, Any]:
    """The ε (with utility or risk bounds: the (ε, setting)) that meets the bounds; writes the calibration.

    The same as ``dpspark calibrate``; the settings are ``dpspark.config.CalibrateConfig``'s
    and are checked by it.

    Args:
        stats: a privacy-stats output to read; the calibration files are written into it. Without
            it (and with Nw/Sw bounds) the statistics are computed first into ``output``, with
            the privacy-stats settings given in ``settings`` (mechanisms, epsilons, grid, runs, words, ...).
        output: with utility or risk bounds and ``stats``, or without Nw/Sw bounds: the new
            directory of the calibration (``calibration.md/json``, ``frontier.csv/png``).
        max_nw_fraction: bound Nw ≤ fraction·K (default 0.5 when no Nw/Sw bound is given and no
            utility or risk bound either).
        min_sw: bound Sw ≥ this count of distinct outputs among the K runs.
        percentile: the percentile over words of the Nw/Sw statistics (100: the worst case).
        utility: an evaluate-utility output (needed by ``max_utility_loss``).
        risk: a privacy-risk output (needed by ``max_reidentification``).
        max_utility_loss: bound on the baseline's ``utility_metric`` minus the perturbed one's
            (the worse of train-time and test-time).
        utility_metric: the metric of that bound ("accuracy").
        max_reidentification: bound on the share of corpus tokens recovered top-1.
        mode: ``"error"`` refuses an existing ``output``; ``"overwrite"`` replaces an earlier
            dpspark output there.
        spark: the session (default: the active one, or a new local one).
        **settings: other ``CalibrateConfig`` fields, spelled as in YAML.

    Returns:
        What ``calibration.json`` holds: ``bounds`` (in words) and, with Nw/Sw bounds only,
        ``per_setting`` (per setting its mechanism and parameters, largest ε meeting the bounds or
        None, the statistics checked) and ``best`` (its setting, mechanism and ε), or, with utility
        or risk bounds, ``rows`` (one per (ε, setting): the figures, ``met``, ``frontier``) and
        ``best``. ``best`` is None when nothing meets the bounds.

    Raises:
        ConfigError: a setting is invalid, or a bound can never be met.
        InputDataError: an output read is missing, malformed, or not the one its flag names.
        OutputError: the calibration cannot be written (an existing ``output`` under
            ``mode="error"``, statistics replaced while this call ran).
    """
    given = {k: v for k, v in locals().items() if k not in ("spark", "settings") and v is not None}
    return run_calibrate(CalibrateConfig.parse({**given, **settings}), spark)


def run_calibrate(config: CalibrateConfig, spark: SparkSession | None = None) -> dict[str, Any]:
    """Execute ``dpspark calibrate`` with its validated settings; see ``calibrate``."""
    started = time.time()
    bounds = nw_sw_bounds(config)
    computed = bounds is not None and config.stats is None
    if computed:
        check_min_sw(config.min_sw, [config.runs], "set by --runs")  # before any Spark work
    elif config.joint and not config.output:
        raise ConfigError("output: give the directory for the calibration (--output DIR)")
    spark = spark or get_session(config.master, remote=config.remote)
    stats_dir = config.stats
    if computed:
        from dpspark.spark.stats import run_privacy_stats

        fields = set(StatsConfig.fields())
        run_privacy_stats(StatsConfig.parse({k: v for k, v in config.dict().items() if k in fields}), spark)
        stats_dir = config.output
    if config.joint and not computed:
        sources = [s for s in (stats_dir, config.utility, config.risk) if s]
        out = ReportOutput(spark, None, config.output, config.mode, "calibration", sources, "calibrate")
    else:
        out = ReportOutput.beside(spark, stats_dir, "calibration", FILES, STATS_FIX)
    with out:
        result, text = None, ""
        if bounds is not None:
            result, text = _nw_sw(out.fs, stats_dir, bounds, config.min_sw)
        if config.joint:
            result, text = _joint(out.fs, config, result, text)
            md = report.frontier_md(result, text)
            written = [
                report.write_frontier_csv(result, out.local),
                report.write_frontier_plot(result, out.local, config.max_utility_loss, config.max_reidentification),
            ]
        else:
            md, written = report.calibration_md(result, text), []
        calibration = {"bounds": text, **result}
        (out.local / "calibration.md").write_text(md, encoding="utf-8")
        (out.local / "calibration.json").write_text(to_json(calibration), encoding="utf-8")
        if not out.is_new:  # beside the statistics: their manifest is theirs
            out.commit()
        else:
            out.commit(
                {
                    "dpspark_version": dpspark.__version__,
                    "command": "calibrate",
                    "run_id": out.run_id,
                    "started_at": datetime.fromtimestamp(started, timezone.utc).isoformat(),
                    "stats": stats_dir,
                    "utility": config.utility,
                    "risk": config.risk,
                    "bounds": text,
                    "best": result["best"],
                    "files": [*written, "calibration.md", "calibration.json"],
                    "duration_s": round(time.time() - started, 3),
                    "status": "succeeded",  # the last key: a reader that sees it sees the whole manifest
                }
            )
    return calibration


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
    fs: FileSystem,
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


def _nw_sw(fs: FileSystem, stats_dir: str, bounds: Bounds, min_sw: float | None) -> tuple[dict, str]:
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
    return calibrate_table(table, bounds), text


def _joint(fs: FileSystem, c: CalibrateConfig, nw_result: dict | None, nw_text: str) -> tuple[dict, str]:
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


__all__ = ["FILES", "calibrate", "run_calibrate"]
