"""The commands on the local engine (``--engine local``): their runners (``dpspark.run``) over a
``LocalBackend``, no JVM and no pyspark. privacy-stats and privacy-risk run here so far; the others need Spark.

The input is read with pyarrow (``dpspark.run.inputs``: a local Parquet file or directory, or a CSV file, up to
1 GiB); the report is committed exactly as on Spark (``dpspark.spark.reports.ReportOutput`` over the local file
system: the output checked before any work, a hidden stage, the manifest last, the stage moved into place under
the output's lock), so a failed run leaves nothing behind.

``engine_for(command, config)`` chooses: ``--engine spark`` or ``local`` as given; ``auto`` (the default) runs
Spark where pyspark imports and Java is found or a master or Spark Connect URL is given, else the local engine
where the command has one.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import time
from typing import Any

import pyarrow as pa

from dpspark.config import RiskConfig, StatsConfig
from dpspark.errors import ConfigError, InputDataError
from dpspark.run import risk as run_risk
from dpspark.run import stats as run_stats
from dpspark.run.inputs import check_local, read_local
from dpspark.run.local import LocalBackend
from dpspark.spark.reports import measure_output

LOCAL_COMMANDS = ("privacy-stats", "privacy-risk")


def spark_available() -> bool:
    """pyspark imports and a Java runtime is found (``JAVA_HOME`` or ``java`` on the PATH)."""
    try:
        if importlib.util.find_spec("pyspark") is None:
            return False
    except (ImportError, ValueError):  # a broken or blocked install is no Spark either
        return False
    home = os.environ.get("JAVA_HOME")
    return bool(home and os.path.exists(os.path.join(home, "bin", "java"))) or shutil.which("java") is not None


def engine_for(command: str, config: Any) -> str:
    """ "spark" or "local" for ``command`` with ``config``'s ``engine`` (see the module docstring)."""
    engine = getattr(config, "engine", "spark")
    if engine == "local" or (engine == "auto" and not _spark_wanted(config)):
        if command not in LOCAL_COMMANDS:
            missing = "" if engine == "local" else " (pyspark or Java is missing here)"
            raise ConfigError(
                f"{command} runs on Spark only{missing}: the local engine runs {' and '.join(LOCAL_COMMANDS)}; "
                "pip install 'dpspark[spark]' and install Java 17, or run it where Spark is"
            )
        if config.master or config.remote:
            raise ConfigError("--engine local runs in this process: leave out --master and --remote")
        return "local"
    return "spark"


def _spark_wanted(config: Any) -> bool:
    return bool(config.master or config.remote) or spark_available()


def run_privacy_stats_local(config: StatsConfig) -> dict[str, Any]:
    """privacy-stats on the local engine; returns the manifest."""
    started = time.time()
    if not config.output:
        raise ConfigError("output: give the directory for the statistics (--output DIR)")
    check_local(config.corpus)
    with measure_output(None, config, "privacy-stats") as out:
        with LocalBackend(out.run_id) as backend:
            manifest = {**run_stats.measure(backend, config, out.local, started), "engine": "local"}
        out.commit(manifest)
    return manifest


def run_privacy_risk_local(config: RiskConfig) -> dict[str, Any]:
    """privacy-risk on the local engine; returns the manifest."""
    started = time.time()
    if not config.input:
        raise ConfigError("input: give the corpus (--input PATH)")
    check_local(config.input)
    with measure_output(None, config, "privacy-risk") as out:
        t0 = time.perf_counter()
        table = read_local(config.input, [config.text_column])
        kind = table.schema.field(config.text_column).type
        if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
            raise InputDataError(
                f"text column {config.text_column!r} has type {kind}, expected string: cast it, or name the text "
                "column with --text-column"
            )
        with LocalBackend(out.run_id) as backend:
            manifest = {**run_risk.assess(backend, config, table, out.local, started, t0), "engine": "local"}
        out.commit(manifest)
    return manifest


def privacy_stats(config: StatsConfig) -> dict[str, Any]:
    """privacy-stats on the engine ``engine_for`` chooses (the CLI's and the Python API's one entry)."""
    if engine_for("privacy-stats", config) == "local":
        return run_privacy_stats_local(config)
    from dpspark.spark.stats import run_privacy_stats  # pyspark: only where Spark runs it

    return run_privacy_stats(config)


def privacy_risk(config: RiskConfig, df: Any = None) -> dict[str, Any]:
    """privacy-risk on the engine ``engine_for`` chooses; a DataFrame ``df`` is Spark's."""
    if df is None and engine_for("privacy-risk", config) == "local":
        return run_privacy_risk_local(config)
    from dpspark.spark.risk import run_privacy_risk  # pyspark: only where Spark runs it

    return run_privacy_risk(config, df=df)
