"""``dpspark privacy-risk`` over Spark: the corpus read and its text column checked, then the runner
(``dpspark.run.risk``) over a ``SparkBackend``, its files committed all-or-nothing (``dpspark.spark.reports``);
``dpspark.run.risk.risk_rows`` measures a grid without writing anything (for ``compare``)."""

from __future__ import annotations

import logging
import time

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from dpspark.config import RiskConfig
from dpspark.errors import ConfigError, InputDataError
from dpspark.run import risk as run_risk
from dpspark.spark import io
from dpspark.spark.perturb import check_unit_column
from dpspark.spark.reports import measure_output
from dpspark.spark.session import get_session
from dpspark.spark.sparkbackend import SparkBackend

log = logging.getLogger("dpspark")


def check_text_column(df: DataFrame, column: str) -> None:
    fields = {f.name: f.dataType for f in df.schema.fields}
    if column not in fields:
        raise InputDataError(
            f"text column {column!r} is not in the input; available columns: {', '.join(fields)} (--text-column)"
        )
    if not isinstance(fields[column], T.StringType):
        raise InputDataError(
            f"text column {column!r} has type {fields[column].simpleString()}, expected string: cast it, or name the "
            "text column with --text-column"
        )


def run_privacy_risk(config: RiskConfig, spark: SparkSession | None = None, df: DataFrame | None = None) -> dict:
    """Estimate the re-identification risk of ``config.input`` (or ``df``); write tables, plot, manifest."""
    started = time.time()
    if df is None and not config.input:
        raise ConfigError("input: give the corpus (--input PATH)")
    spark = spark or (df.sparkSession if df is not None else get_session(config.master, remote=config.remote))
    with measure_output(spark, config, "privacy-risk") as out:
        t0 = time.perf_counter()
        if df is None:
            df = io.read_input(spark, out.fs, out.paths.input_given or out.paths.input, None)
        check_text_column(df, config.text_column)
        check_unit_column(df, config.unit)  # a column: unit's ids: there, and one value per row
        manifest = {
            **run_risk.assess(SparkBackend(spark, out.run_id), config, df, out.local, started, t0),
            "engine": "spark",
        }
        out.commit(manifest)
    log.info("privacy-risk finished in %.1f s", manifest["duration_s"])
    return manifest
