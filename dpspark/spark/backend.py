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
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
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

    return _collected(spark, spark.range(n, numPartitions=n).mapInArrow(run, _SCHEMA), n, progress)


def _watched(spark: SparkSession, n: int, progress: Progress | None, action: Callable[[], Any]) -> Any:
    """``action()``, a job of ``n`` tasks, with its finished tasks reported (classic Spark; Connect
    reports when it ends)."""
    if progress is None or is_connect(spark):
        result = action()
    else:
        with watching(progress, _task_poll(spark, n)):
            result = action()
    if progress is not None:
        progress.report(progress.total, 1.0)
    return result


def _collected(spark: SparkSession, df: DataFrame, n: int, progress: Progress | None) -> list[tuple[int, bytes]]:
    rows = _watched(spark, n, progress, df.collect)
    return sorted(((r["item"], bytes(r["payload"])) for r in rows), key=lambda r: r[0])


class Kept:
    """A payload per item kept on the executors between passes (a persisted DataFrame of (item,
    payload), an item per partition): an engine's state that is drawn once and read, or grown, by
    later passes (``dpspark.engine.fitted_attack``), so that it never travels to the driver.

    ``keep`` draws it; ``update`` replaces every payload by ``work(item, payload)``; ``collect``
    returns what ``work(item, payload)`` makes of each (a list of payloads, possibly empty);
    ``release`` frees it. Spark recomputes a lost partition from the lineage: the works must be
    deterministic (the engines' draws are keyed by item)."""

    def __init__(self, spark: SparkSession, df: DataFrame, n: int) -> None:
        self.spark, self.df, self.n = spark, df, n

    @classmethod
    def keep(
        cls, spark: SparkSession, items: Sequence[Any], work: Callable[[int], bytes], progress: Progress | None = None
    ) -> Kept:
        n = len(items)

        def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for b in batches:
                for i in b.column(0).to_pylist():
                    yield pa.RecordBatch.from_arrays(
                        [pa.array([i], pa.int64()), pa.array([work(i)], pa.binary())], names=["item", "payload"]
                    )

        return cls(spark, spark.range(n, numPartitions=max(1, n)).mapInArrow(run, _SCHEMA), n)._persisted(progress)

    def _persisted(self, progress: Progress | None) -> Kept:
        self.df = self.df.persist(StorageLevel.MEMORY_AND_DISK)
        _watched(self.spark, self.n, progress, self.df.count)
        return self

    def _mapped(self, work: Callable[[int, bytes], list[bytes]]) -> DataFrame:
        def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for b in batches:
                for i, payload in zip(b.column(0).to_pylist(), b.column(1).to_pylist()):
                    out = work(i, payload)
                    yield pa.RecordBatch.from_arrays(
                        [pa.array([i] * len(out), pa.int64()), pa.array(out, pa.binary())], names=["item", "payload"]
                    )

        return self.df.mapInArrow(run, _SCHEMA)

    def update(self, work: Callable[[int, bytes], bytes], progress: Progress | None = None) -> Kept:
        """A new ``Kept`` of ``work(item, payload)``; this one is released once the new one is computed."""
        new = Kept(self.spark, self._mapped(lambda i, payload: [work(i, payload)]), self.n)._persisted(progress)
        self.release()
        return new

    def collect(
        self, work: Callable[[int, bytes], list[bytes]], progress: Progress | None = None
    ) -> list[tuple[int, bytes]]:
        """(item, payload) of every payload ``work(item, kept payload)`` returns, in item order."""
        return _collected(self.spark, self._mapped(work), self.n, progress)

    def release(self) -> None:
        self.df.unpersist()


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
