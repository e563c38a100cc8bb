"""Spark running out of memory, told as dpspark's one sentence (``SparkMemoryError``, exit 9) instead of
a Py4J traceback.

A Java heap runs out in three ways that reach Python differently:

- on the driver (a ``collect`` of a table that grows with the data or the vocabulary): a
  ``Py4JJavaError`` whose Java exception is ``java.lang.OutOfMemoryError``;
- in a task on a cluster (or Spark's own memory manager refusing a task, ``SparkOutOfMemoryError``):
  the job fails with a ``SparkException`` whose text holds the error;
- in a task in local mode: Spark ends its one JVM with exit code 52 (``SparkExitCode.OOM``), and the
  pending Py4J call fails with a lost connection.

Only the exception's text and, for the third, the exit code of the JVM pyspark started are read:
nothing here imports pyspark, so the CLI can ask on any failure.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

from dpspark.errors import SparkMemoryError

MARKS = (
    "java.lang.OutOfMemoryError",
    "SparkOutOfMemoryError",
    "Java heap space",
    "GC overhead limit exceeded",
    "Not enough memory to build and broadcast",
)
TASK_MARKS = ("Job aborted due to stage failure", "SparkOutOfMemoryError", "Lost task")
JVM_OOM_EXIT = 52  # Spark's SparkExitCode.OOM: a task's OutOfMemoryError ends a local JVM with it
LESS = "or ask for less at once (a smaller --vocab-size, or fewer settings per run)"
DRIVER = (
    "Spark's driver ran out of memory (Java heap space): give it more with spark.driver.memory "
    f"(SPARK_DRIVER_MEMORY=4g before the command, or spark-submit --driver-memory 4g), {LESS}"
)
TASK = (
    "a Spark task ran out of memory (Java heap space): give the executors more with spark.executor.memory "
    f"(in local mode they are the driver: SPARK_DRIVER_MEMORY=4g before the command), {LESS}"
)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def exception_text(exc: BaseException) -> str:
    """The exception's text, its Java exception's class included; '' where reading it fails (a Py4J
    error's text is fetched from a JVM that may be gone)."""
    parts = []
    for read in (lambda: str(exc), lambda: exc.java_exception.getClass().getName()):  # type: ignore[attr-defined]
        try:
            parts.append(read())
        except Exception:  # noqa: BLE001 - a dead JVM, or no Java exception: nothing to read
            continue
    return "\n".join(parts)


def _jvm_gone(exc: BaseException, text: str) -> bool:
    """``exc`` (whose ``exception_text`` is ``text``) says the JVM is unreachable: a lost connection, Py4J's error
    of a call without an answer, or any Py4J error whose text cannot be read from the JVM (a task's
    OutOfMemoryError ends local mode's one JVM while the driver's answer, a Py4JJavaError, is on its way)."""
    if isinstance(exc, ConnectionError) or type(exc).__name__ in ("Py4JError", "Py4JNetworkError"):
        return True
    return any(c.__name__ == "Py4JError" for c in type(exc).__mro__) and not text


def _local_jvm_exit(wait_s: float) -> int | None:
    """The exit code of the JVM pyspark started in this process, once it has ended (None while it runs,
    or where pyspark started none: a cluster's driver, Spark Connect)."""
    pyspark = sys.modules.get("pyspark")
    proc = getattr(getattr(getattr(pyspark, "SparkContext", None), "_gateway", None), "proc", None)
    if proc is None:
        return None
    try:
        return proc.wait(timeout=wait_s)
    except Exception:  # noqa: BLE001 - still running (TimeoutExpired), or not a process
        return None


def memory_failure(exc: BaseException, wait_s: float = 10.0) -> SparkMemoryError | None:
    """``exc`` as dpspark's one-sentence error when Spark ran out of memory, naming the setting to raise
    (the driver's, or the executors'); None for any other failure."""
    chain = list(_chain(exc))
    texts = [exception_text(e) for e in chain]  # each read once: a gone JVM refuses every attempt
    if any(mark in t for t in texts for mark in MARKS):
        task = any(mark in t for t in texts for mark in TASK_MARKS)
        return SparkMemoryError(TASK if task else DRIVER)
    lost = any(_jvm_gone(e, t) for e, t in zip(chain, texts))
    if lost and _local_jvm_exit(wait_s) == JVM_OOM_EXIT:
        return SparkMemoryError(TASK)
    return None
