"""Spark's log lines with nothing to act on stay out of dpspark's stderr (issue "A new user's first
hour"): DAGScheduler's "Broadcasting large task binary" warning, one per task that carries
evaluate-utility's model (``dpspark.engine.logreg``'s weights and IDF, over 1 MiB, in every scoring
and gradient task), and netlib's "dlopen(libblas.so.3) failed" line.

Each test runs a small evaluate-utility in a fresh process (a JVM of its own, logging as it
starts): the CLI's own local session (log4j2-local.properties), and a session dpspark is handed
with Spark's default logging, which dpspark must put back as it was after its work.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from dpspark.evaluation.datasets import sms_spam

pytestmark = [pytest.mark.spark, pytest.mark.runtime]  # each pyspark logs its own way

TASK_BINARY = "Broadcasting large task binary"
DLOPEN = "dlopen("
# One grid point, one perturbation, the baseline model plus a test-time score: enough tasks that carry
# the model to warn with Spark's own logging (the second test's MLlib pipeline checks that it does).
GRID = {"epsilons": [10.0], "lambdas": [1.0], "mode": "test-time", "repeats": 1, "vocab_size": 2000, "seed": 1}


@pytest.fixture(scope="module")
def sms(tmp_path_factory):
    return sms_spam(tmp_path_factory.mktemp("sms"), rows=300)


def _fresh_env() -> dict[str, str]:
    """This process's environment without the Spark settings a session started here left in it;
    Python workers run this interpreter (the one with dpspark installed)."""
    drop = ("PYSPARK_SUBMIT_ARGS", "SPARK_SUBMIT_OPTS", "SPARK_LOCAL_IP", "PYSPARK_GATEWAY_PORT")
    drop += ("PYSPARK_GATEWAY_SECRET",)
    return {**{k: v for k, v in os.environ.items() if k not in drop}, "PYSPARK_PYTHON": sys.executable}


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=_fresh_env(), capture_output=True, text=True, timeout=600
    )


def test_cli_session_prints_progress_without_task_binary_or_dlopen_lines(sms, tmp_path):
    argv = ["evaluate-utility", "--input", sms, "--text-column", "text", "--label-column", "label"]
    argv += ["--epsilons", "10", "--lambdas", "1", "--mode", "test-time", "--repeats", "1", "--vocab-size", "2000"]
    argv += ["--seed", "1", "--master", "local[1]", "--output", str(tmp_path / "utility")]
    done = _run(f"import sys; from dpspark.cli import main; sys.exit(main({argv!r}))")
    assert done.returncode == 0, done.stderr
    assert TASK_BINARY not in done.stderr
    assert DLOPEN not in done.stderr
    assert "evaluate-utility baseline" in done.stderr  # dpspark's own progress lines still there


def test_handed_session_quiet_while_dpspark_works_then_as_before(sms, tmp_path):
    out = str(tmp_path / "utility")
    done = _run(
        f"""
        import sys
        from pyspark.sql import SparkSession, functions as F
        from pyspark.ml import Pipeline
        from pyspark.ml.classification import LogisticRegression
        from pyspark.ml.feature import IDF, HashingTF, RegexTokenizer

        import dpspark

        # A session of the script's own, with Spark's default logging (not dpspark's).
        spark = (
            SparkSession.builder.master("local[1]")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .getOrCreate()
        )
        jvm = spark._jvm
        name = "org.apache.spark.scheduler.DAGScheduler"

        def state():
            config = jvm.org.apache.logging.log4j.LogManager.getContext(False).getConfiguration()
            logger = config.getLoggerConfig(name)
            filters = str(logger.getFilter())
            return logger.getName(), str(logger.getLevel()), filters, jvm.java.lang.System.getProperty(
                "dev.ludovic.netlib.blas.allowNative"
            )

        before = state()
        df = spark.read.parquet({sms!r})
        print("=== dpspark", file=sys.stderr, flush=True)
        dpspark.evaluate_utility({out!r}, "text", "label", df=df, **{GRID!r})
        print("=== after", file=sys.stderr, flush=True)
        assert state() == before, (state(), before)
        # The same kind of MLlib job outside dpspark's work: Spark's own logging warns again.
        data = df.withColumn("y", (F.col("label") == "spam").cast("double"))
        stages = [
            RegexTokenizer(inputCol="text", outputCol="tokens"),
            HashingTF(inputCol="tokens", outputCol="tf", numFeatures=1 << 16),
            IDF(inputCol="tf", outputCol="features"),
            LogisticRegression(labelCol="y", maxIter=2),
        ]
        Pipeline(stages=stages).fit(data)
        print("=== end", file=sys.stderr, flush=True)
        spark.stop()
        """
    )
    assert done.returncode == 0, done.stderr
    assert "=== end" in done.stderr, done.stderr
    during = done.stderr.split("=== dpspark", 1)[1].split("=== after", 1)[0]
    after = done.stderr.split("=== after", 1)[1]
    assert TASK_BINARY not in during and DLOPEN not in during
    assert TASK_BINARY in after  # the logging put back as it was
