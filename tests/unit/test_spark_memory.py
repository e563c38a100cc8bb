"""A Java heap that runs out is dpspark's one sentence naming the setting to raise, exit 9, no traceback
(issue 39, defect 15): the three ways the error reaches Python (``dpspark.spark.memory``)."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest

from dpspark import cli
from dpspark.errors import SparkMemoryError
from dpspark.spark import memory


class JavaException:
    def __init__(self, name: str) -> None:
        self.name = name

    def getClass(self):  # noqa: ANN201, N802 - Py4J's Java object
        return types.SimpleNamespace(getName=lambda: self.name)


class Py4JJavaError(Exception):
    """Py4J's error of a Java exception (the same name; its text comes from the JVM)."""

    def __init__(self, text: str, java: str) -> None:
        super().__init__(text)
        self.java_exception = JavaException(java)


class Py4JError(Exception):
    """Py4J's error of a call whose JVM is gone: reading its text fails too."""

    def __str__(self) -> str:
        raise ConnectionRefusedError("the JVM is gone")


DRIVER_OOM = Py4JJavaError(
    "An error occurred while calling o812.collectToPython.\n: java.lang.OutOfMemoryError: Java heap space\n"
    "\tat java.base/java.util.Arrays.copyOf(Arrays.java:3537)",
    "java.lang.OutOfMemoryError",
)
TASK_OOM = Py4JJavaError(
    "An error occurred while calling o90.collectToPython.\n: org.apache.spark.SparkException: Job aborted due to "
    "stage failure: Task 3 in stage 7.0 failed 4 times, most recent failure: Lost task 3.3 in stage 7.0 (TID 41) "
    "(10.0.0.7 executor 2): org.apache.spark.memory.SparkOutOfMemoryError: [UNABLE_TO_ACQUIRE_MEMORY] Unable to "
    "acquire 65536 bytes of memory, got 0.",
    "org.apache.spark.SparkException",
)


def test_a_driver_heap_names_spark_driver_memory_in_one_line_exit_9(capsys):
    code = cli.explain_failure("privacy-risk", DRIVER_OOM)
    err = capsys.readouterr().err
    assert code == SparkMemoryError.exit_code == 9
    assert err.splitlines() == [f"dpspark privacy-risk: error: {memory.DRIVER}"]
    assert "spark.driver.memory" in err and "SPARK_DRIVER_MEMORY=4g" in err and "--vocab-size" in err


def test_a_tasks_heap_names_spark_executor_memory():
    got = memory.memory_failure(TASK_OOM)
    assert isinstance(got, SparkMemoryError) and str(got) == memory.TASK
    assert "spark.executor.memory" in str(got)


def test_the_error_is_found_as_the_cause_of_another():
    try:
        try:
            raise DRIVER_OOM
        except Py4JJavaError as exc:
            raise RuntimeError("the attack failed") from exc
    except RuntimeError as outer:
        assert str(memory.memory_failure(outer)) == memory.DRIVER


def fake_pyspark(monkeypatch, exit_code: int | None) -> None:
    """A pyspark whose local JVM ended with ``exit_code`` (None: still running)."""

    class Proc:
        def wait(self, timeout: float) -> int:
            if exit_code is None:
                raise subprocess.TimeoutExpired("java", timeout)
            return exit_code

    gateway = types.SimpleNamespace(proc=Proc())
    module = types.SimpleNamespace(SparkContext=types.SimpleNamespace(_gateway=gateway))
    monkeypatch.setitem(sys.modules, "pyspark", module)


def test_a_local_jvm_ended_by_a_tasks_heap_is_told_by_its_exit_code_52(monkeypatch):
    """In local mode a task's OutOfMemoryError ends the one JVM (SparkExitCode.OOM): the pending call fails
    with a lost connection, and the error's text cannot be read."""
    fake_pyspark(monkeypatch, 52)
    assert str(memory.memory_failure(Py4JError(), wait_s=0.1)) == memory.TASK
    assert str(memory.memory_failure(ConnectionResetError(), wait_s=0.1)) == memory.TASK


class UnreadableJavaError(Py4JError):
    """A Py4JJavaError (a Py4JError) answered by a JVM that then ended: neither its text nor its Java class can be
    read any more."""

    @property
    def java_exception(self):  # noqa: ANN201
        raise ConnectionRefusedError("the JVM is gone")


def test_a_java_error_whose_jvm_ended_by_a_tasks_heap_is_told_by_the_exit_code(monkeypatch):
    fake_pyspark(monkeypatch, 52)
    assert str(memory.memory_failure(UnreadableJavaError(), wait_s=0.1)) == memory.TASK
    # a readable Java error is another failure, and is not waited on
    fake_pyspark(monkeypatch, None)
    assert memory.memory_failure(Py4JJavaError("java.io.IOException: bad", "java.io.IOException"), 0.1) is None


@pytest.mark.parametrize("exit_code", [None, 1, 137])
def test_a_lost_jvm_for_another_reason_is_not_called_memory(monkeypatch, exit_code):
    fake_pyspark(monkeypatch, exit_code)
    assert memory.memory_failure(Py4JError(), wait_s=0.1) is None


def test_other_failures_are_not_called_memory(monkeypatch):
    monkeypatch.delitem(sys.modules, "pyspark", raising=False)
    for exc in (ValueError("bad"), Py4JJavaError("An error occurred: java.io.IOException", "java.io.IOException")):
        assert memory.memory_failure(exc, wait_s=0.1) is None
    assert memory.memory_failure(Py4JError(), wait_s=0.1) is None  # no JVM of this process's own
    assert cli.explain_failure("privacy-risk", ValueError("bad")) is None


def test_an_error_whose_text_needs_the_gone_jvm_is_reraised_not_replaced(monkeypatch):
    """Reading a Py4J error's text asks the JVM; when it is gone, explain_failure must not raise a connection error
    of its own in place of the failure (it returns None: the caller re-raises the original)."""
    monkeypatch.delitem(sys.modules, "pyspark", raising=False)
    assert memory.exception_text(Py4JError()) == ""
    assert cli.explain_failure("privacy-risk", Py4JError()) is None
