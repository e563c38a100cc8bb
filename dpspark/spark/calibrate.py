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

On the local engine (``--engine local``, or ``auto`` without pyspark or Java: ``dpspark.local.engine_for``)
the same files are read and written through this machine's file system, with no JVM: only local paths, and
statistics computed here by privacy-stats' local engine. No pyspark import at the module's top: the local
engine needs none.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import dpspark
from dpspark import local, report
from dpspark.config import CalibrateConfig, StatsConfig
from dpspark.errors import ConfigError
from dpspark.outputs import to_json
from dpspark.run.calibrate import _joint, _nw_sw, check_min_sw, nw_sw_bounds
from dpspark.run.inputs import check_local
from dpspark.spark.reports import ReportOutput

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

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
        spark: the session (default: the active one, or a new local one; without one, ``engine="local"``,
            or ``"auto"`` where pyspark or Java is missing, reads and writes local paths in this process).
        **settings: other ``CalibrateConfig`` fields, spelled as in YAML (``engine``, ``master``, ...).

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
    engine = "spark" if spark is not None else local.engine_for("calibrate", config)
    if engine == "local":
        for path in (config.stats, config.utility, config.risk, config.output):
            check_local(path)
    else:
        from dpspark.spark.session import get_session  # pyspark: only where Spark runs it

        spark = spark or get_session(config.master, remote=config.remote)
    stats_dir = config.stats
    if computed:
        fields = set(StatsConfig.fields())
        stats = StatsConfig.parse({k: v for k, v in config.dict().items() if k in fields})
        if engine == "local":
            local.run_privacy_stats_local(stats)
        else:
            from dpspark.spark.stats import run_privacy_stats  # pyspark: only where Spark runs it

            run_privacy_stats(stats, spark)
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
                    "engine": engine,
                    "duration_s": round(time.time() - started, 3),
                    "status": "succeeded",  # the last key: a reader that sees it sees the whole manifest
                }
            )
    return calibration


__all__ = ["FILES", "calibrate", "run_calibrate"]
