"""SparkSession set-up for dpspark jobs."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from pyspark.sql import SparkSession

from dpspark.errors import ConfigError

# Spark's task slots already use every core: one BLAS thread per Python worker.
_SINGLE_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
# A local JVM is driver and executor of a few jobs whose work is in Python: HotSpot's
# optimising compiler (C2) spent 8-9 of the JVM's 20 CPU seconds in `make demo` and in a
# 300,000-token run, CPU taken from the Python workers on a small machine. C1 alone compiles
# what the JVM does here (planning, Parquet, Arrow) well enough. SPARK_SUBMIT_OPTS comes
# first on the launcher's java command line: the user's own JVM options still win.
_LOCAL_JVM_OPTS = "-XX:TieredStopAtLevel=1"
# On a small machine G1's concurrent and parallel GC threads also take cores from the Python
# workers, while the local JVM's heap work (Arrow batches, Parquet pages) is light: the serial
# collector made `make demo`'s perturb-and-write 6% shorter (2.87 -> 2.70 s, medians of 6,
# 2-core Zen 5) and a 1,000,000-token local[2] run 1.5% faster. Above 4 cores (not measured)
# G1's parallel collection is left to serve many tasks at once.
_SMALL_MACHINE_CORES = 4


def local_jvm_flags() -> str:
    """The JVM flags of a local session dpspark starts (before its logging settings)."""
    small = (os.cpu_count() or 1) <= _SMALL_MACHINE_CORES
    return _LOCAL_JVM_OPTS + (" -XX:+UseSerialGC" if small else "")


# The local JVM's logging (log4j2-local.properties): warnings, without the notices that say nothing
# to act on locally; errors only when the dpspark logger is at ERROR (--quiet) as the session starts.
_LOG4J = Path(__file__).with_name("log4j2-local.properties")


def _local_jvm_opts() -> str:
    quiet = logging.getLogger("dpspark").getEffectiveLevel() >= logging.ERROR
    level = "error" if quiet else "warn"
    return f"{local_jvm_flags()} -Dlog4j2.configurationFile={_LOG4J.as_uri()} -Ddpspark.jvm.log.level={level}"


def get_session(master: str | None = None, batch_rows: int = 10_000, remote: str | None = None) -> SparkSession:
    """Return the active session, or start one (``local[*]`` unless ``master`` says otherwise).

    Workers started by a fresh local JVM inherit this process's environment, so the
    single-thread BLAS settings are put there and in ``spark.executorEnv`` (clusters).
    """
    if remote:  # Spark Connect (sc://host:port): the server owns executors and their environment
        try:
            session = SparkSession.builder.remote(remote).getOrCreate()
        except ImportError as exc:  # pyspark checks the Connect client's packages first
            raise ConfigError(
                f"remote {remote} needs the Spark Connect client ({exc}): pip install 'dpspark[connect]'"
            ) from None
        session.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(batch_rows))
        return session
    active = SparkSession.getActiveSession()
    if active is not None and master is None:
        active.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(batch_rows))
        return active
    for k, v in _SINGLE_THREAD.items():
        os.environ.setdefault(k, v)
    if (master or "local").startswith("local"):
        os.environ.setdefault("SPARK_SUBMIT_OPTS", _local_jvm_opts())
        # One JVM talks to itself: bind to loopback, and Spark does not warn (without --quiet)
        # that the host name resolves to a loopback address and it picked another interface.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Local workers run this interpreter (the one with dpspark installed) unless told otherwise.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName("dpspark")
    # Under spark-submit the JVM is already up (PYSPARK_GATEWAY_PORT) and its --master wins.
    if master or "PYSPARK_GATEWAY_PORT" not in os.environ:
        builder = builder.master(master or "local[*]")
    builder = builder.config("spark.sql.execution.arrow.maxRecordsPerBatch", str(batch_rows))
    builder = builder.config("spark.ui.showConsoleProgress", "false")
    # Raw rows are never shuffled by dpspark, but anything Spark spills or shuffles to
    # spark.local.dir (other work in the session, broadcast blocks) is encrypted on disk.
    builder = builder.config("spark.io.encryption.enabled", "true")
    for k, v in _SINGLE_THREAD.items():
        builder = builder.config(f"spark.executorEnv.{k}", v)
    return builder.getOrCreate()


def is_connect(spark: SparkSession) -> bool:
    """True for a Spark Connect session (Databricks serverless): no SparkContext there."""
    return type(spark).__module__.startswith("pyspark.sql.connect")
