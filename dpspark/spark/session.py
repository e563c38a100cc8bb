"""SparkSession set-up for dpspark jobs."""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pyspark.sql import SparkSession

from dpspark import jvm_cache
from dpspark.errors import ConfigError
from dpspark.spark.fs import is_connect

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
# to act on locally; nothing at all when the dpspark logger is at ERROR (--quiet) as the session starts.
# Not even errors: a failure dpspark explains ends the run with its one sentence (a full disk wrote 386
# lines of ERROR records and Java frames before it), and any other reaches the user as the exception
# that ends the run, Spark's message and stack in it.
_LOG4J = Path(__file__).with_name("log4j2-local.properties")


# MLlib's BLAS (dev.ludovic.netlib) first tries a native libblas.so.3 through JNI; where none is
# installed, the JNI library's load hook writes "netlib-blas: JNI_OnLoad: dlopen(libblas.so.3)
# failed" to the process's stderr itself (no logger: no log level silences it) before netlib falls
# back to its Java BLAS. Where that library cannot be found, dpspark tells netlib not to try.
_NETLIB_NATIVE = "dev.ludovic.netlib.blas.allowNative"


def native_blas_missing() -> bool:
    """True on Linux where no ``libblas.so.*`` can be found (netlib's native attempt would fail)."""
    if not sys.platform.startswith("linux"):
        return False  # other systems' BLAS names and messages were not looked at: left alone
    from ctypes.util import find_library

    return find_library("blas") is None


def _local_jvm_opts() -> str:
    quiet = logging.getLogger("dpspark").getEffectiveLevel() >= logging.ERROR
    level = "off" if quiet else "warn"
    blas = f" -D{_NETLIB_NATIVE}=false" if native_blas_missing() else ""
    return f"{local_jvm_flags()}{blas} -Dlog4j2.configurationFile={_LOG4J.as_uri()} -Ddpspark.jvm.log.level={level}"


# Spark 4's launcher starts the JVM with --add-modules=jdk.incubator.vector, and the JVM then writes
# "WARNING: Using incubator modules: jdk.incubator.vector" to its stderr as it starts: no option or log
# level silences it. Under --quiet the JVM dpspark starts writes to a pipe whose other lines a thread
# copies to this process's stderr.
_INCUBATOR = b"WARNING: Using incubator modules"


@contextmanager
def _without_incubator_notice() -> Iterator[threading.Event]:
    """Start a JVM inside (under --quiet): its stderr (fd 2, inherited) is a pipe forwarded without the
    incubator notice while it starts, and dropped once the caller sets the event it is given (the session
    is up). The JVM's log4j2 logs nothing then; what it still prints is written by the JVM itself, not
    through log4j2: Scala's reporter of a dying JVM's rejected futures, with their stack frames, after a
    task's OutOfMemoryError has ended it. dpspark's one line says what happened (``dpspark.spark.memory``),
    and a failure it cannot explain ends with the exception that carries Spark's message. This process's
    own stderr is put back as it was when the block ends."""
    read_fd, write_fd = os.pipe()
    real = os.dup(2)
    started = threading.Event()

    def forward() -> None:
        with os.fdopen(read_fd, "rb") as lines:
            for line in lines:
                if not started.is_set() and not line.startswith(_INCUBATOR):
                    os.write(real, line)

    threading.Thread(target=forward, name="dpspark-jvm-stderr", daemon=True).start()
    sys.stderr.flush()
    os.dup2(write_fd, 2)
    try:
        yield started
    finally:
        sys.stderr.flush()
        os.dup2(real, 2)
        os.close(write_fd)


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
    if "PYSPARK_GATEWAY_PORT" in os.environ:  # spark-submit's JVM is up already
        return _quiet_when_lost(builder.getOrCreate())
    cache = _class_cache() if (master or "local").startswith("local") else ""
    try:
        return _start(builder, cache)
    except Exception as exc:  # a JVM that ended before it said its port: pyspark's one error for it
        if "gateway" not in str(exc).lower() or not jvm_cache.forget(cache):
            raise
        logging.getLogger("dpspark").debug("the JVM did not start with its class cache: started again without it")
        return _start(builder, _class_cache())  # (and it writes a new one)


def _class_cache() -> str:
    """``jvm_cache.flags`` for this JVM; a cache that cannot be read or written is no reason to fail a start."""
    try:
        return jvm_cache.flags(local_jvm_flags())
    except Exception as exc:  # noqa: BLE001 - the JVM then starts as without a cache
        logging.getLogger("dpspark").debug("JVM class cache not used: %s", exc)
        return ""


def _start(builder: SparkSession.Builder, cache: str) -> SparkSession:
    """Start dpspark's own JVM with ``cache``'s options (``jvm_cache.flags``) for its launch only: the
    processes this one starts later (a test's CLI run, a Connect server) choose their own."""
    before = os.environ.get("SPARK_SUBMIT_OPTS")
    if cache:
        os.environ["SPARK_SUBMIT_OPTS"] = f"{before} {cache}" if before else cache
    try:
        if logging.getLogger("dpspark").getEffectiveLevel() >= logging.ERROR:  # --quiet
            with _without_incubator_notice() as started:
                session = builder.getOrCreate()
                started.set()
                return _quiet_when_lost(session)
        return _quiet_when_lost(builder.getOrCreate())
    finally:
        if before is None:
            os.environ.pop("SPARK_SUBMIT_OPTS", None)
        else:
            os.environ["SPARK_SUBMIT_OPTS"] = before


def _quiet_when_lost(session: SparkSession) -> SparkSession:
    """A session whose pyspark accumulator server prints nothing when the JVM dies: in local mode a task's
    OutOfMemoryError ends the JVM, and the server's thread printed an EOFError traceback beside the
    command's own one-line error (``dpspark.spark.memory``), which says what happened."""
    server = getattr(session.sparkContext, "_accumulatorServer", None)
    if server is not None:
        server.handle_error = lambda request, client_address: None
    return session


# --- sessions dpspark is handed ------------------------------------------------------------------
# A session dpspark did not start (a notebook's, a script's, pyspark's shell) logs with its own
# log4j2 configuration, Spark's defaults as a rule. Around its own jobs dpspark drops there what
# log4j2-local.properties drops in the JVMs it starts, and puts the JVM back as it was after:
# - DAGScheduler's "Broadcasting large task binary" warning (that one message, by a RegexFilter:
#   the logger's other lines stay): evaluate-utility's TF-IDF pipeline carries the IDF weights
#   (2^16 doubles, 512 KiB) in every task's lineage and LogisticRegression's gradient sum (another
#   512 KiB) in every iteration's closure, so every iteration of every model of a grid warns that
#   its 1.1 MiB task binary is broadcast (as every task binary is): thousands of lines;
# - netlib's native BLAS attempt where no libblas.so.* can be found (see native_blas_missing; it
#   takes effect only where MLlib's BLAS was not used yet in that JVM, and only in the driver's,
#   which is the executors' JVM in local mode).
# Classic sessions only: a Spark Connect client has no JVM (the server's logging is its own).
_DROPPED = {
    "org.apache.spark.scheduler.DAGScheduler": r"Broadcasting large task binary.*",
    # a broadcast MLlib destroyed and Spark's cleaner removes again (a few per grid)
    "org.apache.spark.storage.BlockManager": r"Asked to remove block broadcast_\d+(_piece\d+)?, which does not exist.*",
}
_quiet_lock = threading.Lock()
_quiet_users = 0
_quiet_restore: list = []  # the steps that put the JVM back, run when the last user leaves


def _quiet_jvm(jvm) -> list:  # noqa: ANN001 - a py4j JVMView
    """Drop ``_DROPPED``'s messages in ``jvm`` (and netlib's native attempt); return the undo steps."""
    undo: list = []
    system = jvm.java.lang.System
    if system.getProperty("dpspark.jvm.log.level") is not None:
        return undo  # a JVM dpspark started: log4j2-local.properties drops them already
    core = jvm.org.apache.logging.log4j.core
    result = core.Filter.Result
    config = jvm.org.apache.logging.log4j.LogManager.getContext(False).getConfiguration()
    for name, regex in _DROPPED.items():
        # The filter goes on the configuration the logger logs through (its own, or the nearest
        # parent's, the root's as a rule): a logger configuration of its own would change what it
        # logs (pyspark's shell lets every logger with one of its own through below WARN).
        logger = config.getLoggerConfig(name)
        drop = core.filter.RegexFilter.createFilter(regex, None, False, result.DENY, result.NEUTRAL)
        logger.addFilter(drop)
        undo.append(lambda logger=logger, drop=drop: logger.removeFilter(drop))
    if native_blas_missing() and system.getProperty(_NETLIB_NATIVE) is None:
        system.setProperty(_NETLIB_NATIVE, "false")
        undo.append(lambda: system.clearProperty(_NETLIB_NATIVE))
    return undo


@contextmanager
def quiet_spark_logs(spark: SparkSession) -> Iterator[None]:
    """Around dpspark's own jobs in ``spark``: Spark's log lines with nothing to act on dropped in the
    driver's JVM, and its logging put back after (when the last of concurrent users leaves)."""
    global _quiet_users
    jvm = None if is_connect(spark) else getattr(spark.sparkContext, "_jvm", None)
    if jvm is None:
        yield
        return
    log = logging.getLogger("dpspark")
    with _quiet_lock:
        if _quiet_users == 0:
            try:
                _quiet_restore[:] = _quiet_jvm(jvm)
            except Exception as exc:  # noqa: BLE001 - another logging backend: Spark's logs stay as they are
                log.debug("Spark's logging left as it is: %s", exc)
                _quiet_restore[:] = []
        _quiet_users += 1
    try:
        yield
    finally:
        with _quiet_lock:
            _quiet_users -= 1
            if _quiet_users == 0:
                for step in reversed(_quiet_restore):
                    try:
                        step()
                    except Exception as exc:  # noqa: BLE001 - a stopped JVM has nothing to put back
                        log.debug("Spark's logging not put back: %s", exc)
                _quiet_restore.clear()
