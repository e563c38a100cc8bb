"""Spark as the backend of the pure engines (``dpspark.engine``): one item per task, run on the
executors, the partials back to the driver as bytes.

``run_items`` gives each item a partition of its own (``spark.range(n, numPartitions=n)``), so
Spark hands the next item to whichever executor core frees first, and calls ``work(item)`` there.
It goes through DataFrames only (``mapInArrow``), so it runs the same on classic Spark and
through Spark Connect. On classic Spark a watcher reads the job's finished tasks from the status
tracker and reports them (``dpspark.progress``); Connect reports when the job ends.

Partials travel as ``dpspark.run.backend.pack``-ed numpy arrays (``np.save`` one after another, no pickle).
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark import Accumulator, AccumulatorParam, StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from dpspark.arrow import numbers
from dpspark.engine import nw_sw
from dpspark.npy import load_npy
from dpspark.progress import Progress, watching
from dpspark.spark import resources
from dpspark.spark.session import is_connect
from dpspark.stats import WorkItem


def cores(spark: SparkSession) -> int:
    """The executors' cores (8 on Spark Connect, which does not say)."""
    return 8 if is_connect(spark) else spark.sparkContext.defaultParallelism


def ship_arrays(spark: SparkSession, arrays: dict[str, np.ndarray]) -> str:
    """Send numpy arrays to every executor as files (``key.npy``), returned by name for ``shipped_array``:
    a table of V columns per setting, which as a broadcast (or in a task's closure) would be held whole in
    the driver's memory and in every executor's."""

    def write(directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        for key, array in arrays.items():
            np.save(directory / f"{key}.npy", array)

    return resources.ship(spark, write).name


def shipped_array(name: str, key: str) -> np.ndarray:
    """On an executor: the array ``key`` of the files ``ship_arrays`` sent as ``name``."""
    from pyspark import SparkFiles

    return load_npy(Path(SparkFiles.get(name)) / f"{key}.npy")


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


# --- the Nw/Sw combiner (dpspark.engine.nw_sw) folded over tasks: privacy-stats' per-word result ----------


def _run_items(items: Iterator[WorkItem], bundle: str, job_key: bytes, finished: Accumulator) -> Iterator:
    mechs = resources.resources(bundle).mechanisms()
    for it in items:
        yield from nw_sw.create(it, job_key, mechs).items()
        finished.add({it.setting: 1})  # counts only: the driver's progress line


class _CountsByKey(AccumulatorParam):
    """Accumulates {key: count} dictionaries (items finished per grid point)."""

    def zero(self, value: dict) -> dict:
        return {}

    def addInPlace(self, a: dict, b: dict) -> dict:  # noqa: N802 - pyspark's name
        for k, v in b.items():
            a[k] = a.get(k, 0) + v
        return a


def spark_per_word(spark: SparkSession, items: list[WorkItem], job_key: bytes, bundle: str) -> dict:
    """((setting, w) → (Nw, Sw, K)) computed by the executors, with a progress line every 10 s.

    With a SparkContext: the RDD path (``reduceByKey``). On Spark Connect (serverless,
    standard access mode) there is none, and ``dataframe_per_word`` computes the same
    counts with DataFrames.
    """
    if is_connect(spark):
        progress = Progress("privacy-stats", len({it.setting for it in items}))
        result = dataframe_per_word(spark, items, job_key, bundle)
        progress.report(progress.total, 1.0)
        return result
    sc = spark.sparkContext
    slices = max(1, min(len(items), 4 * sc.defaultParallelism))
    finished = sc.accumulator({}, _CountsByKey())
    per_point = Counter(it.setting for it in items)
    progress = Progress("privacy-stats", len(per_point))

    def poll() -> tuple[int, float]:
        done = finished.value
        return sum(done.get(k, 0) == n for k, n in per_point.items()), sum(done.values()) / len(items)

    counts = (
        sc.parallelize(items, slices)
        .mapPartitions(lambda it: _run_items(it, bundle, job_key, finished))
        .reduceByKey(operator.add)
    )
    with watching(progress, poll):
        return counts.map(lambda kv: nw_sw.word_partial(*kv)).reduceByKey(nw_sw.merge_word).collectAsMap()


_ITEMS = "item long, block long, setting long, rows array<long>, runs long"
_COUNTS = "setting long, word long, output long, count long"


def _item_batches(batches: Iterator[pa.RecordBatch], bundle: str, job_key: bytes) -> Iterator[pa.RecordBatch]:
    mechs = resources.resources(bundle).mechanisms()
    for batch in batches:
        for row in batch.to_pylist():
            it = WorkItem(row["item"], row["setting"], tuple(row["rows"]), row["runs"], row["block"])
            pairs = list(nw_sw.create(it, job_key, mechs).items())
            keys = [k for k, _ in pairs]
            yield pa.RecordBatch.from_arrays(
                [
                    numbers([k[0] for k in keys], np.int64),
                    numbers([k[1] for k in keys], np.int64),
                    numbers([k[2] for k in keys], np.int64),
                    numbers([c for _, c in pairs], np.int64),
                ],
                names=["setting", "word", "output", "count"],
            )


def pair_counts(spark: SparkSession, items: list[WorkItem], job_key: bytes, bundle: str, slices: int = 64) -> DataFrame:
    """(setting, w, ŵ, count) summed over the items, with DataFrames only (no SparkContext). Item i draws
    the noise keyed by (job key, i) wherever it runs: any number of ``slices`` gives the same counts."""
    from pyspark.sql import functions as F

    rows = [(it.item, it.block, it.setting, list(it.rows), it.runs) for it in items]
    df = spark.createDataFrame(rows, _ITEMS).repartition(max(1, min(len(items), slices)), "item")
    counts = df.mapInArrow(lambda b: _item_batches(b, bundle, job_key), _COUNTS)
    return counts.groupBy("setting", "word", "output").agg(F.sum("count").alias("count"))


def dataframe_per_word(spark: SparkSession, items: list[WorkItem], job_key: bytes, bundle: str) -> dict:
    """The DataFrame twin of the ``reduceByKey`` path (no SparkContext): the same items, the same
    noise (keyed by job key and item number), grouped with ``groupBy``; equal results."""
    from pyspark.sql import functions as F

    pairs = pair_counts(spark, items, job_key, bundle)
    same = F.when(F.col("output") == F.col("word"), F.col("count")).otherwise(F.lit(0))
    per_word = pairs.groupBy("setting", "word").agg(
        F.sum(same).alias("nw"), F.count(F.lit(1)).alias("sw"), F.sum("count").alias("runs")
    )
    return {(r[0], r[1]): (r[2], r[3], r[4]) for r in per_word.collect()}
