"""A driver that runs out of Java heap during privacy-risk ends the command with dpspark's one sentence
naming the setting to raise, exit 9, no traceback (issue 39, defect 15; ``dpspark.spark.memory``)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dpspark.evaluation.datasets import sms_spam
from dpspark.spark import memory

pytestmark = [pytest.mark.spark, pytest.mark.slow]

# privacy-risk as the CLI runs it, in a JVM of 512 MiB (Spark's least is 450 MiB), whose attack runs out
# of that heap for real: on the driver (a buffer of 1 GiB), or in a task (a string of 1.2 GB, which in
# local mode ends the JVM with Spark's exit code 52).
OOM_RUN = """
import sys
from pyspark.sql import SparkSession
from dpspark.cli import main
from dpspark.run import risk

def attack(*args, **kwargs):
    spark = SparkSession.getActiveSession()
    if {where!r} == "driver":
        spark.sparkContext._jvm.java.nio.ByteBuffer.allocate(1 << 30)
    else:
        s = "repeat('x', CAST(400000000 + id AS INT))"
        spark.range(1).selectExpr(f"length(concat({{s}}, {{s}}, {{s}}))").collect()
    raise AssertionError("it fit in the heap")

risk.FittedRuns.attack = attack
sys.exit(main({argv!r}))
"""


@pytest.mark.parametrize("where", ["driver", "task"])
def test_a_java_heap_out_of_memory_is_one_sentence_naming_the_memory_setting(tmp_path, where):
    data = sms_spam(tmp_path / "sms", rows=60)
    out = tmp_path / "out"
    argv = ["privacy-risk", "--input", str(data), "--text-column", "text", "--output", str(out)]
    argv += ["--mechanisms", "laplace", "--epsilons", "10", "--runs", "2", "--vocab-size", "2000"]
    argv += ["--max-words", "20", "--master", "local[1]", "--quiet"]
    drop = ("PYSPARK_SUBMIT_ARGS", "SPARK_SUBMIT_OPTS", "SPARK_LOCAL_IP", "PYSPARK_GATEWAY_PORT")
    env = {k: v for k, v in os.environ.items() if k not in (*drop, "PYSPARK_GATEWAY_SECRET")}
    env.update({"PYSPARK_PYTHON": sys.executable, "SPARK_DRIVER_MEMORY": "512m"})
    done = subprocess.run(
        [sys.executable, "-c", OOM_RUN.format(argv=argv, where=where)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 9, done.stderr[-3000:]
    sentence = memory.DRIVER if where == "driver" else memory.TASK
    lines = done.stderr.splitlines()
    assert lines[-1] == f"dpspark privacy-risk: error: {sentence}", done.stderr[-3000:]
    assert "\tat " not in done.stderr and "Exception occurred during processing of request" not in done.stderr
    if where == "driver":
        assert lines == [lines[-1]], done.stderr[-3000:]
    # A JVM that dies under a pending call: py4j itself logs "Exception while sending command." with the
    # lost connection's traceback (Python's root logger, which --quiet leaves at WARNING) before the sentence.
    assert not out.exists()
