"""The privacy-stats job on Spark: the Nw/Sw combiner (``dpspark.engine.nw_sw``) folded over tasks.

Each item (a setting, a chunk of words, a block of runs) is drawn on an executor with the
same code as perturb (``nw_sw.create``: WordMechanism + the blocked exact search) and emits
((setting, w, ŵ), count); ``reduceByKey`` adds the counts over run blocks (``nw_sw.merge``, per
key), and a second ``reduceByKey`` turns them into per-word (Nw, Sw, K) (``nw_sw.word_partial``,
``nw_sw.merge_word``). The driver only sees the small per-word result, from which it writes the
tables, plots and manifest.
"""

from __future__ import annotations

import json
import logging
import operator
import shutil
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark import Accumulator, AccumulatorParam
from pyspark.sql import DataFrame, SparkSession

import dpspark
from dpspark import report
from dpspark.arrow import numbers
from dpspark.config import StatsConfig
from dpspark.device import DEVICE_SEARCH
from dpspark.embeddings import Embeddings
from dpspark.engine import nw_sw
from dpspark.errors import ConfigError
from dpspark.mechanisms import grid_facts
from dpspark.neighbours import AnnoyIndex
from dpspark.prepare import Grid, local_writes, prepare_grid
from dpspark.progress import Progress, describe, watching
from dpspark.rng import new_job_key
from dpspark.spark import resources
from dpspark.spark.reports import ReportOutput
from dpspark.spark.session import get_session, is_connect
from dpspark.stats import WorkItem, exact_nw_sw, plan, rows_of_words, sample_words
from dpspark.wordfiles import read_word_list

log = logging.getLogger("dpspark")


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


def choose_words(config: StatsConfig, emb: Embeddings, vocab_rows: np.ndarray, spark: SparkSession) -> tuple:
    """(embedding rows of the words to measure, the rule in words)."""
    if config.word_list:
        words = read_word_list(config.word_list)
        return rows_of_words(words, emb.word_index, vocab_rows), f"word list {config.word_list}"
    if config.corpus:
        from dpspark.config import PerturbConfig
        from dpspark.spark.fs import FileSystem
        from dpspark.spark.io import read_input
        from dpspark.spark.perturb import check_columns, vocabulary_from_corpus

        df = read_input(spark, FileSystem(spark), config.corpus, None)
        check_columns(df, PerturbConfig(columns=config.columns, epsilon=1.0))
        in_vocab = {emb.words[r]: int(r) for r in vocab_rows}
        words = vocabulary_from_corpus(df, list(config.columns), config.words, in_vocab)
        return np.array(sorted(in_vocab[w] for w in words), np.int64), (
            f"the {len(words)} most frequent vocabulary words of {config.corpus}"
        )
    rows = sample_words(vocab_rows, config.words, config.words_seed)
    return rows, (
        f"{len(rows)} vocabulary words drawn uniformly without replacement with "
        f"numpy.random.default_rng({config.words_seed})"
    )


def mechanism_fields(config: Any, emb: Embeddings, vocab_rows: np.ndarray, annoy: AnnoyIndex | None) -> dict:
    """The manifest's account of the mechanism's public parts (statistics and risk outputs)."""
    return {
        "embeddings": {"name": emb.name, "sha256": emb.sha256, "words": len(emb)},
        "dimension": emb.dim,
        "vocabulary": {"size": int(len(vocab_rows)), "source": config.vocab_file or f"first {config.vocab_size}"},
        "nearest_neighbour": {
            "method": config.nn,
            "params": annoy.params() if annoy else {},
            "device": config.device,
            "device_search": DEVICE_SEARCH,
        },
        "seeded": config.seed is not None,
    }


def exact_statistics(grid: Grid, word_rows: np.ndarray, runs: int) -> list[tuple[np.ndarray, np.ndarray] | None]:
    """Per setting, E[Nw] and E[Sw] of every measured word from the mechanism's closed form
    (None for the noise family, which has none: its figures are the Monte Carlo's alone)."""
    return [exact_nw_sw(mech, word_rows, runs) for mech in grid.mechanisms()]


def per_word_table(specs: list, result: dict, words: Any, exact: list, word_rows: np.ndarray) -> pa.Table:
    """per_word.parquet: one row per (setting, word): mechanism, ε, one column per axis of every
    registered mechanism (null where it is not the setting's), the Monte Carlo's Nw, Sw and K, and
    the exact E[Nw], E[Sw] where the mechanism has a closed form (null otherwise)."""
    keys = sorted(result)
    at = {int(r): i for i, r in enumerate(word_rows)}
    axes = report.axis_names()
    columns: dict[str, pa.Array] = {
        "mechanism": pa.array([specs[k[0]].name for k in keys], pa.string()),
        "epsilon": pa.array([specs[k[0]].epsilon for k in keys], pa.float64()),
    }
    for axis in axes:
        columns[axis] = report.axis_column([specs[k[0]].axes().get(axis) for k in keys])
    columns.update(
        {
            "word": pa.array([words[k[1]] for k in keys], pa.string()),
            "rank": pa.array([k[1] for k in keys], pa.int64()),
            "nw": pa.array([result[k][0] for k in keys], pa.int64()),
            "sw": pa.array([result[k][1] for k in keys], pa.int64()),
            "runs": pa.array([result[k][2] for k in keys], pa.int64()),
            "exact_nw": pa.array(
                [None if exact[k[0]] is None else float(exact[k[0]][0][at[k[1]]]) for k in keys], pa.float64()
            ),
            "exact_sw": pa.array(
                [None if exact[k[0]] is None else float(exact[k[0]][1][at[k[1]]]) for k in keys], pa.float64()
            ),
        }
    )
    return pa.table(columns)


def run_privacy_stats(config: StatsConfig, spark: SparkSession | None = None) -> dict:
    """Compute Nw/Sw for every (setting, word); write per_word.parquet, summaries, plots, manifest.

    The tables and plots are made on the driver in a scratch directory, then committed
    through the session's file system like every report (``reports.ReportOutput``: hidden
    stage, manifest last).
    """
    started = time.time()
    if not config.output:
        raise ConfigError("output: give the directory for the statistics (--output DIR)")
    spark = spark or get_session(config.master, remote=config.remote)
    with ReportOutput(
        spark,
        config.corpus,
        config.output,
        config.mode,
        "statistics",
        command="privacy-stats",
        writes=local_writes(config),
    ) as out:
        return _run(config, spark, out, started)


def _run(config: StatsConfig, spark: SparkSession, out: ReportOutput, started: float) -> dict:
    """The statistics of ``run_privacy_stats``, written into ``out.local`` and committed by ``out``."""
    run_id = out.run_id
    work = resources.scratch_dir() / f"stats-{run_id}"
    work.mkdir()
    shipment = None
    try:
        t0 = time.perf_counter()
        specs = config.settings()
        grid = prepare_grid(config, specs, work)
        emb, vocab_rows = grid.embeddings, grid.vocab_rows
        word_rows, rule = choose_words(config, emb, vocab_rows, spark)
        items = plan(specs, word_rows, config.runs, config.words_per_task, config.runs_per_task)
        shipment = resources.ship(spark, lambda d: grid.write_bundle(d, config.embeddings_dir))
        prep_s = time.perf_counter() - t0

        t0 = time.perf_counter()
        describe(
            spark,
            "privacy-stats",
            f"Nw/Sw of {len(word_rows)} words at {len(items)} work items",
            run_id,
            connect=is_connect(spark),
        )
        result = spark_per_word(spark, items, new_job_key(config.seed), shipment.name)
        draws = len(specs) * len(word_rows) * config.runs
        compute_s = time.perf_counter() - t0

        t0 = time.perf_counter()
        exact = exact_statistics(grid, word_rows, config.runs)
        exact_s = time.perf_counter() - t0
        table = per_word_table(specs, result, emb.words, exact, word_rows)
        local = out.local
        pq.write_table(table, local / "per_word.parquet")
        summary = report.write_summary(table, local)
        plots = report.write_plots(table, local, len(vocab_rows), emb.name)
        manifest = {
            "dpspark_version": dpspark.__version__,
            "command": "privacy-stats",
            "run_id": run_id,
            "started_at": datetime.fromtimestamp(started, timezone.utc).isoformat(),
            "epsilons": config.grid_epsilons(),
            **grid_facts(specs, grid.space),  # each family's facts of the grid (the noise family's λ grid)
            "mechanisms": list(dict.fromkeys(spec.name for spec in specs)),
            "settings": grid.facts(),
            "exact_statistics": sorted({spec.name for spec in specs if exact[specs.index(spec)] is not None}),
            "runs": config.runs,
            "words": int(len(word_rows)),
            "word_rule": rule,
            **mechanism_fields(config, emb, vocab_rows, grid.annoy),
            "draws": draws,
            "tasks": len(items),
            "timings": {
                "preparation_s": round(prep_s, 3),
                "statistics_s": round(compute_s, 3),
                "exact_statistics_s": round(exact_s, 3),
                "draws_per_s": round(draws / compute_s, 1),
            },
            "files": ["per_word.parquet", "summary.csv", "summary.md", *plots],
            "summary": summary,
            "duration_s": round(time.time() - started, 3),
        }
        manifest["status"] = "succeeded"
        out.commit(manifest)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if shipment is not None:
            shipment.close()
    log.info(json.dumps({"event": "privacy_stats_finished", "draws": draws, "duration_s": manifest["duration_s"]}))
    return manifest
