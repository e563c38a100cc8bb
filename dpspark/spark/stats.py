"""``dpspark privacy-stats`` over Spark: the runner (``dpspark.run.stats``) over a ``SparkBackend``, whose
``nw_sw`` folds the Nw/Sw combiner over tasks (``dpspark.spark.backend.spark_per_word``: ``reduceByKey``,
or DataFrames on Spark Connect); the tables and plots are made on the driver in a scratch directory, then
committed through the session's file system like every report (``reports.ReportOutput``: hidden stage,
manifest last)."""

from __future__ import annotations

import json
import logging
import time

from pyspark.sql import SparkSession

from dpspark.config import StatsConfig
from dpspark.errors import ConfigError
from dpspark.run import stats as run_stats
from dpspark.spark.reports import measure_output
from dpspark.spark.session import get_session
from dpspark.spark.sparkbackend import SparkBackend

log = logging.getLogger("dpspark")


def run_privacy_stats(config: StatsConfig, spark: SparkSession | None = None) -> dict:
    """Compute Nw/Sw for every (setting, word); write per_word.parquet, summaries, plots, manifest."""
    started = time.time()
    if not config.output:
        raise ConfigError("output: give the directory for the statistics (--output DIR)")
    spark = spark or get_session(config.master, remote=config.remote)
    with measure_output(spark, config, "privacy-stats") as out:
        manifest = {**run_stats.measure(SparkBackend(spark, out.run_id), config, out.local, started), "engine": "spark"}
        out.commit(manifest)
    event = {"event": "privacy_stats_finished", "draws": manifest["draws"], "duration_s": manifest["duration_s"]}
    log.info(json.dumps(event))
    return manifest
