"""Spark as the backend of the pure engines (``dpspark.engine``): one item per task, run on the
executors, the partials back to the driver as bytes.

``run_items`` gives each item a partition of its own (``spark.range(n, numPartitions=n)``), so
Spark hands the next item to whichever executor core frees first, and calls ``work(item)`` there.
It goes through DataFrames only (``mapInArrow``), so it runs the same on classic Spark and
through Spark Connect. On classic Spark a watcher reads the job's finished tasks from the status
tracker and reports them (``dpspark.progress``); Connect reports when the job ends.

Partials travel as ``pack``-ed numpy arrays (``np.save`` one after another, no pickle).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql import types as T

from dpspark.progress import Progress, watching
from dpspark.spark.session import is_connect


def pack(*arrays: np.ndarray) -> bytes:
    """Arrays as bytes (``unpack`` reads them back)."""
    buf = io.BytesIO()
    for a in arrays:
        np.save(buf, np.asarray(a), allow_pickle=False)
    return buf.getvalue()


def unpack(data: bytes) -> list[np.ndarray]:
    buf, out = io.BytesIO(data), []
    while buf.tell() < len(data):
        out.append(np.load(buf, allow_pickle=False))
    return out


def cores(spark: SparkSession) -> int:
    """The executors' cores (8 on Spark Connect, which does not say)."""
    return 8 if is_connect(spark) else spark.sparkContext.defaultParallelism


_SCHEMA = T.StructType([T.StructField("item", T.LongType()), T.StructField("payload", T.BinaryType())])


def run_items(
    spark: SparkSession, items: Sequence[Any], work: Callable[[Any], list[bytes]], progress: Progress | None = None
) -> list[tuple[int, bytes]]:
    """(item index, payload) for every payload ``work(items[i])`` returns, computed on the executors,
    in item order. ``items`` travel with the task closure: keep them small (spans, settings), and
    ship big inputs with ``dpspark.spark.resources``."""
    n = len(items)
    if n == 0:
        return []
    items = list(items)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in batches:
            for i in b.column(0).to_pylist():
                payloads = work(items[i])
                yield pa.RecordBatch.from_arrays(
                    [pa.array([i] * len(payloads), pa.int64()), pa.array(payloads, pa.binary())],
                    names=["item", "payload"],
                )

    df = spark.range(n, numPartitions=n).mapInArrow(run, _SCHEMA)
    if progress is None or is_connect(spark):
        rows = df.collect()
    else:
        with watching(progress, _task_poll(spark, n)):
            rows = df.collect()
    if progress is not None:
        progress.report(progress.total, 1.0)
    return sorted(((r["item"], bytes(r["payload"])) for r in rows), key=lambda r: r[0])


def _task_poll(spark: SparkSession, n: int) -> Callable[[], tuple[int, float]]:
    """(items done, share done) of the job running now: the finished tasks of its active stages."""
    tracker = spark.sparkContext.statusTracker()
    done = [0]

    def poll() -> tuple[int, float]:
        finished = 0
        for sid in tracker.getActiveStageIds():
            info = tracker.getStageInfo(sid)
            if info is not None and info.numTasks == n:
                finished = max(finished, info.numCompletedTasks)
        done[0] = max(done[0], finished)
        return done[0], done[0] / n

    return poll
